"""Bounded reads from a server: every body counted in bytes *after* decompression, every
request under one deadline for the whole exchange.

httpx reads a body whole (``.read()``, ``.json()``) and inflates each network read at
once, so a 1.5 MiB gzip body of zeros becomes 1.5 GiB in memory before any size check,
and its timeout is per read, so a server trickling one byte a second holds a request
forever.  Here:

* ``aiter_decoded(response)`` yields the body from the *raw* stream through a
  decompressor that never returns more than ``DECODE_CHUNK`` bytes per call
  (``zlib``'s ``max_length``), so memory is bounded by the caller's cap plus one chunk
  whatever the compression ratio.  Encodings: identity, gzip, deflate and br (a
  gateway may compress whatever ``ACCEPT_ENCODING`` says; a server sending another,
  or stacked encodings, is refused with ``httpx.DecodingError``).
* ``fetch(client, method, url, max_bytes=..., deadline_s=...)`` sends one request and
  reads at most ``max_bytes`` decoded bytes, all of it under ``asyncio.timeout``: the
  connect, the headers and every read share one deadline.  A longer body is cut
  (``Body.truncated``), never read further.

* ``tracer(stamps)`` is the httpcore trace hook that stamps a request's connect and
  send (the probe's TTFT clock starts at ``send``; ``connect_time`` reads the connect),
  and tells discovery whether the server took the connection at all.

Every client prefilltui opens sends ``Accept-Encoding: identity`` (``ACCEPT_ENCODING``):
an honest server then sends nothing to inflate, and a compressed probe stream cannot
delay the first token in a gzip buffer.
"""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator

import httpx

#: The ``Accept-Encoding`` every prefilltui client sends (see the module docstring).
ACCEPT_ENCODING = "identity"
#: Most bytes one decompressor call returns (and so the most one network read of a
#: compressed body can add to memory before the caller's cap is checked).
DECODE_CHUNK = 64 * 1024

#: Caps on what a server may send (decoded bytes), by what it is for.
#: A model list: ~100 bytes per model; 8 MiB holds ~80,000 models.
MAX_MODELS_BYTES = 8 * 2**20
#: A metadata answer (/props, /version, /info, /api/version, /get_model_info): a few KiB.
MAX_META_BYTES = 1 * 2**20
#: A tokenize answer: one small integer per token; 1 MiB holds ~150,000 token ids for
#: the short test text (the long prompts' answers use ``MAX_TOKENIZE_BYTES``).
MAX_TOKENIZE_TEST_BYTES = 1 * 2**20
#: A tokenize answer for a probe prompt of up to 10 M tokens would be ~80 MiB of ids;
#: the cap keeps a count of prompts up to ~1.5 M tokens (vLLM answers a count too).
MAX_TOKENIZE_BYTES = 16 * 2**20


class Decoder:
    """Inflates one body's content-encoding in pieces of at most ``DECODE_CHUNK`` bytes.

    Raises:
        httpx.DecodingError: an encoding other than identity/gzip/deflate/br, or corrupt data.
    """

    def __init__(self, content_encoding: str | None) -> None:
        enc = (content_encoding or "identity").strip().lower()
        self.encoding = enc
        self._first = enc == "deflate"  # raw deflate is tried once if zlib-wrapped fails
        self._br = None
        if enc in ("", "identity"):
            self._z = None
        elif enc in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif enc == "deflate":
            self._z = zlib.decompressobj()
        elif enc == "br":  # gateways brotli-compress whatever Accept-Encoding says
            import brotli

            self._z = None
            self._br = brotli.Decompressor()
        else:
            raise httpx.DecodingError(f"unsupported content-encoding {enc[:40]!r} "
                                      f"(prefilltui asks for {ACCEPT_ENCODING})")

    def pieces(self, data: bytes) -> Iterator[bytes]:
        """The decoded pieces of ``data`` (each at most DECODE_CHUNK bytes), lazily: a
        consumer that stops early never inflates the rest."""
        if self._br is not None:
            yield from self._brotli(data)
            return
        if self._z is None:
            for i in range(0, len(data), DECODE_CHUNK):
                yield data[i:i + DECODE_CHUNK]
            return
        try:
            piece = self._z.decompress(data, DECODE_CHUNK)
        except zlib.error as e:
            if self._first:  # not zlib-wrapped: raw deflate, as some servers send it
                self._first = False
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                yield from self.pieces(data)
                return
            raise httpx.DecodingError(f"corrupt {self.encoding} body: {e}") from None
        self._first = False
        while piece:
            yield piece
            if not self._z.unconsumed_tail:
                break
            try:
                piece = self._z.decompress(self._z.unconsumed_tail, DECODE_CHUNK)
            except zlib.error as e:
                raise httpx.DecodingError(f"corrupt {self.encoding} body: {e}") from None


    def _brotli(self, data: bytes) -> Iterator[bytes]:
        import brotli

        try:
            # each call returns about DECODE_CHUNK (up to ~1.5x); empty input drains
            # what the last one held back, until nothing is left
            piece = self._br.process(data, output_buffer_limit=DECODE_CHUNK)
            while piece:
                yield piece
                if self._br.is_finished():
                    break
                piece = self._br.process(b"", output_buffer_limit=DECODE_CHUNK)
        except brotli.error as e:
            raise httpx.DecodingError(f"corrupt br body: {e}") from None


