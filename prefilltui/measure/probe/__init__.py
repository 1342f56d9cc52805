"""One-token streaming probes: the probe client and what the rest of the code may use
of it (an import-linter contract keeps its modules behind this face).

``ProbeClient`` (``client``) is composed of parts it builds itself, one module each:
``sending`` (the httpx pool, credentials, redirects, request ids), ``body`` (the
request body and the fields a server rejected), ``stream`` (the read loop and its
timing rules), ``errors`` (error answers), ``side`` (discovery, calibration, warm-up,
tokenize counts), ``kinds`` (what a probe noticed about the path: buffering, the
Responses API, another model), ``values`` (server counts and times, vetted) and
``urls`` (where requests go: the OpenAI shape, an Azure deployment).  The session
asks ``is_azure(url)`` to read the key from ``AZURE_KEY_ENV`` too, and gives the
clients of one session one ``Rejections`` (the fields the server rejected).
"""

from prefilltui.measure.probe.body import Rejections
from prefilltui.measure.probe.client import ProbeClient
from prefilltui.measure.probe.sending import REQUEST_ID_HEADER
from prefilltui.measure.probe.urls import AZURE_KEY_ENV, is_azure

__all__ = ["AZURE_KEY_ENV", "ProbeClient", "REQUEST_ID_HEADER", "Rejections", "is_azure"]
