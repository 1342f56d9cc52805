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

Over 400 lines because one probe's timing, stream reading and failure classification
interleave on the same read loop; SSE framing (``sse.py``), prompts (``prompts.py``)
and discovery (``server.py``) are apart.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import math
import os
import re
import ssl
import time
from typing import Any, Callable

import httpx

from prefilltui.model import defaults
from prefilltui.measure import bounded
from prefilltui.measure import gateway
from prefilltui.measure import probe_kinds as _kinds
from prefilltui.measure.jsonlines import JSONLinesAsSSE, looks_like_jsonlines
from prefilltui.measure import server as _server
from prefilltui.measure.proxy import ProxyChoice, choose_proxy
from prefilltui.model.prompts import LengthModel, PromptBuilder, build_prompt
from prefilltui.measure.sse import (SSEStreamDecoder, classify_chunk, classify_response_event,
                                    error_message, error_part)
from prefilltui.model.redact import (display_url, is_secret_param, scrub_secrets,
                                     split_credentials)
from prefilltui.model.probe_notes import Redirect, RejectedField, Resend
from prefilltui.model.jsontypes import loads as json_loads
from prefilltui.model.types import JsonObject, ProbeResult, ServerInfo

#: Cap on a streamed body (a one-token stream is a few KiB; 4 MiB means runaway).
MAX_STREAM_BYTES = 4 * 1024 * 1024
#: Cap on an error body that is read for its message.
MAX_ERROR_BYTES = 64 * 1024
#: Fields a probe adds beyond what a completion request needs.  A 400/422 answer
#: naming one of them or any of its sub-keys (``include_usage`` inside
#: ``stream_options``) drops it: the probe is resent once without it, and later
#: probes of the session never send it.  A field the user set (``extra_body``) is
#: never dropped.
OPTIONAL_FIELDS = ("stream_options", "ignore_eos", "cache_prompt", "temperature", "store")
#: The token cap's field, rejected by some servers: replaced by (field, value) and
#: resent, as an optional field is dropped.  ``max_tokens`` -> ``max_completion_tokens``
#: (OpenAI's newer models: "Unsupported parameter: 'max_tokens' ... Use
#: 'max_completion_tokens' instead"); ``max_output_tokens: 1`` -> 16 (the least the
#: OpenAI Responses API accepts).  A rejected replacement is dropped: the probe then
#: sends no cap, and the client closes the stream at the second token.
CAP_REPLACEMENTS = {"max_tokens": ("max_completion_tokens", 1),
                    "max_output_tokens": ("max_output_tokens", 16)}
CAP_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
#: After the first token, the rest of a one-token answer (finish_reason, usage,
#: [DONE]) comes at once; a server that sends nothing more is closed this long
#: after the token, and the probe stands (its TTFT is measured).
TOKEN_TAIL_S = 1.0
#: After a probe's data is complete ([DONE], or the token and its finish_reason),
#: keep reading at most this long: enough for the closing bytes a server sends at
#: once (the usage chunk after the finish chunk, [DONE], the chunked terminator
#: that lets the keep-alive connection be reused), short enough that a server
#: holding the stream open (keep-alive comments after [DONE]) costs a quarter
#: second, never a timeout.  Nothing read in it moves TTFT.
POST_COMPLETION_GRACE_S = 0.25
#: Word prompts sent during calibration (no tokenize endpoint: two lengths give the
#: server's tokens-per-word line before the first measured probe).
CALIBRATION_WORDS = (48, 240)

_CTX_PATTERNS = re.compile(
    r"context[ _-]?(size|length|window)|exceed_context|maximum context|n_ctx|"
    r"too many tokens|prompt is too long|input is too long|max_model_len|"
    r"context_length_exceeded|longer than the maximum",
    re.I,
)


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
    gets none of them."""

    def __init__(self, root: str, basic: str | None,
                 params: tuple[tuple[str, str], ...]) -> None:
        self._origin = httpx.URL(root).copy_with(path="/", query=None, fragment=None)
        self._basic = basic
        self._params = params

    def _same_origin(self, url: httpx.URL) -> bool:
        o = self._origin
        return (url.scheme, url.host, url.port) == (o.scheme, o.host, o.port)

    def auth_flow(self, request: httpx.Request):
        if self._same_origin(request.url):
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


def scrub_key(text: str | None, key: str | None) -> str | None:
    """``redact.scrub_secrets`` (kept under its old name for callers and tests)."""
    return scrub_secrets(text, key)


def context_numbers(err: Any, text: str) -> tuple[int | None, int | None]:
    """(prompt tokens, context limit) quoted in a context-length error, when given."""
    n_prompt = n_ctx = None
    if isinstance(err, dict):
        for k in ("n_prompt_tokens", "prompt_tokens", "n_tokens"):
            if isinstance(err.get(k), int):
                n_prompt = err[k]
        for k in ("n_ctx", "max_model_len", "context_length", "max_context_length"):
            if isinstance(err.get(k), int):
                n_ctx = err[k]
    m = re.search(r"maximum context length is (\d+)", text) or re.search(r"n_ctx[\"' :=]+(\d+)", text)
    if n_ctx is None and m:
        n_ctx = int(m.group(1))
    m = (re.search(r"(?:you )?requested (\d+) tokens", text)
         or re.search(r"n_prompt_tokens[\"' :=]+(\d+)", text)
         or re.search(r"\((\d+)\) exceeds", text))
    if n_prompt is None and m:
        n_prompt = int(m.group(1))
    return n_prompt, n_ctx


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP-date)."""
    if not value:
        return None
    try:
        v = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, v) if math.isfinite(v) else None
    try:
        from email.utils import parsedate_to_datetime
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError):
        return None