async def aiter_decoded(resp: httpx.Response) -> AsyncIterator[bytes]:
    """The decoded body of a streamed response, piece by piece (at most DECODE_CHUNK
    bytes each, whatever the compression ratio).  Stop iterating to stop reading.

    Raises:
        httpx.DecodingError: an unsupported or corrupt content-encoding;
        httpx.HTTPError: the network failed.
    """
    dec = Decoder(resp.headers.get("content-encoding"))
    async for raw in resp.aiter_raw():
        for piece in dec.pieces(raw):
            yield piece


def json_request(obj: Any) -> dict[str, Any]:
    """The keyword arguments that send ``obj`` as a JSON request body (``content`` and
    its ``Content-Type``), in place of httpx's ``json=``.

    httpx encodes ``json=`` with ``ensure_ascii=False`` then UTF-8, so a value the server
    itself sent with a lone surrogate (a model id ``"\\ud800"`` from ``/v1/models``,
    echoed back in every probe) raises ``UnicodeEncodeError`` in the middle of a sweep.
    Here every non-ASCII character is escaped (``\\u....``): the server decodes exactly
    the value it sent.  NaN/infinity are refused (``ValueError``), as JSON has none.
    """
    data = json.dumps(obj, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return {"content": data.encode("ascii"),
            "headers": {"Content-Type": "application/json"}}


@dataclass(frozen=True, slots=True)
class Body:
    """What ``fetch`` read: the status, the headers, at most ``max_bytes`` decoded bytes,
    and whether the body was longer (then ``content`` is its first ``max_bytes``)."""

    status: int
    headers: httpx.Headers
    content: bytes
    truncated: bool = False

    @property
    def ok(self) -> bool:
        """200 and read whole."""
        return self.status == 200 and not self.truncated

    def json(self) -> Any:
        """The decoded JSON of a whole 200 body, else None (never raises)."""
        if not self.ok:
            return None
        try:
            return json.loads(self.content)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None

    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


async def read_capped(resp: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    """(at most ``max_bytes`` decoded bytes of ``resp``, whether there was more).  The
    bytes are read into one buffer (a ``bytearray``, never copied whole again)."""
    buf = bytearray()
    async for piece in aiter_decoded(resp):
        room = max_bytes - len(buf)
        if len(piece) > room:
            buf += piece[:room]
            return buf, True
        buf += piece
    return buf, False


async def fetch(client: httpx.AsyncClient, method: str, url: str, *, max_bytes: int,
                deadline_s: float, **kwargs: Any) -> Body:
    """Send one request and read at most ``max_bytes`` decoded bytes of the answer, the
    whole exchange (connect, headers, every read) within ``deadline_s`` seconds.

    A ``json=`` body is sent as ``json_request`` encodes it.

    Raises:
        TimeoutError: past the deadline; httpx.HTTPError: a network or decoding failure.
    """
    if "json" in kwargs:
        body = json_request(kwargs.pop("json"))
        kwargs["content"] = body["content"]
        kwargs["headers"] = {**body["headers"], **(kwargs.get("headers") or {})}
    async with asyncio.timeout(deadline_s):
        async with client.stream(method, url, timeout=deadline_s, **kwargs) as resp:
            content, truncated = await read_capped(resp, max_bytes)
            return Body(resp.status_code, resp.headers, content, truncated)


_SEND_EVENTS = ("http11.send_request_headers.started", "http2.send_request_headers.started")


def tracer(stamps: dict[str, float]):
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


def connect_time(stamps: dict[str, float]) -> float | None:
    """Seconds from the TCP connect's start to the connection being ready (TLS
    included) in ``tracer``'s ``stamps``; None when no new connection was opened."""
    t0 = stamps.get("connection.connect_tcp.started")
    t1 = stamps.get("ready")
    return None if t0 is None or t1 is None else t1 - t0
