"""One background-load request: its body and its stream, token by token.

``send_load_request`` streams one request and appends each token's arrival
(``time.perf_counter``, stamped on the read that completes its SSE event) to the
caller's list under the caller's lock; ``LoadFault`` says why a request failed (the
generator then stops the whole load).  A 400/422 that names a field the load adds
(``ignore_eos``, ``stream_options``) drops that field for every later request, as the
probes do.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from prefilltui.measure import bounded
from prefilltui.measure.server import describe_exc
from prefilltui.measure.sse import SSEStreamDecoder, classify_chunk
from prefilltui.model.jsontypes import loads as json_loads

#: Fields the load adds that a server may reject (dropped once, as probes do).
OPTIONAL_FIELDS = ("ignore_eos", "stream_options")
#: Most bytes one load stream may send (decoded): a 1,024-token stream is ~0.5 MiB of
#: events; more means a runaway server (issue 25: every read is bounded).
MAX_LOAD_STREAM_BYTES = 16 * 2**20


class LoadFault(Exception):
    """A load request failed: the whole load stops (``LoadGenerator.fault``)."""


def load_body(client: Any, prompt: str, max_tokens: int, dropped: set[str]) -> dict[str, Any]:
    """The request body of a load request through ``client`` (a ProbeClient: its
    model, API flavour and the server kind discovery found)."""
    body: dict[str, Any] = {"stream": True, "temperature": 0, "max_tokens": max_tokens,
                            "stream_options": {"include_usage": True}}
    if client.model:
        body["model"] = client.model
    if client.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    kind = client.info.kind if client.info is not None else "openai"
    if kind in ("llama.cpp", "vllm", "sglang"):
        body["ignore_eos"] = True  # a decode stream must not end early
    if kind == "llama.cpp":
        body["cache_prompt"] = False
    for k in dropped:
        body.pop(k, None)
    return body


async def send_load_request(client: Any, body: dict[str, Any], live: Any,
                            lock: threading.Lock, dropped: set[str]) -> bool:
    """Stream one request, appending token arrivals to ``live.arrivals`` (under
    ``lock``) and the server's prompt count to ``live.prompt_tokens``; True when it
    must be resent without a field the server rejected (added to ``dropped``).

    Raises:
        LoadFault: a status other than 200, a network or protocol failure, a timeout,
            an error inside the stream.
    """
    try:
        async with client.http.stream("POST", client.endpoint,
                                      **bounded.json_request(body)) as resp:
            if resp.status_code != 200:
                head, _ = await bounded.read_capped(resp, 2000)
                # the probe client's secrets out of the server's words, before any cut
                text = client.scrub(head.decode("utf-8", "replace")) or ""
                for k in OPTIONAL_FIELDS:
                    if resp.status_code in (400, 422) and k in body and k in text:
                        dropped.add(k)
                        return True
                raise LoadFault(f"load request answered HTTP {resp.status_code}: "
                                f"{' '.join(text.split())[:160]}")
            dec = SSEStreamDecoder()
            size = 0
            async for chunk in bounded.aiter_decoded(resp):
                t = time.perf_counter()
                size += len(chunk)
                if size > MAX_LOAD_STREAM_BYTES:
                    raise LoadFault(f"load stream over {MAX_LOAD_STREAM_BYTES // 2**20} MiB, "
                                    "cut off")
                for ev in dec.feed(chunk):
                    _event(ev.data, t, lock, live)
    except httpx.TimeoutException:
        raise LoadFault(f"load request timed out ({client.timeout:g} s)") from None
    except httpx.HTTPError as e:
        raise LoadFault(f"load request failed: {describe_exc(e)}") from None
    return False


def _event(data: str, t: float, lock: threading.Lock, live: Any) -> None:
    if data.strip() == "[DONE]":
        return
    try:
        obj = json_loads(data)
    except ValueError:
        raise LoadFault(f"load stream sent non-JSON data: {data[:80]!r}") from None
    info = classify_chunk(obj)
    if info.error:
        raise LoadFault(f"load stream error: {info.error[:160]}")
    # a token: any text, or an empty text/delta that is not the closing chunk
    # (vLLM streams "" for a token that ends inside a UTF-8 character)
    empty_token = False
    if not info.has_token and info.finish_reason is None:
        chs = obj.get("choices") if isinstance(obj, dict) else None
        empty_token = bool(chs) and isinstance(chs[0], dict) and (
            chs[0].get("text") == "" or (isinstance(chs[0].get("delta"), dict)
                                          and chs[0]["delta"].get("content") == ""))
    if info.has_token or empty_token:
        with lock:
            live.arrivals.append(t)
    if info.usage and isinstance(info.usage.get("prompt_tokens"), int):
        live.prompt_tokens = info.usage["prompt_tokens"]
