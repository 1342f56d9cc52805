"""Incremental Server-Sent Events framing and OpenAI stream-chunk classification.

Framing follows the event-stream interpretation rules of the HTML standard
(https://html.spec.whatwg.org/multipage/server-sent-events.html): bytes are
buffered until a blank line completes an event; an event may be split across
reads or several may arrive in one read; multi-line ``data:`` fields are joined
with ``\\n``; comments (``:...``) and blocks without data (``id:``/``retry:`` only)
dispatch nothing.  Field parsing reuses httpx-sse's ``SSEDecoder``; line
splitting is ``SSELineSplitter`` below (httpx-sse's line decoder holds a trailing
CR back until the next read, which would delay the TTFT stamp); this module also
adds the byte -> text step (incremental UTF-8, BOM stripped) so the caller can
feed raw socket reads and stamp the clock on the read that completes an event.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from typing import Any

from httpx_sse._decoders import SSEDecoder

from prefilltui.model.jsontypes import dumps_short


@dataclass(slots=True, frozen=True)
class SSEEvent:
    """One dispatched event: ``event`` type ("message" by default), joined ``data``, last ``id``."""

    event: str
    data: str
    id: str = ""
    retry: int | None = None


class SSELineSplitter:
    """Incremental line splitting by the standard's rule: a line ends at CRLF, a
    lone LF or a lone CR (HTML standard, "Parsing an event stream": ``end-of-line
    = ( cr lf / cr / lf )``).

    A CR completes its line at once, in the read that brings it: whether an LF
    follows is unknown until the next read, so the splitter emits the line and
    remembers to skip one LF if the next text starts with it.  (httpx-sse's
    ``SSELineDecoder`` instead holds a trailing CR until the next read, so an event
    ending in ``\\r\\n\\r`` would complete one read late.)

    ``feed(text)`` -> the lines completed by ``text``, without their line ends.
    """

    def __init__(self) -> None:
        self._buf: list[str] = []
        self._skip_lf = False

    def feed(self, text: str) -> list[str]:
        if self._skip_lf and text:
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
        lines: list[str] = []
        start = 0
        for m in _EOL.finditer(text):
            end = m.start()
            if self._buf:
                self._buf.append(text[start:end])
                lines.append("".join(self._buf))
                self._buf = []
            else:
                lines.append(text[start:end])
            start = m.end()
            if m.group() == "\r" and start == len(text):
                self._skip_lf = True  # a CRLF split between two reads
        if start < len(text):
            self._buf.append(text[start:])
        return lines


_EOL = re.compile(r"\r\n|\r|\n")


class SSEStreamDecoder:
    """Feed raw body bytes, get the events completed by those bytes.

    ``feed(b)`` -> list of ``SSEEvent`` (possibly empty); ``close()`` -> events a
    final unterminated block would not dispatch (always ``[]`` per the standard:
    an incomplete event at end of stream is discarded).
    """

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lines = SSELineSplitter()
        self._events = SSEDecoder()
        self._first = True

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        text = self._utf8.decode(chunk)
        if self._first and text:
            self._first = False
            if text.startswith("\ufeff"):
                text = text[1:]
        if not text:
            return []
        out: list[SSEEvent] = []
        for line in self._lines.feed(text):
            ev = self._events.decode(line)
            # The standard dispatches nothing when the data buffer is empty
            # (e.g. "retry: 3000\n\n" or "id: 7\n\n"); httpx-sse returns those too.
            if ev is not None and (ev.data != "" or ev.event == "error"):
                out.append(SSEEvent(ev.event, ev.data, ev.id, ev.retry))
        return out

    def close(self) -> list[SSEEvent]:
        self._utf8.decode(b"", final=True)
        # an unterminated last line or block is discarded (no blank line ended it)
        self._lines = SSELineSplitter()
        return []


# --------------------------------------------------------------------------------------
# OpenAI-compatible chunk classification


@dataclass(slots=True)
class ChunkInfo:
    """What one ``data:`` JSON chunk carries.

    has_token: a generated token on any channel (text, content, reasoning, tool call).
    channel: where the token was: "text" (completions ``text``), "content" (chat
    ``content``/``refusal``, Responses ``output_text``), "reasoning" (``reasoning_content``,
    ``reasoning``, ``thinking``: hidden reasoning), "tool_call" (``tool_calls``,
    ``function_call``); None without a token.
    error: the server's error message when the chunk is an error object.
    usage / timings: the raw dicts when present (usage-only chunks have no token);
    a Responses API usage is given in chat names (``prompt_tokens``, ...).
    completion_tokens: ``usage.completion_tokens`` when it is an int, else None.
    """

    has_token: bool = False
    channel: str | None = None
    error: str | None = None
    error_obj: Any = None
    usage: dict | None = None
    timings: dict | None = None
    finish_reason: str | None = None
    completion_tokens: int | None = None


def _nonempty(v: Any) -> bool:
    if v is None:
        return False
    if isinstance(v, str):
        return v != ""
    if isinstance(v, (list, dict)):
        return len(v) > 0
    return True


#: Keys of a content part that say what it is, not what was generated.
_PART_META = frozenset({"type", "index", "role"})


def _has_text(v: Any, depth: int = 0) -> bool:
    """Whether a text channel's value (``content``, ``reasoning``, ...) carries generated
    text: a non-empty string, or content parts with one inside
    (``[{"type": "text", "text": ""}]``, the role chunk of gateways that send content as
    parts, carries none)."""
    if isinstance(v, list):
        return depth < 8 and any(_has_text(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return depth < 8 and any(_has_text(x, depth + 1) for k, x in v.items()
                                 if k not in _PART_META)
    return _nonempty(v)


#: Delta keys that carry a generated token, with the channel each names (vLLM and
#: SGLang ``reasoning_content``, OpenRouter/Ollama ``reasoning``, ``thinking`` of
#: gateways that relay Anthropic-style thinking, tool calls old and new).
TOKEN_KEYS = (("content", "content"), ("refusal", "content"),
              ("reasoning_content", "reasoning"), ("reasoning", "reasoning"),
              ("thinking", "reasoning"), ("tool_calls", "tool_call"),
              ("function_call", "tool_call"))


#: Largest ``completion_tokens`` taken as a count (the longest context windows, ~10 M
#: tokens; probe_values.MAX_PLAUSIBLE_TOKENS): a server's 4,000-digit number is no count.
MAX_COMPLETION_COUNT = 10_000_000


def _set_usage(info: ChunkInfo, usage: Any) -> None:
    if isinstance(usage, dict):
        info.usage = usage
        ct = usage.get("completion_tokens")
        if isinstance(ct, int) and not isinstance(ct, bool) and 0 <= ct <= MAX_COMPLETION_COUNT:
            info.completion_tokens = ct


def classify_chunk(obj: Any) -> ChunkInfo:
    """Classify a decoded JSON chunk from /v1/completions or /v1/chat/completions.

    A token counts when any choice has non-empty ``text`` (completions) or a
    ``delta``/``message`` with a non-empty key of ``TOKEN_KEYS`` (``channel`` says
    which).  A role-only delta, empty strings, and chunks with empty/missing
    ``choices`` (usage-only, progress) never count.
    """
    info = ChunkInfo()
    if not isinstance(obj, dict):
        info.error = f"stream chunk is {type(obj).__name__}, not an object"
        return info
    if "error" in obj and obj["error"] not in (None, ""):
        err = obj["error"]
        info.error_obj = err
        info.error = error_message(err)
        return info
    _set_usage(info, obj.get("usage"))
    timings = obj.get("timings")
    if isinstance(timings, dict):
        info.timings = timings
    choices = obj.get("choices")
    if isinstance(choices, list):
        for ch in choices:
            if not isinstance(ch, dict):
                continue
            if ch.get("finish_reason"):
                info.finish_reason = str(ch["finish_reason"])
            if _nonempty(ch.get("text")):
                info.has_token, info.channel = True, info.channel or "text"
            for key in ("delta", "message"):
                d = ch.get(key)
                if not isinstance(d, dict):
                    continue
                for k, channel in TOKEN_KEYS:
                    v = d.get(k)
                    if _has_text(v) if channel in ("content", "reasoning") else _nonempty(v):
                        info.has_token, info.channel = True, info.channel or channel
                        break
    return info


#: Responses API (``/v1/responses``) stream events that carry a generated token,
#: with their channel (OpenAI's "Streaming events" reference).
RESPONSES_TOKEN_EVENTS = {
    "response.output_text.delta": "content", "response.refusal.delta": "content",
    "response.reasoning_text.delta": "reasoning",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.function_call_arguments.delta": "tool_call",
}


def classify_response_event(obj: Any, event: str | None = None) -> ChunkInfo:
    """Classify a decoded JSON event of a Responses API stream (``type`` names it; a
    server that names it only in the SSE ``event:`` field passes that as ``event``).

    A token: an event of ``RESPONSES_TOKEN_EVENTS`` with a non-empty ``delta``.  The
    end: ``response.completed`` / ``response.incomplete`` (``finish_reason`` is the
    response's status), whose ``response.usage`` (``input_tokens``,
    ``output_tokens``, ``input_tokens_details.cached_tokens``) is given in chat
    names.  ``error`` and ``response.failed`` events are errors.
    """
    info = ChunkInfo()
    if not isinstance(obj, dict):
        info.error = f"stream event is {type(obj).__name__}, not an object"
        return info
    kind = obj.get("type")
    if kind is None and event and event != "message":
        kind = event
    if kind == "error" or ("error" in obj and obj["error"] not in (None, "")
                           and kind is None):
        info.error_obj = obj.get("error") or obj
        info.error = error_message(info.error_obj)
        return info
    resp = obj.get("response") if isinstance(obj.get("response"), dict) else {}
    if kind == "response.failed":
        info.error_obj = resp.get("error") or {"message": "response.failed"}
        info.error = error_message(info.error_obj)
        return info
    if kind in RESPONSES_TOKEN_EVENTS and _nonempty(obj.get("delta")):
        info.has_token, info.channel = True, RESPONSES_TOKEN_EVENTS[kind]
    if kind in ("response.completed", "response.incomplete"):
        info.finish_reason = str(resp.get("status") or kind.rsplit(".", 1)[1])
        u = resp.get("usage")
        if isinstance(u, dict):
            usage: dict[str, Any] = {"prompt_tokens": u.get("input_tokens"),
                                     "completion_tokens": u.get("output_tokens")}
            det = u.get("input_tokens_details")
            if isinstance(det, dict) and "cached_tokens" in det:
                usage["prompt_tokens_details"] = {"cached_tokens": det["cached_tokens"]}
            _set_usage(info, usage)
    return info


#: Keys under which servers put an error's words, in the order they are preferred:
#: OpenAI ``message``, FastAPI/vLLM/TGI ``detail`` (a string or pydantic's list),
#: ``error``, ``msg``, OAuth ``error_description``, RFC 9457 problem details
#: (``detail`` over ``title``), ``reason``/``description`` of other gateways.
ERROR_KEYS = ("message", "detail", "error", "msg", "error_description", "description",
              "reason", "title")


def error_message(err: Any, depth: int = 0) -> str:
    """The human message of an error value: an OpenAI-style dict, FastAPI's ``detail``
    (a string, or pydantic's list of ``{"loc", "msg"}``: ``body.max_tokens: Extra
    inputs are not permitted``), a list of errors (Google APIs send ``[{"error": ...}]``),
    ``{"errors": [...]}``, a string, or anything else (quoted as JSON).  At most 500
    characters."""
    if depth > 8:
        return dumps_short(err, 500)
    if isinstance(err, dict):
        for k in ERROR_KEYS:
            v = err.get(k)
            if isinstance(v, str) and v:
                return v[:500]
            if isinstance(v, (dict, list)) and v:
                return error_message(v, depth + 1)
        errors = err.get("errors")
        if isinstance(errors, (list, dict)) and errors:
            return error_message(errors, depth + 1)
        if isinstance(err.get("msg"), str) and err.get("loc"):
            return _pydantic(err)
        return dumps_short(err, 500)
    if isinstance(err, list) and err:
        parts = [_pydantic(e) if isinstance(e, dict) and "msg" in e and "loc" in e
                 else error_message(e, depth + 1) for e in err[:5]]
        more = f" (and {len(err) - 5} more)" if len(err) > 5 else ""
        return ("; ".join(parts) + more)[:500]
    return str(err)[:500]


def _pydantic(e: dict) -> str:
    """``body.max_tokens: Extra inputs are not permitted`` from a pydantic error."""
    loc = e.get("loc")
    where = ".".join(str(x) for x in loc) if isinstance(loc, (list, tuple)) else str(loc)
    return f"{where}: {e.get('msg')}"


def error_part(obj: Any) -> Any:
    """The part of a decoded error body that holds the error (for ``error_message``), or
    None when it looks like no error at all: ``obj["error"]`` when it says something,
    else the object itself when it has one of ``ERROR_KEYS`` or ``errors``; a list
    (``[{"error": {...}}]``) or a string as it is."""
    if isinstance(obj, dict):
        e = obj.get("error")
        if isinstance(e, (str, dict, list)) and e:
            return e
        if any(obj.get(k) for k in ERROR_KEYS + ("errors",)):
            return obj
        return None
    if isinstance(obj, (list, str)) and obj:
        return obj
    return None
