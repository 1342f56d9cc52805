"""What a probe noticed about the server's path, and what the session says once.

``ProbeClient`` (``client.py``) marks what it saw on a probe in ``ProbeResult.notes``
(``model.probe_notes``; the run file keeps each under its key in ``extra``); ``note``
turns each kind into one session notice (the summary says it once).  The vocabulary
(docs/measurement.md, docs/runfile.md):

  note / extra key     meaning                                              notice label
  cap_ignored          a 2nd token (or usage > 1) with max_tokens 1:        max_tokens ignored
                       the stream is closed at the 2nd token, TTFT stands
  content_type         a valid event stream under another content type      stream labelled ...
  content_encoding     a compressed stream (decoded)                        compressed stream
  redirected           the POST followed a 307/308 (``to``, ``hops``)       redirected
  token_channel        where the first token was: text, content,            token not text
                       reasoning, tool_call, hidden (only counted)
  token_with_end       the token's read also brought the end                (see below)
  arrival_s            a buffered answer's time (never a TTFT; ProbeResult.arrival_s)
  rejected_field       a field the server rejected (``replaced_by``)        sent without / for

A token that arrives together with the end is the mark of a buffering gateway, but
an unbuffered proxy can also coalesce a one-token answer.  ``BufferCheck.settle``
decides once per client (``BufferCheck.check``: one request for ``CHECK_TOKENS``
tokens; a streaming path spreads them over reads, a buffering one releases them
at once): on a buffering path, or when the check cannot tell, such a probe fails
as ``buffered`` (out of the fit, its time kept as ``arrival_s``, never shown as
TTFT or prefill).

The parts of a client that ask the server something about its path own their
answer: ``BufferCheck`` (does the path buffer?), ``ResponsesCheck`` (does it have
the Responses API?), ``ModelChoice`` (another listed model when discovery's pick is
refused).
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Awaitable, Callable

import httpx

from prefilltui.model.units import ms
from prefilltui.measure import bounded
from prefilltui.measure.probe.body import RequestBody
from prefilltui.measure.probe.sending import Sender
from prefilltui.measure.server_models import cannot_generate
from prefilltui.measure.sse import SSEStreamDecoder, classify_chunk, classify_response_event
from prefilltui.model.jsontypes import loads as json_loads
from prefilltui.model.probe_notes import Resend
from prefilltui.model.types import JsonObject, ProbeResult, ServerInfo


#: A read that ends the body this soon after the token's read ends it "together"
#: (an unbuffered server sends its finish chunk and terminator as separate writes).
BUFFER_EOF_S = 0.002
#: A read that waits less than this for its bytes found them already there (a read
#: returns at once from a socket that holds more; a server's next write comes at
#: least a scheduler tick, ~1 ms, later).  Two tokens there by the body's first read
#: came together.
BUFFER_WAIT_S = 0.0005
#: An end reached within TOGETHER_SPAN_S of the token after TOGETHER_BYTES more came
#: with it: a buffered body spanning several reads (a one-token answer of a streaming
#: server ends a few hundred bytes after its token).
TOGETHER_BYTES = 16 * 1024
TOGETHER_SPAN_S = 0.25
#: Tokens the streaming check asks for, and the least spread of their arrival
#: that proves a streaming path (decode steps of real servers take >= ~2 ms each).
CHECK_TOKENS = 8
BUFFER_SPREAD_S = 0.002
#: What a user can do about a buffering path.
BUFFER_ADVICE = ("turn off response buffering on the gateway or proxy (nginx: "
                 "proxy_buffering off, or the X-Accel-Buffering: no header) or probe the server "
                 "directly; such probes stay out of the fit")
_CHECK_PROMPT = "Count from one to twenty in words, separated by spaces:"


def second_token(r: ProbeResult, now: float, cap: int | None) -> None:
    """Note the second token event of a one-token probe (the stream is closed)."""
    first = (r.t_send or 0.0) + (r.ttft_s or 0.0)
    after = f" {ms(max(0.0, now - first), 0)} after the first" if r.t_send else ""
    if cap == 1:
        r.notes.cap_ignored = (f"a second token came{after}: the server ignored max_tokens 1; "
                               "the client closed the stream")
    else:
        why = f"the cap is {cap}" if cap else "the server takes no token cap"
        r.notes.stream_end = f"closed by the client at the second token ({why})"


def count_tokens(r: ProbeResult, n: int, cap: int | None) -> None:
    """``usage.completion_tokens`` over the cap of 1 proves it was ignored."""
    if cap == 1 and n > 1 and r.notes.cap_ignored is None:
        r.notes.cap_ignored = f"usage says {n} completion tokens for max_tokens 1"


_CHANNEL_WORDS = {
    "reasoning": "hidden reasoning (reasoning_content, reasoning or thinking deltas)",
    "tool_call": "a tool call",
    "hidden": "a token counted by the server (usage.completion_tokens) and sent as no text",
}


def note(notices: dict[str, str], r: ProbeResult) -> None:
    """Say each kind this probe showed once in ``notices`` (the client's)."""
    n, x = notices, r.notes
    if x.cap_ignored is not None:
        n.setdefault("max_tokens ignored",
                     f"the server streams past max_tokens 1 ({x.cap_ignored}): each probe's "
                     "stream is closed at the second token and its TTFT stands (run file: "
                     "extra.cap_ignored)")
    if x.content_type is not None and x.content_type.endswith("(JSON lines)"):
        n.setdefault("JSON lines stream",
                     f"the server streams one JSON object a line ({x.content_type}), not "
                     "Server-Sent Events (Ollama's native API, an NDJSON relay); each line "
                     "is read as one event (run file: extra.content_type)")
    elif x.content_type is not None:
        n.setdefault(f"stream labelled {x.content_type}",
                     f"the server labels its event stream {x.content_type!r}, not "
                     "text/event-stream; it is read as SSE (run file: extra.content_type)")
    if x.content_encoding is not None:
        n.setdefault("compressed stream",
                     f"the server compresses the stream ({x.content_encoding}) although "
                     "probes ask for identity; it is decoded as it arrives")
    if x.redirected is not None:
        red = x.redirected
        n.setdefault("redirected",
                     f"probes are redirected (HTTP {red.status}) to {red.to}: TTFT is "
                     "timed from the redirected request; use that URL to save the round trip")
    channel = x.token_channel
    if r.ok and channel in _CHANNEL_WORDS:
        how = ("TTFT is timed at the first event of the answer (finish_reason or usage)"
               if channel == "hidden" else "TTFT is timed at it")
        n.setdefault("token not text",
                     f"a probe's generated token was not visible text: it was "
                     f"{_CHANNEL_WORDS[channel]}; {how} (run file: extra.token_channel)")
    if r.error_kind == "buffered":
        n.setdefault("buffered",
                     "the answer arrives all at once (a gateway or proxy buffers the stream): "
                     "TTFT cannot be known; " + BUFFER_ADVICE)


#: After a check's last token, how long to wait for another before deciding on those.
CHECK_TAIL_S = 1.0


class BufferCheck:
    """Whether the path to the server buffers its streams, asked once per client.

    State: ``verdict``, "streams" | "buffers" | "unknown" once a complete check
    answered (None before).  Given: the ``Sender`` and the ``RequestBody`` the check's
    request goes out with, the probes' ``endpoint``, the API flavour and the client's
    timeout (seconds)."""

    def __init__(self, sender: Sender, body: RequestBody, endpoint: str, timeout: float) -> None:
        self.verdict: str | None = None
        self._sender = sender
        self._body = body
        self._endpoint = endpoint
        self._timeout = timeout

    async def settle(self, r: ProbeResult) -> None:
        """Decide a probe whose token came with the end (see the module docstring).  The
        check runs within what is left of the probe's timeout (no probe outlives it); a
        check cut short by that is not remembered (the next such probe asks again)."""
        verdict = self.verdict
        if verdict is None:
            left = self._timeout - (r.total_s or 0.0)
            verdict, complete = await self.check(max(0.0, left))
            if complete:
                self.verdict = verdict
        if verdict == "streams":
            return
        arrival = r.ttft_s
        r.arrival_s = arrival
        r.ttft_s = None
        r.ok = False
        r.error_kind = "buffered"
        seen = (f"a check asking for {CHECK_TOKENS} tokens got its tokens all at once"
                if verdict == "buffers"
                else "the end of the stream was already there when its token was read")
        r.error_message = (f"the answer arrived all at once ({seen}, "
                           f"{ms(arrival or 0, 0)} after the request): a gateway or "
                           "proxy buffers the stream, so TTFT cannot be known; " + BUFFER_ADVICE)

    async def check(self, deadline_s: float | None = None) -> tuple[str, bool]:
        """("streams" | "buffers" | "unknown", complete): one request for CHECK_TOKENS
        tokens, read until they came, ``CHECK_TAIL_S`` passed without another token, or
        ``deadline_s`` (default: the client's timeout) ran out; ``complete`` is False
        when the deadline cut it short.  "buffers": two or more tokens, all in one
        moment.  Never raises."""
        body = self._body.build(_CHECK_PROMPT, CHECK_TOKENS)
        times: list[float] = []
        scratch = ProbeResult()
        complete = True
        try:
            async with asyncio.timeout(self._timeout if deadline_s is None else deadline_s):
                resp = await self._sender.post(self._endpoint, body, scratch, {})
                try:
                    if resp.status_code != 200:
                        return "unknown", True
                    dec, size = SSEStreamDecoder(), 0
                    chunks = bounded.aiter_decoded(resp).__aiter__()
                    while len(times) < CHECK_TOKENS and size <= 1_000_000:
                        try:
                            if times:  # tokens came: one more within the tail, or decide
                                tail = times[-1] + CHECK_TAIL_S - time.perf_counter()
                                async with asyncio.timeout(max(0.0, tail)):
                                    chunk = await chunks.__anext__()
                            else:
                                chunk = await chunks.__anext__()
                        except (StopAsyncIteration, TimeoutError):
                            break  # the end, or no token within the tail: decide on these
                        now = time.perf_counter()
                        size += len(chunk)
                        for ev in dec.feed(chunk):
                            try:
                                obj = json_loads(ev.data)
                                info = (classify_response_event(obj, ev.event)
                                        if self._body.api == "responses" else classify_chunk(obj))
                                if info.has_token:
                                    times.append(now)
                            except ValueError:
                                continue
                finally:
                    await resp.aclose()
        except TimeoutError:
            complete = False
        except httpx.HTTPError:
            pass
        if len(times) < 2:
            return "unknown", complete
        return ("streams" if times[-1] - times[0] >= BUFFER_SPREAD_S else "buffers"), True


#: An error that sends the client to the Responses API ("only supported in
#: v1/responses", "use the Responses API").
NAMES_RESPONSES = re.compile(r"/?v1/responses|responses api|responses endpoint", re.I)


class ResponsesCheck:
    """Whether the server answers the Responses API, asked once per client on a
    404/405 from the completions or chat endpoint.

    State: ``answers`` (None before it was asked).  Given: the httpx pool, the URL of
    ``/v1/responses``, the API flavour probed, the client's timeout (seconds) and its
    session ``notices``."""

    def __init__(self, http: httpx.AsyncClient, url: str, api: str, timeout: float,
                 notices: dict[str, str]) -> None:
        self.answers: bool | None = None
        self._http = http
        self._url = url
        self._api = api
        self._timeout = timeout
        self._notices = notices

    async def add_hint(self, r: ProbeResult) -> None:
        """Ask (once, with an empty body: a server that has it answers 400/422) and,
        when it does, add the hint to ``r``'s message and say it once."""
        if self.answers is None:
            self.answers = False
            try:
                resp = await bounded.fetch(self._http, "POST", self._url, json={},
                                           max_bytes=bounded.MAX_META_BYTES,
                                           deadline_s=min(10.0, self._timeout))
                self.answers = resp.status in (200, 400, 401, 403, 422)
            except (httpx.HTTPError, TimeoutError):
                pass
        if self.answers:
            r.error_message = (f"{r.error_message}; the server answers /v1/responses (the "
                               "Responses API) instead: use --api responses")
            self._notices.setdefault(
                "use --api responses",
                f"the server has no /v1{'/chat' if self._api == 'chat' else ''}/completions "
                "but answers /v1/responses: run with --api responses")


def model_hint(r: ProbeResult, info: ServerInfo | None, model: str | None) -> None:
    """A 4xx on a server that lists several models: name them and ``--model`` (the
    one probed, ``model``, may be an embedding or reranker model the listing did not
    reveal)."""
    if (r.ok or r.error_kind != "http" or not r.http_status or not 400 <= r.http_status < 500
            or info is None or len(info.models) < 2 or r.http_status in (401, 403)):
        return
    others = [m for m in info.models if m != model][:5]
    r.error_message = (f"{r.error_message} (model {model}; the server also lists "
                       f"{', '.join(others)}: pass --model NAME to probe another)")


#: Other listed models a client tries when the one discovery picked is refused before
#: any probe succeeded (``ModelChoice.try_others``), at most, per client.
MAX_MODEL_TRIES = 3
_ABOUT_A_MODEL = re.compile(r"model|not supported|unsupported|does not support|embedding|"
                            r"rerank|task", re.I)


class ModelChoice:
    """The model a client probes when discovery picked it (no ``--model``): refused
    before any probe succeeded, another listed model is tried.

    State: whether the model was discovery's pick (``auto``), whether any probe
    succeeded (``any_ok``), the models tried (``tried``).  Given: the
    ``RequestBody`` (whose ``model`` it swaps) and the session ``notices``."""

    def __init__(self, body: RequestBody, notices: dict[str, str]) -> None:
        self.auto = body.model is None
        self.any_ok = False
        self.tried = 0
        self._body = body
        self._notices = notices

    def saw(self, r: ProbeResult) -> None:
        """Count a finished probe: once one succeeded, the model stands."""
        self.any_ok = self.any_ok or r.ok

    def may_try_others(self, r: ProbeResult, info: ServerInfo | None) -> bool:
        """Whether a failed probe should be tried with another listed model: the model
        was picked by discovery, no probe of this client has succeeded, the server
        lists others, and the answer is a 4xx about the model or what it can do ("This
        is not a chat model", "model does not support completions", 404 for the
        model), not about the key, the rate or the prompt's length."""
        return (self.auto and not self.any_ok and not r.ok and r.error_kind == "http"
                and r.http_status in (400, 404, 405, 422, 501) and info is not None
                and len(info.models) > 1 and self.tried < MAX_MODEL_TRIES
                and bool(_ABOUT_A_MODEL.search(r.error_message or "")))

    async def try_others(self, first: ProbeResult, prompt: str, info: ServerInfo,
                         attempt: Callable[[ProbeResult, JsonObject], Awaitable[None]]
                         ) -> ProbeResult:
        """Probe ``prompt`` (``attempt(result, body)``: one request) with the next
        listed models (those that look able to generate first,
        ``server_models.cannot_generate``), up to ``MAX_MODEL_TRIES`` per client; the
        first that answers becomes the model (``body.model``, ``info.model``) and is
        said once.  Returns that probe, or ``first`` (the model unchanged) when none
        does."""
        body = self._body
        picked = body.model
        tried = {picked}
        cands = [m for m in info.models if m not in tried]
        cands.sort(key=lambda m: cannot_generate({"id": m}) is not None)
        last = first
        resends = list(first.notes.resends)
        for model in cands:
            if self.tried >= MAX_MODEL_TRIES:
                break
            self.tried += 1
            resends.append(Resend(reason=f"HTTP {last.http_status} for model {last.model}; "
                                         f"tried model {model}",
                                  request_id=last.notes.request_id))
            body.model = model
            r = ProbeResult(requested_tokens=first.requested_tokens, warmup=first.warmup,
                            burst=first.burst, api=body.api, model=model)
            r.notes.resends = list(resends)
            await attempt(r, body.build(prompt))
            if r.ok:
                info.model = model
                self._notices[f"probing {model}"] = (
                    f"the model discovery picked, {picked}, was refused ("
                    f"{(first.error_message or '')[:160]}); probing {model}, the next listed "
                    "model that answers: pass --model NAME to choose")
                return r
            last = r
        body.model = picked
        return first
