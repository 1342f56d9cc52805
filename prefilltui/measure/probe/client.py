"""One-token streaming probes: exact, cache-proof TTFT.

A probe is one ``stream: true`` request with ``max_tokens: 1`` to
``/v1/completions`` (or ``/v1/chat/completions``).  Clock: ``time.perf_counter``
from just before the request is handed to httpx to the moment the read that
completes the first SSE event carrying a generated token returns (see
``prefilltui.measure.sse``).  If a new TCP/TLS connection had to be opened for the
request, its set-up time is recorded as ``connect_s`` and taken out of TTFB/TTFT
(the clock starts when the connection is ready).  ``probe()`` never raises for
server or network failures: it returns ``ok=False`` with an ``error_kind``.

A probe's data is complete at ``data: [DONE]``, once the token and its
``finish_reason`` have come, at a second token (the server ignored ``max_tokens: 1``:
closed at once), or ``TOKEN_TAIL_S`` after the token; what the server does after that
(keep-alive comments, a close without the chunked terminator) is read for at most
``POST_COMPLETION_GRACE_S``, never fails the probe, and is noted in ``notes``.  What
gateways and proxies do (another content type, 307/308 redirects, compression,
buffering, hidden tokens, HTML sign-in pages, the Responses API, proxies) is
recognised here with ``gateway.py``, ``proxy.py`` and ``probe_kinds.py``
(docs/measurement.md, "Gateways, proxies and unusual servers").

The client is one class assembled from parts, one module each:
``probe_request`` (the body, rejected fields), ``probe_http`` (TLS, credentials,
the POST and its redirects, trace stamps), ``probe_read`` (the stream read loop and
its timing rules), ``probe_errors`` (error answers), ``probe_values`` (server counts
and times), ``probe_side`` (discovery, calibration, warm-up, tokenize counts).  This
module holds the client's state and ``probe()``, which runs one probe through them.
SSE framing (``sse.py``), prompts (``prompts.py``) and discovery (``server.py``) are
apart.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from typing import Any

import httpx

from prefilltui.model import defaults
from prefilltui.measure import bounded
from prefilltui.measure import gateway
from prefilltui.measure.probe import kinds as _kinds
from prefilltui.measure import server as _server
from prefilltui.measure.probe.errors import ErrorReading
from prefilltui.measure.probe.sending import (OriginCredentials, ResendOnStaleConnection,
                                           Sending, shared_ssl_context)
from prefilltui.measure.probe.stream import StreamReading
from prefilltui.measure.probe.body import API_PATHS, RequestBody
from prefilltui.measure.probe.side import SideRequests
from prefilltui.measure.probe.values import vet
from prefilltui.measure.proxy import ProxyChoice, choose_proxy
from prefilltui.model.prompts import LengthModel, PromptBuilder
from prefilltui.model.redact import is_secret_param, scrub_secrets, split_credentials
from prefilltui.model.probe_notes import RejectedField, Resend
from prefilltui.model.types import JsonObject, ProbeResult, ServerInfo


def scrub_key(text: str | None, key: str | None) -> str | None:
    """``redact.scrub_secrets`` (kept under its old name for callers and tests)."""
    return scrub_secrets(text, key)


class ProbeClient(SideRequests, RequestBody, Sending, StreamReading, ErrorReading):
    """An async client that discovers a server and fires one-token probes.

    ``async with ProbeClient(url) as c: info = await c.discover(); r = await c.probe(512)``.
    The API key is sent as ``Authorization: Bearer``; it is never put in results,
    error messages, logs or ``repr``.
    """

    def __init__(self, base_url: str, *, api: str = "completions", model: str | None = None,
                 api_key: str | None = None, timeout: float = defaults.TIMEOUT_S,
                 verify: bool = True,
                 extra_body: dict | None = None, seed: int | None = None,
                 proxy: str | None = None, max_connections: int = 4) -> None:
        if api not in API_PATHS:
            raise ValueError(f"api must be one of {', '.join(API_PATHS)}, not {api!r}")
        #: Things about this session a reader must know, once each, in order:
        #: short label (status line) -> sentence (summary).  E.g. a field the
        #: server rejected, prompt lengths that are estimates.
        self.notices: dict[str, str] = {}
        # Credentials leave the URL here, once: every URL derived from it (root, v1,
        # ServerInfo.base_url, tokenize, /metrics) holds none; the client sends them.
        url = base_url.strip()
        creds = split_credentials(url if "://" in url else "http://" + url)
        self.root, self.v1 = _server.split_base_url(creds.url)
        #: the proxy requests go through (``measure.proxy``); ProxyError (a
        #: ValueError) for an unusable --proxy or proxy variable
        self.proxy: ProxyChoice = choose_proxy(self.root, proxy)
        self.api = api
        self.model = model
        self.timeout = float(timeout)
        self.extra_body = dict(extra_body or {})
        self.info: ServerInfo | None = None
        api_key = (api_key or "").strip() or None
        if api_key is not None and not (api_key.isascii() and api_key.isprintable()):
            # said without the key: httpx would echo it in the error
            raise ValueError("the API key contains characters that cannot be sent in an "
                             "HTTP header (a control character or non-ASCII)")
        self._key = api_key
        headers = {"Accept-Encoding": bounded.ACCEPT_ENCODING}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        basic = None
        if creds.has_userinfo and api_key:
            self.notices["URL user:password not sent"] = (
                "the URL's user:password is not sent: the API key is (Authorization: "
                "Bearer), and a request carries one Authorization header")
        elif creds.has_userinfo:
            pair = f"{creds.username or ''}:{creds.password or ''}".encode()
            basic = "Basic " + base64.b64encode(pair).decode("ascii")
            self.notices["Basic auth from the URL"] = (
                "the URL's user:password is sent as HTTP Basic auth (no API key is set)")
        #: every secret this client sends (the key, the URL's password and secret query
        #: values, the proxy's credentials), scrubbed from whatever comes back: a
        #: proxy's 407 page may echo its Proxy-Authorization
        pcreds = (split_credentials(self.proxy.url) if self.proxy.url is not None
                  else None)
        upair = (f"{creds.username or ''}:{creds.password or ''}" if basic else None)
        ppair = (f"{pcreds.username or ''}:{pcreds.password or ''}"
                 if pcreds is not None and pcreds.has_userinfo else None)
        self._secrets = tuple(v for v in (api_key, creds.password, upair,
                                          creds.username if basic else None,
                                          *(v for k, v in creds.params if is_secret_param(k)),
                                          pcreds.password if pcreds else None, ppair)
                              if v)
        self._transport = ResendOnStaleConnection(
            verify=shared_ssl_context(verify),
            # discovery asks up to 4 things at once; probes and scrapes go one at a
            # time, so a prober keeps one connection (a long-running prober holds 1 fd,
            # not 4); a load generator (more connections) keeps them all
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=1 if max_connections <= 4
                                else max_connections,
                                keepalive_expiry=300.0),
            proxy=self.proxy.url)
        # GETs (discovery, /metrics) follow redirects (httpx drops the API key on a
        # cross-origin one); a probe's POST follows only 307/308 itself (_send).  The
        # URL's credentials go only to the server's own origin (``OriginCredentials``).
        self._http = httpx.AsyncClient(
            headers=headers, transport=self._transport,
            auth=OriginCredentials(self.root, basic, creds.params),
            timeout=httpx.Timeout(self.timeout, connect=10.0), follow_redirects=True,
            max_redirects=gateway.MAX_REDIRECTS, trust_env=False)
        self.builder = PromptBuilder(seed)
        self.lengths = LengthModel()
        self._dropped: set[str] = set()
        self._kept: set[str] = set()  # named in a 400 that was not about them
        self._replaced: set[str] = set()  # cap fields replaced (CAP_REPLACEMENTS)
        #: "streams" | "buffers" | "unknown" once a token-with-the-end probe asked
        #: (``probe_kinds.check_streaming``); None before
        self.streaming: str | None = None
        #: whether the server answers /v1/responses (asked on a 404/405), None before
        self.has_responses: bool | None = None
        self._last_error_body = ""
        self._session_id = os.urandom(4).hex()  # request ids: prefilltui-<this>-<n>
        self._requests = 0
        #: the model was discovery's pick (no --model): a refused one may be swapped for
        #: another listed model until a probe succeeds (probe_kinds.try_other_models)
        self._auto_model = model is None
        self._any_ok = False
        self.tried_models = 0

    @property
    def http(self) -> httpx.AsyncClient:
        """The client's httpx pool (auth header, TLS settings, keep-alive), for
        side requests to the same server such as ``/metrics`` scrapes."""
        return self._http

    def __repr__(self) -> str:
        return f"ProbeClient({self.root!r}, api={self.api!r}, model={self.model!r})"

    async def __aenter__(self) -> "ProbeClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _scrub(self, text: str | None) -> str | None:
        """``text`` with the API key and the URL's credentials replaced by ``***``
        where they can appear (``redact.scrub_secrets``).  Called before any cut."""
        text = scrub_secrets(text, self._key)
        for secret in self._secrets:
            text = scrub_secrets(text, secret)
        return text

    def _scrub_json(self, value: Any, depth: int = 0) -> Any:
        """A decoded JSON value with every string in it scrubbed (``_scrub``)."""
        if isinstance(value, str):
            return self._scrub(value)
        if depth > 50:
            return value if isinstance(value, (int, float, bool)) or value is None else None
        if isinstance(value, dict):
            return {self._scrub(str(k)): self._scrub_json(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [self._scrub_json(v, depth + 1) for v in value]
        return value


    async def probe(self, requested_tokens: int, *, warmup: bool = False, burst: bool = False,
                    prompt: str | None = None) -> ProbeResult:
        """Fire one probe of ``requested_tokens`` server-counted prompt tokens.

        A probe the server rejects for an optional field we add is resent at once
        without it (``notes.rejected_field`` keeps the rejection), and the
        field is left out of every later probe of this client."""
        r = ProbeResult(requested_tokens=int(requested_tokens), warmup=warmup, burst=burst,
                        api=self.api, model=self.model)
        words = None
        tok_count = None
        if prompt is None:
            try:
                prompt, words, tok_count = await self._prompt(requested_tokens)
            except Exception as e:  # never raise from a probe
                return self._fail(r, "protocol", f"prompt construction failed: {e}")
        body = self._body(prompt)
        await self._attempt(r, body)
        while (field := self._rejected_field(r, body)) is not None:
            label, replaced = self._reject(field, r)
            first = r
            r = ProbeResult(requested_tokens=first.requested_tokens, warmup=warmup, burst=burst,
                            api=self.api, model=self.model)
            r.notes.rejected_field = RejectedField(
                field=field, http_status=first.http_status,
                message=(self._scrub(first.error_message) or "")[:300], replaced_by=replaced)
            r.notes.resends = [*first.notes.resends, Resend(
                reason=f"HTTP {first.http_status} rejected the optional field {field}; "
                       "resent without it", request_id=first.notes.request_id)]
            body = self._body(prompt)
            await self._attempt(r, body)
            if r.http_status == first.http_status and r.error_message == first.error_message:
                # the same answer without the field: it was quoted, not the cause; the
                # answer may still name the one that is (the next candidate)
                (self._replaced if replaced else self._dropped).discard(field)
                self._kept.add(field)  # never retried for it again
                self.notices.pop(label, None)
                r.notes.rejected_field = None
                body = self._body(prompt)
        if _kinds.may_try_other_models(self, r, self._auto_model, self._any_ok):
            r = await _kinds.try_other_models(self, r, prompt)
        if r.notes.token_with_end and r.ok:
            await _kinds.settle_buffered(self, r)
        self._any_ok = self._any_ok or r.ok
        _kinds.note(self, r)
        _kinds.model_hint(self, r)
        vet(r)
        if r.notes.ignored:
            self.notices.setdefault(
                "server values ignored",
                "the server sent counts or times that cannot be true ("
                + "; ".join(r.notes.ignored)[:300]
                + "): they are ignored, never fitted (each probe's extra.ignored says which)")
        self._learn(r, words, tok_count)
        r.error_message = self._scrub(r.error_message)
        r.notes.after_complete = [self._scrub(m) for m in r.notes.after_complete]
        return r


    async def _attempt(self, r: ProbeResult, body: JsonObject) -> None:
        """Send ``body`` once and fill ``r`` (never raises for server or network faults)."""
        url = self.endpoint
        self._last_error_body = ""
        try:
            # asyncio.timeout runs the stream in this task (wait_for would add a task
            # and its scheduling to every probe).
            async with asyncio.timeout(self.timeout):
                await self._stream(url, body, r)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            what = "first token" if r.ttft_s is None else "end of stream"
            self._fail(r, "timeout", f"no {what} within {self.timeout:g} s")
        except httpx.ConnectError as e:
            self._fail(r, "connect", _server.describe_exc(e))
        except httpx.RemoteProtocolError as e:
            self._fail(r, "protocol", "stream cut off: " + _server.describe_exc(e))
        except (httpx.ReadError, httpx.WriteError, httpx.NetworkError) as e:
            self._fail(r, "connect", "connection lost: " + _server.describe_exc(e))
        except httpx.HTTPError as e:
            self._fail(r, "protocol", _server.describe_exc(e))
        if r.t_end is None:
            r.t_end = time.perf_counter()
            if r.t_send is not None:
                r.total_s = r.t_end - r.t_send

    def _learn(self, r: ProbeResult, words: int | None, tok_count: int | None) -> None:
        """Record the prompt length (server count > tokenize count > estimate) and
        feed the length model from a server count."""
        if r.prompt_tokens is None and tok_count is not None and r.ok:
            r.prompt_tokens, r.prompt_tokens_source = tok_count + round(self.lengths.offset), "tokenize"
        if r.prompt_tokens is None and r.ok:
            # No count from the server at all: the length the model predicts (the
            # requested one when nothing was learned) still places the probe.
            r.prompt_tokens = max(1, round(self.lengths.predict(words))) if words \
                else r.requested_tokens
            r.prompt_tokens_source = "estimate"
            self.notices.setdefault(
                "lengths estimated",
                "the server reports no prompt token count (no usage, timings or tokenize "
                "endpoint): prompt lengths are estimates, and so is the fit's x axis")
            return
        if r.prompt_tokens is None or r.prompt_tokens_source == "tokenize":
            return
        if tok_count is not None:
            self.lengths.update_offset(tok_count, r.prompt_tokens)
        elif words:
            self.lengths.update(words, r.prompt_tokens)

    def _fail(self, r: ProbeResult, kind: str, message: str | None) -> ProbeResult:
        """Mark ``r`` failed (the first failure wins); the message is scrubbed of
        secrets *before* it is cut to 1,000 characters."""
        if r.error_kind is None:
            r.ok, r.error_kind = False, kind
            r.error_message = (self._scrub(message) or kind)[:1000]
        return r

    def _next_request_id(self) -> str:
        """``prefilltui-<client session>-<n>``: the X-Request-Id of the next request."""
        self._requests += 1
        return f"prefilltui-{self._session_id}-{self._requests}"
