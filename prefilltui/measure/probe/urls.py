"""Where a server's API lives, from the base URL a user pastes.

The shapes, first match wins (``server_urls``):

  Azure deployment  ``.../openai/deployments/NAME`` on any host, with or without the
                    endpoint pasted after it (``/chat/completions``, ``/completions``)
                    and ``?api-version=V``: the URL the OpenAI SDK's ``AzureOpenAI`` and
                    LiteLLM's ``azure/`` provider build from an endpoint and a deployment.
                    The API is the deployment itself (no ``/v1`` under it); every request
                    carries ``api-version`` (the URL's, else ``AZURE_DEFAULT_API_VERSION``,
                    as LiteLLM does); the key goes as the ``api-key`` header; the model
                    is NAME unless ``--model`` names one; probes use the chat API.
  Azure resource    an Azure host (``AZURE_HOST_SUFFIXES``) with no path or ``/openai``:
                    with ``--model NAME`` it is that deployment (the SDK's
                    ``azure_endpoint`` + ``azure_deployment``); without, the OpenAI shape
                    and a notice that names what to pass.
  Azure v1          ``.../openai/v1`` on an Azure host: Azure's OpenAI-style API, the
                    OpenAI shape with the key as ``api-key``.
  OpenAI            anything else: the API under ``/v1`` (a trailing ``/v1`` is the same
                    URL), the key as ``Authorization: Bearer``.

Whatever the shape, the URL's query (``api-version``, a gateway's own parameters) is
sent on every request to the server's origin: probes, discovery, tokenize counts,
``/metrics`` scrapes (``sending.OriginCredentials``).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from prefilltui.measure import server as _server

#: The api-version a deployment URL without one is asked with: the latest GA version of
#: Azure OpenAI's data-plane inference API (Microsoft Learn, "Azure OpenAI API version
#: lifecycle", 2024-10-21), the one a real deployment URL was pasted with.
AZURE_DEFAULT_API_VERSION = "2024-10-21"
#: Host name endings of Azure OpenAI resources (Azure OpenAI, Azure AI services,
#: Azure AI Foundry endpoints).
AZURE_HOST_SUFFIXES = (".openai.azure.com", ".cognitiveservices.azure.com",
                       ".services.ai.azure.com")
#: The environment variable the OpenAI SDK's ``AzureOpenAI`` reads the key from; read
#: for an Azure URL when ``--api-key-env`` is left at its default (``session``).
AZURE_KEY_ENV = "AZURE_OPENAI_API_KEY"
#: The header Azure OpenAI takes an API key in (``Authorization`` is for Entra tokens).
AZURE_KEY_HEADER = "api-key"

_DEPLOYMENT = re.compile(r"^(?P<base>.*?/openai/deployments/(?P<name>[^/]+))"
                         r"(?:/(?:chat/completions|completions|responses))?/*$", re.I)


@dataclass(frozen=True)
class ServerUrls:
    """Where one server's requests go.

    root: where discovery asks what the server is (``/props``, ``/metrics``...; for an
    Azure deployment, the deployment URL); v1: the API base the ``--api`` paths go
    under; params: the query sent on every request (the URL's, plus a default
    ``api-version`` where one was added); key_header: "Authorization" (Bearer) or
    "api-key"; deployment: the Azure deployment name, or None; api_version: the
    api-version sent, or None; models_url: what discovery and warm-up GET;
    notices: (label, sentence) pairs the client says once.
    """

    root: str
    v1: str
    params: tuple[tuple[str, str], ...] = ()
    key_header: str = "Authorization"
    deployment: str | None = None
    api_version: str | None = None
    models_url: str = ""
    notices: tuple[tuple[str, str], ...] = ()


def is_azure_host(url: str) -> bool:
    """Whether ``url``'s host is an Azure OpenAI resource (``AZURE_HOST_SUFFIXES``);
    False for a URL that does not parse (its own check says why)."""
    try:
        host = urllib.parse.urlsplit(url if "://" in url else "http://" + url).hostname
    except ValueError:
        return False
    return (host or "").lower().rstrip(".").endswith(AZURE_HOST_SUFFIXES)


def is_azure(url: str) -> bool:
    """Whether ``url`` (as pasted, query and credentials allowed) is one of the Azure
    shapes: a deployment path on any host, or any URL of an Azure host.  Never raises."""
    try:
        path = urllib.parse.urlsplit(url.strip() if "://" in url else "http://" + url).path
    except ValueError:
        return False
    return bool(_DEPLOYMENT.match(path.rstrip("/"))) or is_azure_host(url)


def server_urls(url: str, params: tuple[tuple[str, str], ...] = (),
                model: str | None = None) -> ServerUrls:
    """The ``ServerUrls`` of ``url`` (without credentials and query: ``params`` is its
    query, ``redact.split_credentials``), ``model`` the one asked for (``--model``)."""
    parts = urllib.parse.urlsplit(url.strip())
    path = parts.path.rstrip("/")
    origin = urllib.parse.urlunsplit(parts._replace(path="", query="", fragment=""))
    m = _DEPLOYMENT.match(path)
    if m is None and is_azure_host(url) and path.lower() in ("", "/openai") and model:
        m = _DEPLOYMENT.match(f"/openai/deployments/{urllib.parse.quote(model, safe='')}")
    if m is not None:
        return _deployment(origin, m, params)
    root, v1 = _server.split_base_url(url)
    if not is_azure_host(url):
        return ServerUrls(root, v1, params, models_url=v1 + "/models")
    notices: tuple[tuple[str, str], ...] = ()
    if path.lower() in ("", "/openai"):
        notices = (("Azure resource URL", (
            "the URL is an Azure OpenAI resource, not a deployment: pass --model "
            "DEPLOYMENT, or paste the deployment's URL (.../openai/deployments/NAME"
            "?api-version=...)")),)
    return ServerUrls(root, v1, params, key_header=AZURE_KEY_HEADER,
                      models_url=v1 + "/models", notices=notices)


def _deployment(origin: str, m: re.Match, params: tuple[tuple[str, str], ...]) -> ServerUrls:
    base = origin + m.group("base")
    name = urllib.parse.unquote(m.group("name"))
    version = next((v for k, v in params if k.lower() == "api-version"), None)
    notices = []
    if not version:
        version = AZURE_DEFAULT_API_VERSION
        params = (*(kv for kv in params if kv[0].lower() != "api-version"),
                  ("api-version", version))
        notices.append(("api-version added", (
            f"the deployment URL has no api-version: requests ask for {version} (the "
            "latest GA version); add ?api-version=... to the URL to choose")))
    notices.append((f"Azure deployment {name}", (
        f"an Azure OpenAI deployment ({name}, api-version {version}): probes go to the "
        "deployment itself (no /v1 under it; the chat API unless --api responses) with the "
        "key as the api-key header; it lists no models and has no tokenize endpoint or "
        "/metrics, so prompt lengths come from its usage counts")))
    prefix = m.group("base")[: m.group("base").lower().rindex("/openai/deployments/")]
    return ServerUrls(base, base, params, key_header=AZURE_KEY_HEADER, deployment=name,
                      api_version=version, models_url=origin + prefix + "/openai/models",
                      notices=tuple(notices))