class ProbeClient:
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

    # -- discovery / warm-up
    async def discover(self) -> ServerInfo:
        """Fill and return ``self.info``.  Raises ``ServerUnreachable``."""
        try:
            info = await _server.discover(self._http, self.root, model=self.model,
                                          timeout=min(10.0, self.timeout))
        except _server.ServerUnreachable as e:
            raise _server.ServerUnreachable(self._scrub(str(e))) from None
        if self.model is None:
            self.model = info.model
        for n in info.notes:
            if "pass --model" in n:  # several models listed, or none that generates
                self.notices.setdefault(f"model {info.model}", n)
        if self.proxy.url is not None:
            info.proxy = display_url(self.proxy.url)
            self.notices.setdefault("via proxy", self.proxy.sentence())
        self.info = info
        return info

    async def calibrate(self, on_step: Callable[[str], None] | None = None
                        ) -> list[ProbeResult]:
        """Learn the server's prompt length before the first measured probe.

        With a tokenize endpoint and the completions API the tokenize count is the
        server's count: nothing to learn.  With chat, one request learns the chat
        template's tokens (server count - tokenize count).  Without tokenize, one
        request at each of ``CALIBRATION_WORDS`` fits tokens = offset + ratio *
        words from the server's ``usage``/``timings``.  The requests are ordinary
        probes (a rejected optional field is dropped here already), returned as
        warm-ups marked ``notes.calibration`` so the run file holds every request
        the server saw; they never enter a fit.  A server that reports no count
        teaches nothing; its probes' lengths are then estimates.

        ``on_step(text)`` is told, before each request, what it waits for and for how
        long at most (the request's timeout).  A request that fails ends calibration
        and is said once (``notices["calibration failed"]``).
        """
        out: list[ProbeResult] = []
        if self.info is None:
            return out
        if self.info.has_tokenize:
            if self.api == "chat":
                n = int(CALIBRATION_WORDS[0] * self.lengths.ratio)
                out.append(await self._calibration_probe(n, "1 of 1",
                                                         "the chat template's tokens", on_step))
        else:
            ctx = self.info.context_tokens
            for i, words in enumerate(CALIBRATION_WORDS, 1):
                n = round(self.lengths.predict(words))
                out.append(r := await self._calibration_probe(
                    min(n, ctx // 2) if ctx else n, f"{i} of {len(CALIBRATION_WORDS)}",
                    "the server's token count", on_step))
                if r.prompt_tokens_source not in ("usage", "timings"):
                    break  # no count from this server (or the request failed)
        for r in out:
            r.notes.calibration = True
        return out

    async def _calibration_probe(self, tokens: int, which: str, learns: str,
                                 on_step: Callable[[str], None] | None) -> ProbeResult:
        """One calibration request (a failure is noted once)."""
        if on_step is not None:
            on_step(f"calibrating prompt lengths (request {which}, ~{tokens} tokens, up to "
                    f"{self.timeout:g} s): learning {learns}")
        r = await self.probe(tokens, warmup=True)
        if not r.ok:
            self.notices.setdefault(
                "calibration failed",
                f"the calibration request ({tokens} tokens, before the first probe) failed "
                f"after {(r.total_s or 0):.1f} s ({r.error_kind}: {r.error_message}); prompt "
                "lengths start from the built-in estimate until a probe is counted")
        return r

    async def warm(self) -> float | None:
        """Open (or re-use) a keep-alive connection with a cheap GET; returns its
        connect time in seconds when a new connection was opened, else None."""
        stamps: dict[str, float] = {}
        try:
            await bounded.fetch(self._http, "GET", self.v1 + "/models",
                                max_bytes=bounded.MAX_MODELS_BYTES,
                                deadline_s=min(10.0, self.timeout),
                                extensions={"trace": _tracer(stamps)})
        except (httpx.HTTPError, TimeoutError):
            return None
        return _connect_time(stamps)

    async def _count(self, text: str) -> int | None:
        if self.info is None or not self.info.has_tokenize:
            return None
        return await _server.count_tokens(self._http, self.info, text,
                                          timeout=min(30.0, self.timeout))

    async def _prompt(self, tokens: int) -> tuple[str, int | None, int | None]:
        """A prompt of ``tokens`` server-counted tokens (``build_prompt``), its counting
        on the tokenize endpoint bounded by the probe's timeout in all: an endpoint too
        slow for that (a trickling answer) is given up for the session, said once, and
        the length model places the prompt, so no probe waits on it again."""
        counter = self._count if self.info and self.info.has_tokenize else None
        if counter is None:
            return await build_prompt(tokens, self.builder, self.lengths, None)
        try:
            async with asyncio.timeout(self.timeout):
                return await build_prompt(tokens, self.builder, self.lengths, counter)
        except TimeoutError:
            assert self.info is not None
            self.info.has_tokenize = False
            self.notices.setdefault(
                "tokenize too slow",
                f"the tokenize endpoint ({display_url(self.info.tokenize_url)}) took longer "
                f"than the {self.timeout:g} s timeout to count a prompt: it is not used "
                "again; prompt lengths come from the server's usage counts")
            return await build_prompt(tokens, self.builder, self.lengths, None)

    # -- the probe
    def _body(self, prompt: str, cap: int = 1) -> JsonObject:
        body: JsonObject = {"stream": True, "temperature": 0}
        if self.model:
            body["model"] = self.model
        if self.api == "responses":
            body.update(max_output_tokens=cap, input=prompt, store=False)
        else:
            body.update(max_tokens=cap, stream_options={"include_usage": True})
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        elif self.api == "completions":
            body["prompt"] = prompt
        for old in self._replaced:
            new, value = CAP_REPLACEMENTS[old]
            body.pop(old, None)
            body[new] = max(value, cap)
        kind = self.info.kind if self.info else "openai"
        if kind == "llama.cpp":
            body["cache_prompt"] = False
        if kind in ("llama.cpp", "vllm", "sglang"):
            body["ignore_eos"] = True  # a first-token EOS would read as "no token"
        body.update(self.extra_body)
        for k in self._dropped:
            body.pop(k, None)
        return body

    def _rejected_field(self, r: ProbeResult, body: JsonObject) -> str | None:
        """The optional field a 400/422 answer names (itself or any of its sub-keys,
        in any wording: "Unknown field: stream_options", "extraneous key
        [include_usage] is not permitted", "streamOptions.includeUsage", "max tokens
        is not supported"), or None.  When it names several, the one it names first:
        "unknown field `ignore_eos`, expected one of `model`, ..., `stream_options`"
        rejects ignore_eos, not stream_options.  A gateway may answer 200 and put the
        rejection in the stream, as an error event before any token: read the same way."""
        in_stream = r.error_kind == "stream_error" and r.ttft_s is None
        if not in_stream and (r.http_status not in (400, 422) or r.error_kind != "http"):
            return None
        said = _first_mentions(f"{r.error_message}\n{self._last_error_body}")
        best: tuple[int, str] | None = None
        for k in OPTIONAL_FIELDS + CAP_FIELDS:
            if k in self._replaced and CAP_REPLACEMENTS[k][0] == k:
                continue  # already at its replacement value
            if k in body and k not in self._dropped | self._kept and k not in self.extra_body:
                at = min((said[n] for n in {_norm(x) for x in _names(k, body[k])} if n in said),
                         default=None)
                if at is not None and (best is None or at < best[0]):
                    best = (at, k)
        return best[1] if best else None

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
        _vet(r)
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

    def _reject(self, field: str, r: ProbeResult) -> tuple[str, str | None]:
        """Leave ``field`` out of later bodies (or replace it, CAP_REPLACEMENTS) and
        say so once; returns (the notice's label, what replaced it or None)."""
        said = (self._scrub(r.error_message) or "")[:200]
        new = CAP_REPLACEMENTS.get(field)
        if new is not None and field not in self._replaced and new[0] not in self._dropped:
            self._replaced.add(field)
            what = f"{new[0]}: {new[1]}" if new[0] != field else f"{field}: {new[1]}"
            label = f"{what} for {field}" if new[0] != field else f"{field} {new[1]}"
            self.notices.setdefault(label, f"the server rejected {field} ({said}); probes "
                                           f"send {what} instead")
            return label, what
        self._dropped.add(field)
        label = f"sent without {field}"
        tail = (" (no token cap: the client closes each stream at the second token)"
                if field in CAP_FIELDS else "")
        self.notices.setdefault(label, f"the server rejected {field} ({said}); probes are "
                                       f"sent without it{tail}")
        return label, None

    @property
    def endpoint(self) -> str:
        """The URL probes are POSTed to (``API_PATHS`` of the API flavour)."""
        return self.v1 + API_PATHS[self.api]

    @property
    def token_cap(self) -> int | None:
        """The output-token cap the probes send (1, or 16 on a Responses API that
        needs it), or None when the server took none."""
        body = self._body("", 1)
        return next((body[k] for k in CAP_FIELDS if k in body), None)

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
        ext = {"trace": _tracer(stamps), RESENDS: [] if resends is None else resends}
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
            r.notes.redirected = Redirect(status=resp.status_code, to=_head(display_url(str(target))),
                                          hops=hops, key_sent="Authorization" in req.headers)
            resp = await self._http.send(req, stream=True, follow_redirects=False)
        return resp

    async def _stream(self, url: str, body: dict, r: ProbeResult) -> None:
        stamps: dict[str, float] = {}
        resends: list[Resend] = []
        rid = r.notes.request_id = self._next_request_id()
        r.started_at = time.time()
        t0 = r.t_send = time.perf_counter()
        try:
            resp = await self._send(url, body, r, stamps, rid, resends)
        finally:
            if resends:  # recorded whether or not the resend got an answer
                r.notes.resent_on_stale_connection = True
                r.notes.resends.extend(resends)
        try:
            r.connect_s = _connect_time(stamps)
            if r.connect_s is not None:
                r.notes.connect_excluded = True
            # TTFT runs from when the request's bytes start to go out (after pool
            # checkout and any connect), as a raw-socket client would time it.
            t0 = r.t_send = stamps.get("send", stamps.get("ready", t0))
            r.http_status = resp.status_code
            if resp.status_code != 200:
                await self._http_error(resp, r)
                return
            enc = resp.headers.get("content-encoding", "")
            if enc and enc.lower() != "identity":
                r.notes.content_encoding = _head(enc)  # decoded, bounded (measure.bounded)
            ctype = _head(resp.headers.get("content-type", ""))
            first = chunks = None
            # the first read tells what the body is, whatever it is labelled: an event
            # stream, JSON lines, or no stream at all (an HTML error page or a JSON error
            # labelled text/event-stream by a proxy)
            chunks = bounded.aiter_decoded(resp).__aiter__()
            try:
                head = await chunks.__anext__()
            except StopAsyncIteration:
                head = b""
            first = (time.perf_counter(), head)
            labelled = "text/event-stream" in ctype.lower()
            if gateway.looks_like_sse(head):
                if not labelled:
                    r.notes.content_type = ctype or "(none)"
            elif looks_like_jsonlines(ctype, head):
                # one JSON object a line (Ollama's native API, an NDJSON relay)
                conv = JSONLinesAsSSE()
                first = (first[0], conv.feed(head))
                chunks = conv.wrap(chunks).__aiter__()
                r.notes.content_type = f"{ctype or '(none)'} (JSON lines)"
            elif not labelled or gateway.not_a_stream(ctype, head):
                await self._not_a_stream(resp, r, ctype, head, chunks)
                return
            await self._read_events(resp, r, t0, first, chunks)
        finally:
            await resp.aclose()

    async def _not_a_stream(self, resp: httpx.Response, r: ProbeResult, ctype: str,
                            head: bytes, chunks) -> None:
        """A 200 answer that is no event stream: an HTML page (sign-in portal), one
        JSON completion (the server ignored ``stream: true``: buffered, TTFT cannot
        be known), a JSON error, or anything else (protocol)."""
        buf = bytearray(head)
        async for chunk in chunks:
            buf += chunk
            if len(buf) > MAX_ERROR_BYTES + _SCRUB_MARGIN:
                break
        r.t_end = time.perf_counter()
        # scrubbed before the cut: a key straddling it is masked whole
        text = (self._scrub(bytes(buf[:MAX_ERROR_BYTES + _SCRUB_MARGIN]).decode(
            "utf-8", "replace")) or "")[:MAX_ERROR_BYTES]
        self._last_error_body = text
        if gateway.looks_like_html(ctype, text):
            self._fail(r, "html_page", gateway.html_message(200, text))
            return
        try:
            obj = json_loads(text)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("choices") or obj.get("output"), list):
            r.arrival_s = r.t_end - r.t_send if r.t_send is not None else None
            self._fail(r, "buffered", f"the server did not stream (content-type {ctype!r}): one "
                       "JSON body came at the end, so TTFT cannot be known; "
                       + _kinds.BUFFER_ADVICE)
            return
        self._classify_body_error(r, text, f"server did not stream (content-type {ctype!r})")

    async def _read_events(self, resp: httpx.Response, r: ProbeResult, t0: float,
                           first: tuple[float, bytes] | None = None, rest=None) -> None:
        """Read the stream, stamping TTFT at the read that completes the first token
        event (``first``: a read already taken, with its time; ``rest``: the
        byte iterator it came from).  The data is
        complete at ``[DONE]`` (t_end is stamped there), once the token and a
        ``finish_reason`` have come, at a second token (the server ignored the
        cap: noted in ``notes.cap_ignored``, closed at once), or TOKEN_TAIL_S
        after the token; the stream is then read for at most
        POST_COMPLETION_GRACE_S more, and nothing after completion fails the
        probe: it is noted in ``notes.stream_end``.  A token with no visible
        text (only ``usage.completion_tokens``) is timed at the first event of the
        answer (``notes.token_channel = "hidden"``); a token whose read also
        brought the end is marked ``notes.token_with_end`` (``probe_kinds``
        decides whether the path buffers)."""
        dec = SSEStreamDecoder()
        size = reads = 0
        done = finished = stop = False
        deadline: float | None = None  # set when the data is complete
        tail_note: str | None = None  # why reading stops at ``deadline`` before the end
        t_done: float | None = None
        t_data = t0  # the read that brought the last event with data
        t_answer: float | None = None  # the first event of the answer (not role-only)
        #: the read that brought the token, its time, and the bytes later reads brought
        #: (``_together``)
        token_read = after = 0
        t_tok = 0.0
        #: the longest wait of any read after the body's first: under BUFFER_WAIT_S,
        #: the whole body so far was there at its first read
        waited_body = 0.0
        body_read = 0
        chunks = rest if rest is not None else bounded.aiter_decoded(resp).__aiter__()
        while True:
            t_ask = time.perf_counter()
            try:
                if first is not None:
                    (now, chunk), first = first, None
                elif deadline is None:
                    chunk = await chunks.__anext__()
                    now = time.perf_counter()
                else:
                    async with asyncio.timeout(max(0.0, deadline - time.perf_counter())):
                        chunk = await chunks.__anext__()
                    now = time.perf_counter()
            except StopAsyncIteration:
                if token_read and not done:  # the body ended: with the token?
                    t_eof = time.perf_counter()
                    if (reads == token_read and t_eof - t_ask < _kinds.BUFFER_EOF_S) or \
                            _together(t_eof - t_tok, after):
                        r.notes.token_with_end = True
                break
            except (TimeoutError, httpx.HTTPError) as e:
                if deadline is None or (tail_note is not None and not isinstance(e, TimeoutError)):
                    raise  # before the data is complete (a cut after the token, too)
                r.notes.stream_end = tail_note or _after_complete(e, done)
                break
            reads += 1
            if token_read:
                after += len(chunk)
            if body_read:
                waited_body = max(waited_body, now - t_ask)
            elif chunk:
                body_read = reads
            if r.ttfb_s is None and chunk:
                r.ttfb_s = now - t0
            if done:
                continue  # after [DONE]: only the closing bytes, ignored
            size += len(chunk)
            if size > MAX_STREAM_BYTES:
                self._fail(r, "protocol", f"stream over {MAX_STREAM_BYTES} bytes, cut off")
                return
            for ev in dec.feed(chunk):
                if ev.data.strip() == "[DONE]":
                    done, t_done = True, now
                    deadline, tail_note = now + POST_COMPLETION_GRACE_S, None
                    if reads == token_read or _together(now - t_tok, after):
                        r.notes.token_with_end = True  # the token and [DONE] together
                    break
                t_data = now
                late = deadline is not None and tail_note is None  # after the finish_reason
                if ev.event == "error":
                    try:
                        msg = error_message(json_loads(ev.data))
                    except ValueError:
                        msg = ev.data
                    if late:
                        _note_late(r, self._scrub(msg) or "error event")
                    else:
                        self._classify_body_error(r, ev.data, msg or "error event", stream=True)
                    continue
                try:
                    obj = json_loads(ev.data)
                except ValueError:
                    msg = f"malformed JSON in stream: {(self._scrub(ev.data) or '')[:120]!r}"
                    if late:
                        _note_late(r, msg)
                    else:
                        self._fail(r, "protocol", msg)
                    continue
                info = (classify_response_event(obj, ev.event) if self.api == "responses"
                        else classify_chunk(obj))
                if info.error is not None and late:
                    _note_late(r, self._scrub(info.error) or "")
                    continue
                if info.error is not None and info.error_obj is not None:
                    self._classify_body_error(r, ev.data, info.error, stream=True)
                    continue
                if info.error is not None:
                    self._fail(r, "protocol", info.error)
                    continue
                if info.has_token and r.ttft_s is not None and r.notes.token_channel != "hidden":
                    if (self.token_cap or 1) > 1:
                        continue  # a cap over 1 (Responses API: 16): read on, within the tail
                    _kinds.second_token(r, now, self.token_cap)
                    # two tokens there at the body's first read (the role chunk, the
                    # 1st token and the 2nd at once): a buffering path that also ignores
                    # the cap (probe_kinds.settle_buffered decides)
                    if waited_body < _kinds.BUFFER_WAIT_S:
                        r.notes.token_with_end = True
                    stop = True  # the data a probe needs is complete: close at once
                    break
                if info.has_token and r.ttft_s is None:
                    r.ttft_s, token_read, t_tok = now - t0, reads, now
                    r.notes.token_channel = info.channel
                    if deadline is None:
                        deadline = now + TOKEN_TAIL_S
                        tail_note = (f"no end of the answer within {TOKEN_TAIL_S:g} s of the "
                                     "token (no finish_reason, no [DONE]); closed by the client")
                if t_answer is None and (info.finish_reason or info.completion_tokens):
                    t_answer = now
                if r.ttft_s is None and info.completion_tokens:
                    # a token the server counts but shows no text of (hidden reasoning,
                    # a special token): timed at the first event of the answer
                    r.ttft_s, token_read, t_tok = (t_answer or now) - t0, reads, now
                    r.notes.token_channel = "hidden"
                if info.completion_tokens is not None:
                    _kinds.count_tokens(r, info.completion_tokens, self.token_cap)
                finished = finished or info.finish_reason is not None
                _take_usage(r, info.usage, info.timings,
                            _ceiling(self.info.context_tokens if self.info else None))
            if stop:
                break
            if (tail_note is not None or deadline is None) and finished and r.ttft_s is not None:
                deadline, tail_note = now + POST_COMPLETION_GRACE_S, None
        if t_done is not None:
            r.t_end = t_done
        elif r.notes.stream_end is not None or stop:
            r.t_end = t_data  # the data ended with its last event
        else:
            r.t_end = time.perf_counter()
        r.total_s = r.t_end - t0
        dec.close()
        if r.error_kind is not None:
            return
        if r.ttft_s is None:
            self._fail(r, "no_token", "stream ended without a generated token"
                       + ("" if done else " (no [DONE])"))
            return
        r.ok = True

    async def _http_error(self, resp: httpx.Response, r: ProbeResult) -> None:
        text = await self._read_scrubbed(resp, MAX_ERROR_BYTES)
        self._last_error_body = text
        r.t_end = time.perf_counter()
        if r.t_send is not None:
            r.total_s = r.t_end - r.t_send
        status = resp.status_code
        ctype = resp.headers.get("content-type", "")
        target = gateway.redirect_target(resp.request, resp) if 300 <= status < 400 else None
        if gateway.looks_like_html(ctype, text):
            self._fail(r, "html_page", gateway.html_message(
                status, text, str(target) if target is not None else None))
            if status in (404, 405) and self.api != "responses":
                await _kinds.responses_hint(self, r)  # a web server's own 404 page
            return
        if 300 <= status < 400:
            self._fail(r, "redirect", gateway.redirect_message(
                status, target, r.notes.redirected.hops if r.notes.redirected else 0))
            return
        if status in (429, 503):
            r.retry_after_s = parse_retry_after(resp.headers.get("retry-after"))
            kind = "rate_limited"
        else:
            kind = "http"
        self._classify_body_error(r, text, f"HTTP {status}", default_kind=kind)
        red = r.notes.redirected
        if status in (401, 403) and red and not red.key_sent:
            r.error_message = (f"{r.error_message} (redirected to {red.to}, another origin: "
                               "the API key is not sent there; use that URL as the server URL)")
        if status == 407:
            r.error_message = (f"{r.error_message} (the proxy asks for credentials: put "
                               "USER:PASSWORD@ before its host in the proxy URL; they are "
                               "never shown)")
        if self.api != "responses" and (status in (404, 405) or (
                400 <= status < 500 and _kinds.NAMES_RESPONSES.search(r.error_message or ""))):
            await _kinds.responses_hint(self, r)

    async def _read_scrubbed(self, resp: httpx.Response, cap: int) -> str:
        """At most ``cap`` characters of the body, scrubbed *before* the cut: a secret
        straddling the cap is read whole (up to ``_SCRUB_MARGIN`` bytes past it),
        masked, then the text is cut."""
        content, _ = await bounded.read_capped(resp, cap + _SCRUB_MARGIN)
        return (self._scrub(content.decode("utf-8", "replace")) or "")[:cap]

    def _classify_body_error(self, r: ProbeResult, text: str, fallback: str, *,
                             stream: bool = False, default_kind: str = "protocol") -> None:
        """Turn an error body / stream error into error_kind + message (the server's
        text scrubbed of secrets first, so no cut below can leave part of one)."""
        text = self._scrub(text) or ""
        self._last_error_body = self._last_error_body or text  # names a rejected field
        err: Any = None
        try:
            # decoded, a JSON string may hold a secret its escapes hid from the scrub
            # above (``\u0073k-...``, ``\/``): scrubbed again, before any cut below
            err = error_part(self._scrub_json(json_loads(text)))
        except ValueError:  # not JSON: the server's own words, as text
            err = " ".join(text.split())[:300] or None
        msg = error_message(err) if err is not None else fallback
        if stream:
            default_kind = "stream_error"
        elif not msg or msg == fallback:
            msg = fallback
        else:  # "HTTP 400: <the server's words>"
            msg = f"{fallback}: {msg}"
        if _CTX_PATTERNS.search(text) or _CTX_PATTERNS.search(msg):
            n_prompt, n_ctx = context_numbers(err, text)
            if n_prompt and n_ctx:
                msg = f"prompt too long for the context: {n_prompt} > {n_ctx} tokens ({msg})"
            if n_ctx:
                r.notes.n_ctx = n_ctx
            if n_prompt:
                r.notes.n_prompt_tokens = n_prompt
            self._fail(r, "context_length", msg)
            return
        self._fail(r, default_kind, msg)


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
#: The endpoint of each ``--api`` under ``/v1``.
API_PATHS = {"completions": "/completions", "chat": "/chat/completions",
             "responses": "/responses"}


