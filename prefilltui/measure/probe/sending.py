"""The connection side of a probe: TLS context, credentials, stale-connection resend,
trace stamps, and the POST that follows 307/308 redirects.

``shared_ssl_context`` (one TLS context per verify setting), ``OriginCredentials``
(the URL's credentials, sent only to its origin), ``ResendOnStaleConnection`` (the
transport that resends once on a keep-alive connection the server closed), the
httpcore trace hook whose stamps start the TTFT clock (``tracer``, ``connect_time``),
and ``Sending``, the part of ``ProbeClient`` that POSTs a probe's body
(``_send``).  The clock itself is read in ``probe_read``.
"""

from __future__ import annotations

import functools
import ssl
import time

import httpx

from prefilltui.measure import bounded
from prefilltui.measure import gateway
from prefilltui.measure import server as _server
from prefilltui.model.probe_notes import Redirect, Resend
from prefilltui.model.redact import display_url
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


_SEND_EVENTS = ("http11.send_request_headers.started", "http2.send_request_headers.started")


def tracer(stamps: dict[str, float]):
    """An httpcore trace hook recording perf_counter stamps: connect start/ready, and
    ``send`` = the moment the request's bytes start to go out (the last stamp wins,
    so a resent request is timed from its own send)."""
    async def trace(name: str, info: dict) -> None:
        if name in _SEND_EVENTS:
            stamps["send"] = time.perf_counter()
        elif name in ("connection.connect_tcp.started", "connection.connect_tcp.complete",
                      "connection.start_tls.complete"):
            stamps[name] = time.perf_counter()
            if name != "connection.connect_tcp.started":
                stamps["ready"] = stamps[name]
    return trace


def connect_time(stamps: dict[str, float]) -> float | None:
    t0 = stamps.get("connection.connect_tcp.started")
    t1 = stamps.get("ready")
    return None if t0 is None or t1 is None else t1 - t0


class Sending:
    """Mixin of ``ProbeClient``: the POST of a probe's body.  Needs ``self._http`` (the
    httpx client) and ``self._next_request_id()``."""

    _http: httpx.AsyncClient

    async def _send(self, url: str, body: dict, r: ProbeResult, stamps: dict[str, float],
                    rid: str | None = None, resends: list[Resend] | None = None
                    ) -> httpx.Response:
        """POST ``body`` (streamed), following 307/308 redirects that keep the method
        and body (at most ``gateway.MAX_REDIRECTS``; the API key only to the same
        origin); ``notes.redirected`` says where to.  Other 3xx are answered
        as they are (``_http_error`` explains them)."""
        payload = bounded.json_request(body)  # a server's own odd model id round-trips
        accept = {"Accept": "text/event-stream", "Accept-Encoding": "identity",
                  REQUEST_ID_HEADER: rid or self._next_request_id(), **payload["headers"]}
        ext = {"trace": tracer(stamps), RESENDS: [] if resends is None else resends}
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
            r.notes.redirected = Redirect(status=resp.status_code, to=clip_header(display_url(str(target))),
                                          hops=hops, key_sent="Authorization" in req.headers)
            resp = await self._http.send(req, stream=True, follow_redirects=False)
        return resp
