"""A probe client's HTTP sending: credentials, TLS context, stale-connection resend,
trace stamps, and the POST that follows 307/308 redirects.

``Sender`` owns the httpx pool and the request ids and POSTs a probe's body
(``post``); ``Secrets`` holds everything the client sends, for the other parts to
scrub with.  Beside them: ``shared_ssl_context`` (one TLS context per verify
setting), ``OriginCredentials`` (the URL's credentials, sent only to its origin),
``ResendOnStaleConnection`` (the transport that resends once on a keep-alive
connection the server closed); each POST carries the httpcore trace hook whose stamps
start the TTFT clock (``bounded.tracer``).  The clock itself is read in ``stream``.
"""

from __future__ import annotations

import base64
import functools
import os
import ssl
from typing import Any

import httpx

from prefilltui.measure import bounded
from prefilltui.measure import gateway
from prefilltui.measure import server as _server
from prefilltui.measure.proxy import ProxyChoice
from prefilltui.model.probe_notes import Redirect, Resend
from prefilltui.model.redact import (UrlCredentials, display_url, is_secret_param,
                                     scrub_secrets, split_credentials)
from prefilltui.model.types import ProbeResult

@functools.lru_cache(maxsize=2)
def shared_ssl_context(verify: bool) -> ssl.SSLContext:
    """One TLS context per ``verify`` setting for every client of the process: loading
    the CA bundle costs ~1 MiB and ~20 ms per context, which an exporter with hundreds
    of targets would pay once per target."""
    return httpx.create_ssl_context(verify=verify)


class OriginCredentials(httpx.Auth):
    """The credentials a server URL carried (``redact.split_credentials``), sent only to
    that URL's own origin: its query parameters on every request, and its
    ``user:password`` as the ``Authorization: Basic`` header (``basic``; None when an
    API key is sent instead).  A request to another origin (a redirect elsewhere)
    gets none of them; the same origin is ``gateway.same_origin``'s, the API key's rule
    (an upgrade of the same host from http to https keeps them)."""

    def __init__(self, root: str, basic: str | None,
                 params: tuple[tuple[str, str], ...]) -> None:
        self._origin = httpx.URL(root).copy_with(path="/", query=None, fragment=None)
        self._basic = basic
        self._params = params

    def auth_flow(self, request: httpx.Request):
        if gateway.same_origin(self._origin, request.url):
            if self._params:
                request.url = request.url.copy_merge_params(self._params)
            if self._basic is not None and "Authorization" not in request.headers:
                request.headers["Authorization"] = self._basic
        yield request


class ResendOnStaleConnection(httpx.AsyncHTTPTransport):
    """An httpx transport that resends a request once when a reused keep-alive
    connection turns out to be closed by the server before any response byte
    ("Server disconnected without sending a response").  llama-server closes a
    connection after some streamed responses; without this the next request on it
    would fail although the server never saw it.  The resend opens a new connection,
    whose connect time the probe records separately (``connect_s``) and keeps out of
    TTFT.  ``resent`` counts the resends.
    """

    resent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except httpx.RemoteProtocolError as e:
            if "without sending a response" not in str(e):
                raise
            self.resent += 1
            entry = Resend("stale connection: the server closed it before any response byte; "
                           "resent once on a new connection")
            log = request.extensions.get(RESENDS)
            if isinstance(log, list):  # the probe's record of this request's resends
                log.append(entry)
            try:
                return await super().handle_async_request(request)
            except httpx.HTTPError as e2:
                entry.resend_error = _server.describe_exc(e2)[:200]
                raise


#: Request extension under which ``ResendOnStaleConnection`` lists a request's resends.
RESENDS = "prefilltui.resends"
#: Header carrying each probe's request id (``notes.request_id``), so a server's
#: log can be matched with the run file request by request (vLLM takes it as its
#: request id with --enable-request-id-headers; gateways log it).
REQUEST_ID_HEADER = "X-Request-Id"


#: Most characters of a header value kept in a probe's notes (a content type is < 100;
#: a hostile server may send 100 KB, which every run-file line would repeat).
MAX_HEADER_NOTE = 200


def clip_header(value: str | None) -> str:
    """A header value as kept in notes: at most ``MAX_HEADER_NOTE`` characters."""
    v = value or ""
    return v if len(v) <= MAX_HEADER_NOTE else v[:MAX_HEADER_NOTE] + "…"