def _first_mentions(text: str) -> dict[str, int]:
    """Each name ``text`` mentions (``_norm``-ed) -> the index of its first mention.  Runs
    of two and three words count as one name too ("max tokens" = max_tokens)."""
    words = [_norm(w) for w in _IDENT.findall(text)]
    out: dict[str, int] = {}
    for i in range(len(words)):
        for n in (1, 2, 3):
            if i + n <= len(words):
                out.setdefault("".join(words[i:i + n]), i)
    return out


def _norm(name: str) -> str:
    """A field name compared across spellings: include_usage = includeUsage = include-usage."""
    return name.replace("_", "").replace("-", "").lower()


def _names(field: str, value: Any) -> list[str]:
    """``field`` and every key nested in its value (the sub-keys a server may name)."""
    out = [field]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _names(str(k), v)
    return out


#: Largest token count accepted from a server whose context is unknown (the longest
#: context windows offered are 10 M tokens, e.g. Llama 4 Scout's model card); a
#: larger, negative or non-integer count is ignored and noted in ``notes.ignored``.
MAX_PLAUSIBLE_TOKENS = 10_000_000
#: How much longer than the client's own TTFT a server prefill time may be
#: (seconds): the two clocks start apart, but the server cannot have spent much
#: longer on the prompt than the client waited for its first token.
SERVER_TIME_TOLERANCE_S = 1.0


