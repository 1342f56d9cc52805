"""One-token streaming probes: the probe client and what the rest of the code may use
of it (an import-linter contract keeps its modules behind this face).

``ProbeClient`` (``client``) is composed of parts it builds itself, one module each:
``sending`` (the httpx pool, credentials, redirects, request ids), ``body`` (the
request body and the fields a server rejected), ``stream`` (the read loop and its
timing rules), ``errors`` (error answers), ``side`` (discovery, calibration, warm-up,
tokenize counts), ``kinds`` (what a probe noticed about the path: buffering, the
Responses API, another model) and ``values`` (server counts and times, vetted).
"""

from prefilltui.measure.probe.client import ProbeClient, scrub_key

__all__ = ["ProbeClient", "scrub_key"]
