"""One-token streaming probes: exact, cache-proof TTFT.

A probe is one ``stream: true`` request with ``max_tokens: 1`` to
``/v1/completions`` (or ``/v1/chat/completions``).  Clock: ``time.perf_counter``
from just before the request is handed to httpx to the moment the read that
completes the first SSE event carrying a generated token returns (see
``prefilltui.measure.sse``).  If a new TCP/TLS connection had to be opened for the
request, its set-up time is recorded as ``connect_s`` and taken out of TTFB/TTFT
(the clock starts when the connection is ready).  ``probe()`` never raises for
server or network failures: it returns ``ok=False`` with an ``error_kind``.

A probe's data is complete at ``data: [DONE]``, or once the token and its
``finish_reason`` have come; what the server does after that (keep-alive comments,
a close without the chunked terminator) is read for at most
``POST_COMPLETION_GRACE_S``, never fails the probe, and is noted in ``extra``.

Over 400 lines because one probe's timing, stream reading and failure classification
interleave on the same read loop; SSE framing (``sse.py``), prompts (``prompts.py``)
and discovery (``server.py``) are apart.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import re
import ssl
import time
from typing import Any, Callable

import httpx

from prefilltui.model import defaults
from prefilltui.measure import bounded
from prefilltui.measure import server as _server
from prefilltui.model.prompts import LengthModel, PromptBuilder, build_prompt
from prefilltui.model.redact import is_secret_param, scrub_secrets, split_credentials
from prefilltui.measure.sse import SSEStreamDecoder, classify_chunk, error_message
from prefilltui.model.types import ProbeResult, ServerInfo

#: Cap on a streamed body (a one-token stream is a few KiB; 4 MiB means runaway).
MAX_STREAM_BYTES = 4 * 1024 * 1024
#: Cap on an error body that is read for its message.
MAX_ERROR_BYTES = 64 * 1024
#: Fields a probe adds beyond what a completion request needs.  A 400/422 answer
#: naming one of them or any of its sub-keys (``include_usage`` inside
#: ``stream_options``) drops it: the probe is resent once without it, and later
#: probes of the session never send it.  A field the user set (``extra_body``) is
#: never dropped.
OPTIONAL_FIELDS = ("stream_options", "ignore_eos", "cache_prompt", "temperature")
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
            return await super().handle_async_request(request)


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
                 extra_body: dict | None = None, seed: int | None = None) -> None:
        if api not in ("completions", "chat"):
            raise ValueError(f"api must be 'completions' or 'chat', not {api!r}")
        #: Things about this session a reader must know, once each, in order:
        #: short label (status line) -> sentence (summary).  E.g. a field the
        #: server rejected, prompt lengths that are estimates.
        self.notices: dict[str, str] = {}
        # Credentials leave the URL here, once: every URL derived from it (root, v1,
        # ServerInfo.base_url, tokenize, /metrics) holds none; the client sends them.
        url = base_url.strip()
        creds = split_credentials(url if "://" in url else "http://" + url)
        self.root, self.v1 = _server.split_base_url(creds.url)
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
        auth = None
        if creds.has_userinfo and api_key:
            self.notices["URL user:password not sent"] = (
                "the URL's user:password is not sent: the API key is (Authorization: "
                "Bearer), and a request carries one Authorization header")
        elif creds.has_userinfo:
            auth = httpx.BasicAuth(creds.username or "", creds.password or "")
            self.notices["Basic auth from the URL"] = (
                "the URL's user:password is sent as HTTP Basic auth (no API key is set)")
        #: every secret this client sends, scrubbed from whatever the server says back
        self._secrets = tuple(v for v in (api_key, creds.password, creds.username if auth else None,
                                          *(v for k, v in creds.params if is_secret_param(k)))
                              if v)
        self._transport = ResendOnStaleConnection(
            verify=shared_ssl_context(verify),
            # discovery asks up to 4 things at once; probes and scrapes go one at a
            # time, so one connection is kept (a long-running prober holds 1 fd, not 4)
            limits=httpx.Limits(max_connections=4, max_keepalive_connections=1,
                                keepalive_expiry=300.0))
        self._http = httpx.AsyncClient(
            headers=headers, transport=self._transport, auth=auth, params=creds.params,
            timeout=httpx.Timeout(self.timeout, connect=10.0), follow_redirects=False,
            trust_env=False)
        self.builder = PromptBuilder(seed)
        self.lengths = LengthModel()
        self._dropped: set[str] = set()
        self._kept: set[str] = set()  # named in a 400 that was not about them
        self._last_error_body = ""
        self._last_calibration = ProbeResult(requested_tokens=0)

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
        self.info = info
        return info

    async def calibrate(self, on_step: Callable[[str], None] | None = None
                        ) -> ProbeResult | None:
        """Learn the server's prompt length before the first measured probe.

        With a tokenize endpoint and the completions API the tokenize count is the
        server's count: nothing to learn.  With chat, one request learns the chat
        template's tokens (server count - tokenize count).  Without tokenize, one
        request at each of ``CALIBRATION_WORDS`` fits tokens = offset + ratio *
        words from the server's ``usage``/``timings``.  The requests are ordinary
        probes (a rejected optional field is dropped here already) that are not
        returned: they are not results.  A server that reports no count teaches
        nothing; its probes' lengths are then estimates.

        ``on_step(text)`` is told, before each request, what it waits for and for how
        long at most (the request's timeout).  Returns the request that failed (then
        calibration stops, and ``notices["calibration failed"]`` says so), else None.
        """
        if self.info is None:
            return None
        if self.info.has_tokenize:
            if self.api == "chat":
                n = int(CALIBRATION_WORDS[0] * self.lengths.ratio)
                return await self._calibration_probe(n, "1 of 1", "the chat template's tokens",
                                                     on_step)
            return None
        ctx = self.info.context_tokens
        for i, words in enumerate(CALIBRATION_WORDS, 1):
            n = round(self.lengths.predict(words))
            n = min(n, ctx // 2) if ctx else n
            failed = await self._calibration_probe(
                n, f"{i} of {len(CALIBRATION_WORDS)}", "its prompt token count", on_step)
            if failed is not None:
                return failed
            if self._last_calibration.prompt_tokens_source not in ("usage", "timings"):
                return None  # no count from this server
        return None

    async def _calibration_probe(self, tokens: int, which: str, learns: str,
                                 on_step: Callable[[str], None] | None) -> ProbeResult | None:
        """One calibration request; the failed result (noted once) or None."""
        if on_step is not None:
            on_step(f"calibrating prompt lengths: request {which} (~{tokens} tokens) to "
                    f"learn {learns}, waiting up to {self.timeout:g} s")
        r = self._last_calibration = await self.probe(tokens, warmup=True)
        if r.ok:
            return None
        self.notices.setdefault(
            "calibration failed",
            f"the calibration request ({tokens} tokens, before the first probe) failed after "
            f"{(r.total_s or 0):.1f} s ({r.error_kind}: {r.error_message}); prompt lengths "
            "start from the built-in estimate until a probe is counted")
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
        return await _server.count_tokens(self._http, self.info, text)

    # -- the probe
    def _body(self, prompt: str) -> dict[str, Any]:
        body: dict[str, Any] = {"max_tokens": 1, "stream": True,
                                "stream_options": {"include_usage": True}, "temperature": 0}
        if self.model:
            body["model"] = self.model
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        kind = self.info.kind if self.info else "openai"
        if kind == "llama.cpp":
            body["cache_prompt"] = False
        if kind in ("llama.cpp", "vllm", "sglang"):
            body["ignore_eos"] = True  # a first-token EOS would read as "no token"
        body.update(self.extra_body)
        for k in self._dropped:
            body.pop(k, None)
        return body

    def _rejected_field(self, r: ProbeResult, body: dict[str, Any]) -> str | None:
        """The optional field a 400/422 answer names (itself or any of its sub-keys,
        in any wording: "Unknown field: stream_options", "extraneous key
        [include_usage] is not permitted", "streamOptions.includeUsage"), or None."""
        if r.http_status not in (400, 422) or r.error_kind != "http":
            return None
        said = {_norm(w) for w in _IDENT.findall(f"{r.error_message}\n{self._last_error_body}")}
        for k in OPTIONAL_FIELDS:
            if k in body and k not in self._dropped | self._kept and k not in self.extra_body:
                if said & {_norm(n) for n in _names(k, body[k])}:
                    return k
        return None

    async def probe(self, requested_tokens: int, *, warmup: bool = False, burst: bool = False,
                    prompt: str | None = None) -> ProbeResult:
        """Fire one probe of ``requested_tokens`` server-counted prompt tokens.

        A probe the server rejects for an optional field we add is resent at once
        without it (``extra["rejected_field"]`` keeps the rejection), and the
        field is left out of every later probe of this client."""
        r = ProbeResult(requested_tokens=int(requested_tokens), warmup=warmup, burst=burst,
                        api=self.api, model=self.model)
        words = None
        tok_count = None
        if prompt is None:
            try:
                prompt, words, tok_count = await build_prompt(
                    requested_tokens, self.builder, self.lengths,
                    self._count if self.info and self.info.has_tokenize else None)
            except Exception as e:  # never raise from a probe
                return self._fail(r, "protocol", f"prompt construction failed: {e}")
        body = self._body(prompt)
        await self._attempt(r, body)
        while (field := self._rejected_field(r, body)) is not None:
            self._dropped.add(field)
            said = self._scrub(r.error_message) or ""
            self.notices.setdefault(
                f"sent without {field}",
                f"the server rejected {field} ({said[:200]}); probes are sent without it")
            first = r
            r = ProbeResult(requested_tokens=first.requested_tokens, warmup=warmup, burst=burst,
                            api=self.api, model=self.model)
            r.extra["rejected_field"] = {"field": field, "http_status": first.http_status,
                                         "message": said[:300]}
            body = self._body(prompt)
            await self._attempt(r, body)
            if r.http_status == first.http_status and r.error_message == first.error_message:
                # the same answer without the field: it was quoted, not the cause
                self._dropped.discard(field)
                self._kept.add(field)  # never retried for it again
                self.notices.pop(f"sent without {field}", None)
                r.extra.pop("rejected_field", None)
                break
        _vet(r)
        if r.extra.get("ignored"):
            self.notices.setdefault(
                "server values ignored",
                "the server sent counts or times that cannot be true ("
                + "; ".join(r.extra["ignored"])[:300]
                + "): they are ignored, never fitted (each probe's extra.ignored says which)")
        self._learn(r, words, tok_count)
        r.error_message = self._scrub(r.error_message)
        if "after_complete" in r.extra:
            r.extra["after_complete"] = [self._scrub(m) for m in r.extra["after_complete"]]
        return r

    async def _attempt(self, r: ProbeResult, body: dict[str, Any]) -> None:
        """Send ``body`` once and fill ``r`` (never raises for server or network faults)."""
        url = self.v1 + ("/chat/completions" if self.api == "chat" else "/completions")
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

    async def _stream(self, url: str, body: dict, r: ProbeResult) -> None:
        stamps: dict[str, float] = {}
        req = self._http.build_request(
            "POST", url, json=body, headers={"Accept": "text/event-stream"},
            extensions={"trace": _tracer(stamps)})
        r.started_at = time.time()
        resent = self._transport.resent
        t0 = r.t_send = time.perf_counter()
        resp = await self._http.send(req, stream=True)
        if self._transport.resent != resent:
            r.extra["resent_on_stale_connection"] = True
        try:
            r.connect_s = _connect_time(stamps)
            if r.connect_s is not None:
                r.extra["connect_excluded"] = True
            # TTFT runs from when the request's bytes start to go out (after pool
            # checkout and any connect), as a raw-socket client would time it.
            t0 = r.t_send = stamps.get("send", stamps.get("ready", t0))
            r.http_status = resp.status_code
            if resp.status_code != 200:
                await self._http_error(resp, r)
                return
            ctype = resp.headers.get("content-type", "")
            if "text/event-stream" not in ctype:
                head = await self._read_scrubbed(resp, MAX_ERROR_BYTES)
                self._classify_body_error(r, head, f"server did not stream (content-type {ctype!r})")
                return
            await self._read_events(resp, r, t0)
        finally:
            await resp.aclose()

    async def _read_events(self, resp: httpx.Response, r: ProbeResult, t0: float) -> None:
        """Read the stream, stamping TTFT at the read that completes the first token
        event.  The data is complete at ``[DONE]`` (t_end is stamped there) or once
        the token and a ``finish_reason`` have come; the stream is then read for at
        most POST_COMPLETION_GRACE_S more, and nothing after completion fails the
        probe: it is noted in ``extra["stream_end"]``."""
        dec = SSEStreamDecoder()
        size = 0
        done = finished = False
        deadline: float | None = None  # set when the data is complete
        t_done: float | None = None
        t_data = t0  # the read that brought the last event with data
        chunks = bounded.aiter_decoded(resp).__aiter__()
        while True:
            try:
                if deadline is None:
                    chunk = await chunks.__anext__()
                else:
                    async with asyncio.timeout(max(0.0, deadline - time.perf_counter())):
                        chunk = await chunks.__anext__()
            except StopAsyncIteration:
                break
            except (TimeoutError, httpx.HTTPError) as e:
                if deadline is None:
                    raise  # before the data is complete: the probe's own failure
                r.extra["stream_end"] = _after_complete(e, done)
                break
            now = time.perf_counter()
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
                    deadline = now + POST_COMPLETION_GRACE_S
                    break
                t_data = now
                late = deadline is not None  # after the token and its finish_reason
                if ev.event == "error":
                    try:
                        msg = error_message(json.loads(ev.data))
                    except ValueError:
                        msg = ev.data
                    if late:
                        _note_late(r, self._scrub(msg) or "error event")
                    else:
                        self._classify_body_error(r, ev.data, msg or "error event", stream=True)
                    continue
                try:
                    obj = json.loads(ev.data)
                except ValueError:
                    msg = f"malformed JSON in stream: {(self._scrub(ev.data) or '')[:120]!r}"
                    if late:
                        _note_late(r, msg)
                    else:
                        self._fail(r, "protocol", msg)
                    continue
                info = classify_chunk(obj)
                if info.error is not None and late:
                    _note_late(r, self._scrub(info.error) or "")
                    continue
                if info.error is not None and info.error_obj is not None:
                    self._classify_body_error(r, ev.data, info.error, stream=True)
                    continue
                if info.error is not None:
                    self._fail(r, "protocol", info.error)
                    continue
                if info.has_token and r.ttft_s is None:
                    r.ttft_s = now - t0
                finished = finished or info.finish_reason is not None
                _take_usage(r, info.usage, info.timings,
                            _ceiling(self.info.context_tokens if self.info else None))
            if deadline is None and finished and r.ttft_s is not None:
                deadline = now + POST_COMPLETION_GRACE_S
        if t_done is not None:
            r.t_end = t_done
        elif "stream_end" in r.extra:
            r.t_end = t_data  # the grace ran out: the data ended with its last event
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
        if resp.status_code in (429, 503):
            r.retry_after_s = parse_retry_after(resp.headers.get("retry-after"))
            kind = "rate_limited"
        else:
            kind = "http"
        self._classify_body_error(r, text, f"HTTP {resp.status_code}", default_kind=kind)

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
        err: Any = None
        try:
            obj = json.loads(text)
            if isinstance(obj, dict):
                err = obj["error"] if "error" in obj else (obj if "message" in obj else None)
            elif isinstance(obj, str):
                err = obj
        except ValueError:
            err = text.strip()[:300] or None if default_kind != "protocol" else None
        msg = error_message(err) if err is not None else fallback
        if stream:
            default_kind = "stream_error"
        elif not msg or msg == fallback:
            msg = fallback
        elif default_kind in ("http", "rate_limited"):
            msg = f"{fallback}: {msg}"
        if _CTX_PATTERNS.search(text) or _CTX_PATTERNS.search(msg):
            n_prompt, n_ctx = context_numbers(err, text)
            if n_prompt and n_ctx:
                msg = f"prompt too long for the context: {n_prompt} > {n_ctx} tokens ({msg})"
            if n_ctx:
                r.extra["n_ctx"] = n_ctx
            if n_prompt:
                r.extra["n_prompt_tokens"] = n_prompt
            self._fail(r, "context_length", msg)
            return
        self._fail(r, default_kind, msg)


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


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
#: larger, negative or non-integer count is ignored and noted in ``extra``.
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
    r.extra.setdefault("ignored", []).append(f"{field} {_describe_value(v)} {why}")


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
    each is named in ``extra["ignored"]``.  ``_vet`` checks what needs the whole
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
                r.cached_tokens = det["cached_tokens"]
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
            r.cached_tokens = cn
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
    """Drop what contradicts the rest of the probe, noted in ``extra["ignored"]``:
    more cached tokens than prompt tokens (not a count: the probe stays a miss and
    stays in the fit), and a server prefill time longer than the client's TTFT +
    SERVER_TIME_TOLERANCE_S (or any server time on a probe without a TTFT)."""
    if (r.cached_tokens is not None and r.prompt_tokens is not None
            and r.cached_tokens > r.prompt_tokens):
        _bad(r, "cached tokens", r.cached_tokens,
             f"is more than the {r.prompt_tokens} prompt tokens: not a token count")
        r.cached_tokens = None
    sp = r.server_prefill_s
    if sp is not None and (r.ttft_s is None or sp > r.ttft_s + SERVER_TIME_TOLERANCE_S):
        _bad(r, "server prefill (s)", sp,
             "is longer than the measured TTFT" + (f" {r.ttft_s:.3f} s" if r.ttft_s else "")
             + ": not a prefill time")
        r.server_prefill_s = None


def _note_late(r: ProbeResult, message: str) -> None:
    """An error after the token and its finish_reason: noted, the probe stands."""
    r.extra.setdefault("after_complete", []).append(str(message)[:200])


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