def _count(v: Any, ceiling: int = MAX_PLAUSIBLE_TOKENS) -> int | None:
    """A token count from server JSON: an int (not a bool) in [0, ceiling]."""
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= ceiling:
        return v
    return None


def _bad(r: ProbeResult, field: str, v: Any, why: str = "is not a token count") -> None:
    """Note an ignored server value.  A number is quoted; anything else is described
    by its type and size, never copied: a server echoing a secret into a count
    field must not get it into the summary or the run file."""
    r.notes.ignored.append(f"{field} {_describe_value(v)} {why}")


def _describe_value(v: Any) -> str:
    """A server value as it may be quoted: a number, bool or null as its text (cut at
    40 characters), a string or a container by its type and length only."""
    if v is None or isinstance(v, (bool, int, float)):
        return repr(str(v)[:40])
    if isinstance(v, str):
        return f"(a string of {len(v)} characters)"
    return f"(a {type(v).__name__} of {len(v) if hasattr(v, '__len__') else '?'} items)"


def _ceiling(context_tokens: int | None) -> int:
    """The largest prompt a server can have counted: its context when known."""
    if context_tokens and context_tokens > 0:
        return min(context_tokens, MAX_PLAUSIBLE_TOKENS)
    return MAX_PLAUSIBLE_TOKENS


