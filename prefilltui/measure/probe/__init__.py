"""One-token streaming probes (the package's face): ``ProbeClient``."""

from prefilltui.measure.probe.client import ProbeClient, scrub_key

__all__ = ["ProbeClient", "scrub_key"]
