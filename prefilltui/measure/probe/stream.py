"""A probe's stream and its timing rules: where the TTFT clock starts and stops, and
when a probe's data is complete.

``StreamReader`` sends the request (``read``: the clock starts when its bytes go
out), tells what the body is (an event stream, JSON lines, or no stream:
``errors``), and reads the events (``read_events``: TTFT at the read that completes the first token event; the data
is complete at ``[DONE]``, the finish_reason, a second token, or ``TOKEN_TAIL_S``
after the token; ``POST_COMPLETION_GRACE_S`` more for the closing bytes).  The
timing constants live here, with the loop they time.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from prefilltui.measure import bounded
from prefilltui.measure import gateway
from prefilltui.measure.probe import kinds as _kinds
from prefilltui.measure.probe.errors import ErrorReader
from prefilltui.measure import server as _server
from prefilltui.measure.jsonlines import JSONLinesAsSSE, looks_like_jsonlines
from prefilltui.measure.probe.sending import Secrets, Sender, clip_header
from prefilltui.measure.probe.values import MAX_PLAUSIBLE_TOKENS, take_usage
from prefilltui.measure.sse import (SSEStreamDecoder, classify_chunk, classify_response_event,
                                    error_message)
from prefilltui.model.jsontypes import loads as json_loads
from prefilltui.model.probe_notes import Resend
from prefilltui.model.types import ProbeResult

#: Cap on a streamed body (a one-token stream is a few KiB; 4 MiB means runaway).
MAX_STREAM_BYTES = 4 * 1024 * 1024
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


class StreamReader:
    """The stream of one probe, timed: ``read`` sends the request and reads its answer
    into a ``ProbeResult``.  No state of its own between probes; given: the API
    flavour, the ``Sender`` that POSTs, the ``ErrorReader`` for answers that are no
    token stream, and the client's ``Secrets``."""

    def __init__(self, api: str, sender: Sender, errors: ErrorReader, secrets: Secrets) -> None:
        self.api = api
        self._sender = sender
        self._errors = errors
        self._secrets = secrets

    async def read(self, url: str, body: dict, r: ProbeResult, cap: int | None = 1,
                   ceiling: int = MAX_PLAUSIBLE_TOKENS) -> None:
        """POST ``body`` to ``url`` and fill ``r``: the clock starts when the request's
        bytes go out (``r.t_send``), the answer is told apart (an event stream, JSON
        lines, an error, no stream) and read (``read_events``).  ``cap``: the output
        cap the body sends; ``ceiling``: the largest prompt count believed
        (``values.token_ceiling``).  Raises httpx and timeout errors (the client's
        ``_attempt`` turns them into a failed result)."""
        stamps: dict[str, float] = {}
        resends: list[Resend] = []
        rid = r.notes.request_id = self._sender.next_request_id()
        r.started_at = time.time()
        t0 = r.t_send = time.perf_counter()
        try:
            resp = await self._sender.post(url, body, r, stamps, rid, resends)
        finally:
            if resends:  # recorded whether or not the resend got an answer
                r.notes.resent_on_stale_connection = True
                r.notes.resends.extend(resends)
        try:
            r.connect_s = bounded.connect_time(stamps)
            if r.connect_s is not None:
                r.notes.connect_excluded = True
            # TTFT runs from when the request's bytes start to go out (after pool
            # checkout and any connect), as a raw-socket client would time it.
            t0 = r.t_send = stamps.get("send", stamps.get("ready", t0))
            r.http_status = resp.status_code
            if resp.status_code != 200:
                await self._errors.http_error(resp, r)
                return
            enc = resp.headers.get("content-encoding", "")
            if enc and enc.lower() != "identity":
                r.notes.content_encoding = clip_header(enc)  # decoded, bounded (measure.bounded)
            ctype = clip_header(resp.headers.get("content-type", ""))
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
                await self._errors.not_a_stream(resp, r, ctype, head, chunks)
                return
            await self.read_events(resp, r, t0, first, chunks, cap=cap, ceiling=ceiling)
        finally:
            await resp.aclose()

    async def read_events(self, resp: httpx.Response, r: ProbeResult, t0: float,
                          first: tuple[float, bytes] | None = None, rest=None, *,
                          cap: int | None = 1, ceiling: int = MAX_PLAUSIBLE_TOKENS) -> None:
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
        brought the end is marked ``notes.token_with_end`` (``kinds.BufferCheck``
        decides whether the path buffers).  ``cap`` and ``ceiling`` as for ``read``."""
        dec = SSEStreamDecoder()
        errors, scrub = self._errors, self._secrets.scrub
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
                errors.fail(r, "protocol", f"stream over {MAX_STREAM_BYTES} bytes, cut off")
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
                        _note_late(r, scrub(msg) or "error event")
                    else:
                        errors.classify_body_error(r, ev.data, msg or "error event", stream=True)
                    continue
                try:
                    obj = json_loads(ev.data)
                except ValueError:
                    msg = f"malformed JSON in stream: {(scrub(ev.data) or '')[:120]!r}"
                    if late:
                        _note_late(r, msg)
                    else:
                        errors.fail(r, "protocol", msg)
                    continue
                info = (classify_response_event(obj, ev.event) if self.api == "responses"
                        else classify_chunk(obj))
                if info.error is not None and late:
                    _note_late(r, scrub(info.error) or "")
                    continue
                if info.error is not None and info.error_obj is not None:
                    errors.classify_body_error(r, ev.data, info.error, stream=True)
                    continue
                if info.error is not None:
                    errors.fail(r, "protocol", info.error)
                    continue
                if info.has_token and r.ttft_s is not None and r.notes.token_channel != "hidden":
                    if (cap or 1) > 1:
                        continue  # a cap over 1 (Responses API: 16): read on, within the tail
                    _kinds.second_token(r, now, cap)
                    # two tokens there at the body's first read (the role chunk, the
                    # 1st token and the 2nd at once): a buffering path that also ignores
                    # the cap (kinds.BufferCheck decides)
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
                    _kinds.count_tokens(r, info.completion_tokens, cap)
                finished = finished or info.finish_reason is not None
                take_usage(r, info.usage, info.timings, ceiling)
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
            errors.fail(r, "no_token", "stream ended without a generated token"
                       + ("" if done else " (no [DONE])"))
            return
        r.ok = True


def _together(span: float, after: int) -> bool:
    """Whether the end came with the token over several reads: the reads after the
    token's brought at least ``kinds.TOGETHER_BYTES`` within
    ``kinds.TOGETHER_SPAN_S`` (``span``: token read to end).  A buffered body
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