def _take_usage(r: ProbeResult, usage: dict | None, timings: dict | None,
                ceiling: int = MAX_PLAUSIBLE_TOKENS) -> None:
    """Server-counted prompt tokens, cached tokens and server prefill time.

    Values that are not plausible (negative, bool, non-integer, over ``ceiling``
    = the server's context or MAX_PLAUSIBLE_TOKENS, non-finite or negative times)
    are ignored, so they never reach the fit, the length model or the run file;
    each is named in ``notes.ignored``.  ``_vet`` checks what needs the whole
    stream (cached vs prompt tokens, server time vs TTFT)."""
    if usage:
        pt = usage.get("prompt_tokens")
        if _count(pt, ceiling):
            r.prompt_tokens, r.prompt_tokens_source = pt, "usage"
        elif pt is not None:
            _bad(r, "usage.prompt_tokens", pt)
        det = usage.get("prompt_tokens_details")
        if isinstance(det, dict) and det.get("cached_tokens") is not None:
            if _count(det["cached_tokens"], ceiling) is not None:
                r.cached_tokens, r.cached_tokens_source = det["cached_tokens"], "usage"
            else:
                _bad(r, "usage.prompt_tokens_details.cached_tokens", det["cached_tokens"])
    if timings:
        pn, cn, pms = timings.get("prompt_n"), timings.get("cache_n"), timings.get("prompt_ms")
        if cn is not None and _count(cn, ceiling) is None:
            _bad(r, "timings.cache_n", cn)
            cn = None
        if pn is not None and _count(pn, ceiling) is None:
            _bad(r, "timings.prompt_n", pn)
            pn = None
        if cn is not None and r.cached_tokens is None:
            r.cached_tokens, r.cached_tokens_source = cn, "timings"
        total = (pn or 0) + (cn or 0)
        if pn is not None and r.prompt_tokens_source != "usage" and total > 0:
            if total <= ceiling:
                r.prompt_tokens, r.prompt_tokens_source = total, "timings"
            else:
                _bad(r, "timings.prompt_n + cache_n", total)
        if pms is not None:
            if (isinstance(pms, (int, float)) and not isinstance(pms, bool)
                    and math.isfinite(pms) and pms >= 0):
                r.server_prefill_s = pms / 1000.0
            else:
                _bad(r, "timings.prompt_ms", pms, "is not a time")


