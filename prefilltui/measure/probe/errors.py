"""How a probe reads an answer that is not a token stream: an HTTP error, a 200 that
is no event stream (an HTML page, one buffered JSON body), or an error in the stream.

``ErrorReader`` turns these into an ``error_kind`` and a message scrubbed of secrets (the context-length rule reads the
prompt and context sizes a server quotes: ``context_numbers``); ``parse_retry_after``
reads a 429/503's Retry-After.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

import httpx

from prefilltui.measure import bounded
from prefilltui.measure import gateway
from prefilltui.measure.probe.kinds import BUFFER_ADVICE, NAMES_RESPONSES, ResponsesCheck
from prefilltui.measure.probe.sending import Secrets
from prefilltui.measure.sse import error_message, error_part
from prefilltui.model.jsontypes import loads as json_loads
from prefilltui.model.types import ProbeResult

#: Cap on an error body that is read for its message.
MAX_ERROR_BYTES = 64 * 1024
#: Bytes read past a cut so that a secret straddling it is masked whole (the longest
#: API keys in use are ~200 characters).
_SCRUB_MARGIN = 512

_CTX_PATTERNS = re.compile(
    r"context[ _-]?(size|length|window)|exceed_context|maximum context|n_ctx|"
    r"too many tokens|prompt is too long|input is too long|max_model_len|"
    r"context_length_exceeded|longer than the maximum",
    re.I,
)


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


class ErrorReader:
    """Turns error answers into a probe's ``error_kind`` and message.

    State: ``last_body``, the last error body read (scrubbed; the client clears it
    before each request, and ``RequestBody.rejected_field`` reads it for the field a
    400 names).  Given: the API flavour, the client's ``Secrets`` (every message is
    scrubbed before it is cut) and its ``ResponsesCheck`` (a 404/405 asks whether the
    server has the Responses API)."""

    def __init__(self, api: str, secrets: Secrets, responses: ResponsesCheck) -> None:
        self.api = api
        self.last_body = ""
        self._secrets = secrets
        self._responses = responses

    def fail(self, r: ProbeResult, kind: str, message: str | None) -> ProbeResult:
        """Mark ``r`` failed (the first failure wins); the message is scrubbed of
        secrets *before* it is cut to 1,000 characters."""
        if r.error_kind is None:
            r.ok, r.error_kind = False, kind
            r.error_message = (self._secrets.scrub(message) or kind)[:1000]
        return r

    async def not_a_stream(self, resp: httpx.Response, r: ProbeResult, ctype: str,
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
        text = (self._secrets.scrub(bytes(buf[:MAX_ERROR_BYTES + _SCRUB_MARGIN]).decode(
            "utf-8", "replace")) or "")[:MAX_ERROR_BYTES]
        self.last_body = text
        if gateway.looks_like_html(ctype, text):
            self.fail(r, "html_page", gateway.html_message(200, text))
            return
        try:
            obj = json_loads(text)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("choices") or obj.get("output"), list):
            r.arrival_s = r.t_end - r.t_send if r.t_send is not None else None
            self.fail(r, "buffered", f"the server did not stream (content-type {ctype!r}): one "
                       "JSON body came at the end, so TTFT cannot be known; "
                       + BUFFER_ADVICE)
            return
        self.classify_body_error(r, text, f"server did not stream (content-type {ctype!r})")

    async def http_error(self, resp: httpx.Response, r: ProbeResult) -> None:
        text = await self._read_scrubbed(resp, MAX_ERROR_BYTES)
        self.last_body = text
        r.t_end = time.perf_counter()
        if r.t_send is not None:
            r.total_s = r.t_end - r.t_send
        status = resp.status_code
        ctype = resp.headers.get("content-type", "")
        target = gateway.redirect_target(resp.request, resp) if 300 <= status < 400 else None
        if gateway.looks_like_html(ctype, text):
            self.fail(r, "html_page", gateway.html_message(
                status, text, str(target) if target is not None else None))
            if status in (404, 405) and self.api != "responses":
                await self._responses.add_hint(r)  # a web server's own 404 page
            return
        if 300 <= status < 400:
            self.fail(r, "redirect", gateway.redirect_message(
                status, target, r.notes.redirected.hops if r.notes.redirected else 0))
            return
        if status in (429, 503):
            r.retry_after_s = parse_retry_after(resp.headers.get("retry-after"))
            kind = "rate_limited"
        else:
            kind = "http"
        self.classify_body_error(r, text, f"HTTP {status}", default_kind=kind)
        red = r.notes.redirected
        if status in (401, 403) and red and not red.key_sent:
            r.error_message = (f"{r.error_message} (redirected to {red.to}, another origin: "
                               "the API key is not sent there; use that URL as the server URL)")
        if status == 407:
            r.error_message = (f"{r.error_message} (the proxy asks for credentials: put "
                               "USER:PASSWORD@ before its host in the proxy URL; they are "
                               "never shown)")
        if self.api != "responses" and (status in (404, 405) or (
                400 <= status < 500 and NAMES_RESPONSES.search(r.error_message or ""))):
            await self._responses.add_hint(r)

    async def _read_scrubbed(self, resp: httpx.Response, cap: int) -> str:
        """At most ``cap`` characters of the body, scrubbed *before* the cut: a secret
        straddling the cap is read whole (up to ``_SCRUB_MARGIN`` bytes past it),
        masked, then the text is cut."""
        content, _ = await bounded.read_capped(resp, cap + _SCRUB_MARGIN)
        return (self._secrets.scrub(content.decode("utf-8", "replace")) or "")[:cap]

    def classify_body_error(self, r: ProbeResult, text: str, fallback: str, *,
                             stream: bool = False, default_kind: str = "protocol") -> None:
        """Turn an error body / stream error into error_kind + message (the server's
        text scrubbed of secrets first, so no cut below can leave part of one)."""
        text = self._secrets.scrub(text) or ""
        self.last_body = self.last_body or text  # names a rejected field
        err: Any = None
        try:
            # decoded, a JSON string may hold a secret its escapes hid from the scrub
            # above (``\u0073k-...``, ``\/``): scrubbed again, before any cut below
            err = error_part(self._secrets.scrub_json(json_loads(text)))
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
            self.fail(r, "context_length", msg)
            return
        self.fail(r, default_kind, msg)
