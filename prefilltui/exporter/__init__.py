"""``prefilltui exporter``: probe servers continuously and serve their prefill health
to Prometheus.

``config``    TargetConfig and the TOML target file.
``target``    TargetProber: one paced continuous sweep, its window fit and snapshots.
``collector`` the metric families built from snapshots at scrape time.
``http``      the WSGI app (/metrics, /probe?target=) and its threaded server.
Imports no textual.
"""

from prefilltui.exporter.config import TargetConfig, load_toml
from prefilltui.exporter.target import TargetProber, TargetSnapshot

__all__ = ["TargetConfig", "TargetProber", "TargetSnapshot", "load_toml"]