def _vet(r: ProbeResult) -> None:
    """Drop what contradicts the rest of the probe, noted in ``notes.ignored``:
    more cached tokens than prompt tokens (not a count: the probe stays a miss and
    stays in the fit), and a server prefill time longer than the client's TTFT +
    SERVER_TIME_TOLERANCE_S (or any server time on a probe without a TTFT)."""
    if (r.cached_tokens is not None and r.prompt_tokens is not None
            and r.cached_tokens > r.prompt_tokens):
        _bad(r, "cached tokens", r.cached_tokens,
             f"is more than the {r.prompt_tokens} prompt tokens: not a token count")
        r.cached_tokens = r.cached_tokens_source = None
    sp = r.server_prefill_s
    if sp is not None and (r.ttft_s is None or sp > r.ttft_s + SERVER_TIME_TOLERANCE_S):
        _bad(r, "server prefill (s)", sp,
             "is longer than the measured TTFT" + (f" {r.ttft_s:.3f} s" if r.ttft_s else "")
             + ": not a prefill time")
        r.server_prefill_s = None


#: Most characters of a header value kept in a probe's notes (a content type is < 100;
#: a hostile server may send 100 KB, which every run-file line would repeat).
MAX_HEADER_NOTE = 200


def _head(value: str | None) -> str:
    """A header value as kept in notes: at most ``MAX_HEADER_NOTE`` characters."""
    v = value or ""
    return v if len(v) <= MAX_HEADER_NOTE else v[:MAX_HEADER_NOTE] + "…"