class _KeyToOrigin:
    """An httpx request hook that drops an API key sent in a header of its own
    (``api-key``) from a request to another origin than ``root``'s (a redirect
    elsewhere): httpx drops only ``Authorization`` there.  Runs on every hop."""

    def __init__(self, root: str, header: str) -> None:
        self._origin = httpx.URL(root).copy_with(path="/", query=None, fragment=None)
        self._header = header

    async def __call__(self, request: httpx.Request) -> None:
        if not gateway.same_origin(self._origin, request.url):
            request.headers.pop(self._header, None)


class Secrets:
    """Every secret a client sends (the API key, the URL's password and secret query
    values, the proxy's credentials), scrubbed from whatever comes back: a proxy's 407
    page may echo its Proxy-Authorization.  ``scrub`` is called before any cut."""

    def __init__(self, key: str | None, others: tuple[str, ...]) -> None:
        self._key = key
        self._others = others

    def scrub(self, text: str | None) -> str | None:
        """``text`` with the API key and the URL's credentials replaced by ``***``
        where they can appear (``redact.scrub_secrets``)."""
        text = scrub_secrets(text, self._key)
        for secret in self._others:
            text = scrub_secrets(text, secret)
        return text

    def scrub_json(self, value: Any, depth: int = 0) -> Any:
        """A decoded JSON value with every string in it scrubbed (``scrub``)."""
        if isinstance(value, str):
            return self.scrub(value)
        if depth > 50:
            return value if isinstance(value, (int, float, bool)) or value is None else None
        if isinstance(value, dict):
            return {self.scrub(str(k)): self.scrub_json(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [self.scrub_json(v, depth + 1) for v in value]
        return value


class Sender:
    """The HTTP side of a probe client: one httpx pool with the client's credentials,
    TLS settings, proxy and keep-alive limits; the POST of a probe (``post``) with its
    307/308 redirects; and the request ids (``next_request_id``).

    ``creds`` is the server URL split by ``redact.split_credentials``; ``root`` is its
    clean root.  The API key goes as ``Authorization: Bearer``, or in ``key_header``
    when that is another header (Azure's ``api-key``: dropped, as httpx drops
    Authorization, from a request to another origin); the URL's ``user:password`` as
    Basic auth when no key is set (said in ``notices``); ``params`` (the URL's query,
    ``urls.ServerUrls.params``) on every request to its origin (``OriginCredentials``).
    ``secrets`` holds everything sent, for the other parts to scrub with.

    Raises:
        ValueError: an API key that cannot be sent in an HTTP header (said without it).
    """

    def __init__(self, root: str, creds: UrlCredentials, api_key: str | None, *,
                 proxy: ProxyChoice, verify: bool, timeout: float, max_connections: int,
                 notices: dict[str, str], params: tuple[tuple[str, str], ...] | None = None,
                 key_header: str = "Authorization") -> None:
        if api_key is not None and not (api_key.isascii() and api_key.isprintable()):
            # said without the key: httpx would echo it in the error
            raise ValueError("the API key contains characters that cannot be sent in an "
                             "HTTP header (a control character or non-ASCII)")
        params = creds.params if params is None else params
        #: the header the API key goes in ("Authorization" as a Bearer token, else as is)
        self.key_header = key_header
        bearer = key_header.lower() == "authorization"
        headers = {"Accept-Encoding": bounded.ACCEPT_ENCODING}
        if api_key:
            headers[key_header] = f"Bearer {api_key}" if bearer else api_key
        basic = None
        if creds.has_userinfo and api_key:
            notices["URL user:password not sent"] = (
                "the URL's user:password is not sent: the API key is (Authorization: "
                "Bearer), and a request carries one Authorization header" if bearer else
                f"the URL's user:password is not sent: the API key is ({key_header})")
        elif creds.has_userinfo:
            pair = f"{creds.username or ''}:{creds.password or ''}".encode()
            basic = "Basic " + base64.b64encode(pair).decode("ascii")
            notices["Basic auth from the URL"] = (
                "the URL's user:password is sent as HTTP Basic auth (no API key is set)")
        pcreds = split_credentials(proxy.url) if proxy.url is not None else None
        upair = (f"{creds.username or ''}:{creds.password or ''}" if basic else None)
        ppair = (f"{pcreds.username or ''}:{pcreds.password or ''}"
                 if pcreds is not None and pcreds.has_userinfo else None)
        self.secrets = Secrets(api_key, tuple(
            v for v in (api_key, creds.password, upair, creds.username if basic else None,
                        *(v for k, v in params if is_secret_param(k)),
                        pcreds.password if pcreds else None, ppair) if v))
        #: the pool's transport (``ResendOnStaleConnection``)
        self.transport = ResendOnStaleConnection(
            verify=shared_ssl_context(verify),
            # discovery asks up to 4 things at once; probes and scrapes go one at a
            # time, so a prober keeps one connection (a long-running prober holds 1 fd,
            # not 4); a load generator (more connections) keeps them all
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=1 if max_connections <= 4
                                else max_connections,
                                keepalive_expiry=300.0),
            proxy=proxy.url)
        # GETs (discovery, /metrics) follow redirects (httpx drops the API key on a
        # cross-origin one); a probe's POST follows only 307/308 itself (``post``).  The
        # URL's credentials go only to the server's own origin (``OriginCredentials``).
        hooks = {} if bearer or not api_key else {"request": [_KeyToOrigin(root, key_header)]}
        self._http = httpx.AsyncClient(
            headers=headers, transport=self.transport,
            auth=OriginCredentials(root, basic, params),
            timeout=httpx.Timeout(timeout, connect=10.0), follow_redirects=True,
            max_redirects=gateway.MAX_REDIRECTS, trust_env=False, event_hooks=hooks)
        self._session_id = os.urandom(4).hex()  # request ids: prefilltui-<this>-<n>
        self._requests = 0

    @property
    def http(self) -> httpx.AsyncClient:
        """The httpx pool (auth header, TLS settings, keep-alive)."""
        return self._http

    async def aclose(self) -> None:
        await self._http.aclose()

    def next_request_id(self, role: str = "") -> str:
        """``prefilltui-<client session>-<n>``: the X-Request-Id of the next request;
        ``prefilltui-<role>-<client session>-<n>`` for a request of another role than a
        probe's (``"load"``: the background load's, never matched to a probe)."""
        self._requests += 1
        return f"prefilltui-{role + '-' if role else ''}{self._session_id}-{self._requests}"

    async def post(self, url: str, body: dict, r: ProbeResult, stamps: dict[str, float],
                   rid: str | None = None, resends: list[Resend] | None = None
                   ) -> httpx.Response:
        """POST ``body`` (streamed), following 307/308 redirects that keep the method
        and body (at most ``gateway.MAX_REDIRECTS``; the API key only to the same
        origin); ``notes.redirected`` says where to.  Other 3xx are answered
        as they are (``ErrorReader.http_error`` explains them).  ``stamps`` gets the
        trace stamps (``bounded.tracer``); ``resends`` the stale-connection resends."""
        payload = bounded.json_request(body)  # a server's own odd model id round-trips
        accept = {"Accept": "text/event-stream", "Accept-Encoding": "identity",
                  REQUEST_ID_HEADER: rid or self.next_request_id(), **payload["headers"]}
        ext = {"trace": bounded.tracer(stamps), RESENDS: [] if resends is None else resends}
        req = self._http.build_request("POST", url, content=payload["content"], headers=accept,
                                       extensions=ext)
        origin = req.url
        resp = await self._http.send(req, stream=True, follow_redirects=False)
        hops = 0
        while resp.status_code in gateway.KEEP_METHOD and hops < gateway.MAX_REDIRECTS:
            target = gateway.redirect_target(req, resp)
            if target is None:
                break
            await resp.aclose()
            hops += 1
            req = self._http.build_request("POST", target, content=payload["content"],
                                           headers=accept, extensions=ext)
            if not gateway.same_origin(origin, target):
                req.headers.pop("Authorization", None)
                req.headers.pop(self.key_header, None)
            r.notes.redirected = Redirect(status=resp.status_code, to=clip_header(display_url(str(target))),
                                          hops=hops, key_sent=self.key_header in req.headers)
            resp = await self._http.send(req, stream=True, follow_redirects=False)
        return resp
