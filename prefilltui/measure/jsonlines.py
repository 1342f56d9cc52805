"""Streams of JSON lines (NDJSON) read as the event stream they stand for.

Some servers stream one JSON object per line instead of Server-Sent Events: Ollama's
native API (``/api/generate``, ``/api/chat``: ``{"response": "Hi", "done": false}``,
``{"message": {"content": ...}}``, a last ``{"done": true, "prompt_eval_count": N,
"prompt_eval_duration": ns}``), and gateways that relay OpenAI chunks as
``application/x-ndjson`` / ``application/jsonl``.  ``JSONLinesAsSSE`` turns each
complete line into one ``data:`` event (an Ollama object into the OpenAI chunk it
means), bytes in, bytes out, read by read, so the probe's clock still stamps the
read that completes the token's line.

Ollama's fields: https://github.com/ollama/ollama/blob/main/docs/api.md ("Generate a
completion", "Generate a chat completion"): durations in nanoseconds.
"""

from __future__ import annotations

import json
import re
from typing import Any, AsyncIterator

import httpx

from prefilltui.model.jsontypes import loads as json_loads

#: Content types of JSON-lines streams.
_JSONL_TYPES = re.compile(r"ndjson|jsonl|json-seq|x-json-stream|jsonlines", re.I)
#: The most one unfinished line may hold (the probe's stream cap bounds the total).
MAX_LINE_BYTES = 4 * 2**20


def looks_like_jsonlines(ctype: str, head: bytes) -> bool:
    """True for a JSON-lines stream: a content type that says so, or a head whose first
    line is a JSON object that is a stream chunk (Ollama's ``done`` key, an OpenAI
    ``*.chunk`` object) or is followed by another line.  One JSON object alone (a
    buffered completion) is not."""
    if _JSONL_TYPES.search(ctype or ""):
        return True
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text.startswith(b"{"):
        return False
    line, nl, rest = text.partition(b"\n")
    if not nl:
        return False
    try:
        obj = json_loads(line)
    except ValueError:
        return False
    if not isinstance(obj, dict):
        return False
    chunk = "done" in obj or str(obj.get("object", "")).endswith(".chunk")
    return chunk or rest.lstrip().startswith(b"{")


def from_ollama(obj: Any) -> Any:
    """An Ollama native stream object as the OpenAI chunk it means; anything else as it
    is.  ``response`` -> completions ``text``; ``message`` -> chat ``delta`` (its
    ``thinking`` as ``reasoning``); ``done`` -> ``finish_reason`` (``done_reason``);
    ``prompt_eval_count``/``eval_count`` -> ``usage``; ``prompt_eval_duration`` (ns)
    -> ``timings.prompt_ms``."""
    if not isinstance(obj, dict) or "choices" in obj or "error" in obj or not (
            "done" in obj and ("response" in obj or "message" in obj or obj.get("done"))):
        return obj
    choice: dict[str, Any] = {"index": 0, "finish_reason": None}
    if isinstance(obj.get("response"), str):
        choice["text"] = obj["response"]
    msg = obj.get("message")
    if isinstance(msg, dict):
        choice["delta"] = {"content": msg.get("content"), "reasoning": msg.get("thinking"),
                           "tool_calls": msg.get("tool_calls")}
    out: dict[str, Any] = {"choices": [choice]}
    if obj.get("done") is True:
        choice["finish_reason"] = str(obj.get("done_reason") or "stop")
        usage = {k: obj[v] for k, v in (("prompt_tokens", "prompt_eval_count"),
                                         ("completion_tokens", "eval_count")) if v in obj}
        if usage:
            out["usage"] = usage
        ns = obj.get("prompt_eval_duration")
        if isinstance(ns, (int, float)) and not isinstance(ns, bool):
            out["timings"] = {"prompt_ms": ns / 1e6}
    return out


class JSONLinesAsSSE:
    """Feed the raw bytes of a JSON-lines stream, get ``data:`` events for its complete
    lines (a partial line waits for its end).  A line that is not JSON is passed on as
    it is (the probe reports it as malformed).

    Raises:
        httpx.DecodingError: an unfinished line past ``MAX_LINE_BYTES``.
    """

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> bytes:
        self._buf += data
        if b"\n" not in data:
            if len(self._buf) > MAX_LINE_BYTES:
                raise httpx.DecodingError(f"a JSON line over {MAX_LINE_BYTES} bytes, cut off")
            return b""
        *lines, rest = bytes(self._buf).split(b"\n")
        self._buf = bytearray(rest)
        out = bytearray()
        for line in lines:
            line = line.strip()
            if not line:
                continue
            try:
                line = json.dumps(from_ollama(json_loads(line))).encode()
            except ValueError:
                pass
            out += b"data: " + line + b"\n\n"
        return bytes(out)

    async def wrap(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``chunks`` converted read by read (a read with no complete line yields b"")."""
        async for data in chunks:
            yield self.feed(data)
