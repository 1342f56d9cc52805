"""One background-load request: its stream, token by token.

Its body is the probe client's (``RequestBody.build`` with the load's output cap: the
model, the API flavour, the server's own fields, and none the server rejected, whoever
of the session's clients learned it).  ``send_load_request`` streams one request and
appends each token's arrival (``time.perf_counter``, stamped on the read that completes
its SSE event) to the caller's list under the caller's lock; a 400/422 comes back as a
``Refusal`` for the generator to read as the probes do (``RequestBody.named_field``:
resent without the field it names); ``LoadFault`` says why a request failed (the
generator then stops the whole load).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

from prefilltui.measure import bounded
from prefilltui.measure.probe import REQUEST_ID_HEADER
from prefilltui.measure.server import describe_exc
from prefilltui.measure.sse import SSEStreamDecoder, classify_chunk
from prefilltui.model.jsontypes import loads as json_loads

#: The role in a load request's ``X-Request-Id`` (``prefilltui-load-<hex>-<n>``): its
#: span is the load's, never a user's or a probe's (``measure.otlp.users.LOAD_ID``).
LOAD_ROLE = "load"
#: Most bytes one load stream may send (decoded): a 1,024-token stream is ~0.5 MiB of
#: events; more means a runaway server (every read from a server is bounded).
MAX_LOAD_STREAM_BYTES = 16 * 2**20


class LoadFault(Exception):
    """A load request failed: the whole load stops (``LoadGenerator.fault``)."""


@dataclass(frozen=True)
class Refusal:
    """A 400/422 answer to a load request: its status and its words (the client's
    secrets scrubbed, at most 2,000 bytes read)."""

    status: int
    text: str

    def fault(self) -> LoadFault:
        """The fault when no field of the body is to blame."""
        return LoadFault(f"load request answered HTTP {self.status}: "
                         f"{' '.join(self.text.split())[:160]}")


async def send_load_request(client: Any, body: dict[str, Any], live: Any,
                            lock: threading.Lock) -> Refusal | None:
    """Stream one request, appending token arrivals to ``live.arrivals`` (under
    ``lock``) and the server's prompt count to ``live.prompt_tokens``; None when it
    streamed, the ``Refusal`` when the server answered 400/422 (nothing streamed).

    Raises:
        LoadFault: another status than 200, 400 or 422, a network or protocol failure,
            a timeout, an error inside the stream.
    """
    req = bounded.json_request(body)
    req["headers"][REQUEST_ID_HEADER] = client.sender.next_request_id(LOAD_ROLE)
    try:
        async with client.http.stream("POST", client.endpoint, **req) as resp:
            if resp.status_code != 200:
                head, _ = await bounded.read_capped(resp, 2000)
                # the probe client's secrets out of the server's words, before any cut
                said = Refusal(resp.status_code,
                               client.scrub(head.decode("utf-8", "replace")) or "")
                if resp.status_code in (400, 422):
                    return said
                raise said.fault()
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
    return None


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