def _together(span: float, after: int) -> bool:
    """Whether the end came with the token over several reads: the reads after the
    token's brought at least ``probe_kinds.TOGETHER_BYTES`` within
    ``probe_kinds.TOGETHER_SPAN_S`` (``span``: token read to end).  A buffered body
    released at once spans many 64 KiB reads in a few ms; a streaming server's
    one-token answer ends in a few hundred bytes."""
    return span < _kinds.TOGETHER_SPAN_S and after >= _kinds.TOGETHER_BYTES


def _note_late(r: ProbeResult, message: str) -> None:
    """An error after the token and its finish_reason: noted, the probe stands."""
    r.notes.after_complete.append(str(message)[:200])


def _after_complete(e: BaseException, done: bool) -> str:
    """The note for what went wrong once a probe's data was complete."""
    after = "[DONE]" if done else "the finish_reason"
    if isinstance(e, TimeoutError):
        return (f"the server kept the stream open after {after}; closed by the client "
                f"after {POST_COMPLETION_GRACE_S:g} s")
    if isinstance(e, httpx.RemoteProtocolError):
        return f"connection closed after {after} without the chunked terminator"
    return f"connection lost after {after}: {_server.describe_exc(e)}"


#: Bytes read past a cut so that a secret straddling it is masked whole (the longest
#: API keys in use are ~200 characters).
_SCRUB_MARGIN = 512


_SEND_EVENTS = ("http11.send_request_headers.started", "http2.send_request_headers.started")


def _tracer(stamps: dict[str, float]):
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


def _connect_time(stamps: dict[str, float]) -> float | None:
    t0 = stamps.get("connection.connect_tcp.started")
    t1 = stamps.get("ready")
    return None if t0 is None or t1 is None else t1 - t0
