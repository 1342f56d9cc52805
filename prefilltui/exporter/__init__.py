"""``prefilltui exporter``: probe servers continuously and serve their prefill health
to Prometheus.

``config``    TargetConfig and the TOML target file.
``target``    TargetProber: one paced continuous sweep, its window fit and snapshots.
``snapshot``  TargetSnapshot: what /metrics shows for one target, frozen.
``collector`` the metric families built from snapshots at scrape time.
``fleet``     the set of targets: started in the background, replaced on SIGHUP; the
              target count and open-file limits.
``discovery`` targets from Prometheus' file_sd / http_sd formats; ``--shard``'s hashmod.
``http``      the pages (/metrics, /probe?target=, /-/ready) and their bounded server.
Imports no textual.
"""

from prefilltui.exporter.config import TargetConfig, load_toml
from prefilltui.exporter.snapshot import TargetSnapshot
from prefilltui.exporter.target import TargetProber

__all__ = ["TargetConfig", "TargetProber", "TargetSnapshot", "load_toml"]
