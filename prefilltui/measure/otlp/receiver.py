"""The OTLP/HTTP trace receiver: ``POST /v1/traces`` on ``--otlp-listen HOST:PORT``.

An engine (vLLM ``--otlp-traces-endpoint http://HOST:PORT/v1/traces`` with
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``) or an OpenTelemetry Collector's
``otlphttp`` exporter posts its spans here; each body is decoded (``codec``), its
request spans read (``spans``) and handed to the targets (``users.TraceRouter``).

Answers (the OTLP specification): 200 with an ``ExportTraceServiceResponse``
(``partial_success`` when spans were rejected); 400 with a ``google.rpc.Status`` for a
malformed body, 413 for one over ``codec.MAX_BODY_BYTES``, 415 for another content
type or encoding, 404 / 405 for another path or method; in the request's encoding.
A bad body is answered and forgotten: the receiver keeps serving.

Bounded like the exporter's server (one asyncio loop in a daemon thread, HTTP/1.1 by
h11): at most ``MAX_CONNECTIONS`` connections (past that, the oldest one that has not
sent a whole request is closed to make room, so a flood of half-sent or idle
connections never locks the engine out; a new one is refused only while every slot
answers a request), ``REQUEST_DEADLINE_S`` per request from its first byte to its whole
body, the body read to at most ``MAX_BODY_BYTES`` (a longer declared length is refused
unread and the connection closed).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import h11

from prefilltui.measure.loop_thread import LoopThread
from prefilltui.measure.otlp import codec
from prefilltui.measure.otlp.spans import read_batch
from prefilltui.measure.otlp.users import TraceRouter

log = logging.getLogger(__name__)

#: Open connections at most (an engine keeps one or two; a Collector a few).
MAX_CONNECTIONS = 64
#: Seconds from a request's first byte (or the previous answer) to its whole body.
REQUEST_DEADLINE_S = 30.0
#: Largest request head, bytes.
MAX_HEAD_BYTES = 16 * 1024
#: The path OTLP/HTTP posts traces to.
TRACES_PATH = "/v1/traces"


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; ``:PORT`` = 127.0.0.1) as (host, port).

    Raises:
        ValueError: not HOST:PORT, a port outside 0..65535.
    """
    v = value.strip()
    host, sep, port = v.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{value!r} is not HOST:PORT")
    host = host.strip("[]") or "127.0.0.1"
    p = int(port)
    if not 0 <= p <= 65535:
        raise ValueError(f"port {p} is outside 0..65535")
    return host, p


class OtlpReceiver:
    """Serves OTLP/HTTP traces on ``host:port`` into ``router`` (module docstring).

    ``counts``: bodies answered by status; ``start()`` returns self once listening;
    ``port`` is the bound port (0 asks the system for one).

    Raises (constructor):
        OSError: the address is in use or cannot be bound.
    """

    def __init__(self, host: str, port: int, router: TraceRouter | None = None, *,
                 max_body_bytes: int = codec.MAX_BODY_BYTES) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, port), family=family, backlog=128)
        self.host, self.port = self._sock.getsockname()[:2]
        self.router = router if router is not None else TraceRouter()
        self.max_body_bytes = max_body_bytes
        self.counts: dict[int, int] = {}
        self.spans = 0
        self._open = 0
        #: open connections, oldest first -> True while answering a whole request
        self._conns: dict[asyncio.StreamWriter, bool] = {}
        #: connections closed to make room for a new one (``_make_room``)
        self.evicted = 0
        self._thread = LoopThread("prefilltui-otlp")

    @property
    def endpoint(self) -> str:
        """The URL an engine posts to (``--otlp-traces-endpoint``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{TRACES_PATH}"

    def start(self) -> "OtlpReceiver":
        self._thread.start(self._listen, ready_s=10)
        return self

    def stop(self) -> None:
        self._thread.stop(5)
        self._sock.close()  # _listen closed it if it ran; never started: closed here

    async def _listen(self) -> None:
        """Serve until ``stop()`` cancels it (the thread's ``LoopThread`` main)."""
        server = None
        try:
            self._sock.setblocking(False)
            server = await asyncio.start_server(self._serve, sock=self._sock,
                                                limit=MAX_HEAD_BYTES)
            self._thread.ready()
            await asyncio.get_running_loop().create_future()  # until cancelled
        finally:
            if server is not None:
                server.close()
            self._sock.close()

    def _make_room(self) -> bool:
        """Below ``MAX_CONNECTIONS``, or after closing the oldest connection that has
        not sent a whole request (a half-sent or idle one: a flood of those must not
        lock the engine out, as in the exporter's server).  False: every slot is
        answering a whole request."""
        if len(self._conns) < MAX_CONNECTIONS:
            return True
        for w, busy in self._conns.items():
            if not busy:
                del self._conns[w]
                w.transport.abort()
                self.evicted += 1
                return True
        return False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._make_room():
            writer.transport.abort()
            return
        self._conns[writer] = False
        self._open = len(self._conns)
        h = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            while True:
                try:
                    async with asyncio.timeout(REQUEST_DEADLINE_S):
                        got = await self._read(reader, h)
                except TimeoutError:
                    return
                if got is None or writer not in self._conns:  # closed to make room
                    return
                self._conns[writer] = True  # a whole request: never closed for room
                req, body, early = got
                ans = early or self._answer(req, body)
                self.counts[ans.status] = self.counts.get(ans.status, 0) + 1
                await self._send(writer, h, ans, close=early is not None)
                if early is not None or h.our_state is not h11.DONE \
                        or h.their_state is not h11.DONE or writer not in self._conns:
                    return
                h.start_next_cycle()
                # waiting for its next request: the oldest such may go to make room
                self._conns.pop(writer, None)
                self._conns[writer] = False
        except h11.RemoteProtocolError as e:
            if h.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                ans = codec.failure(e.error_status_hint, f"bad HTTP request: {e}"[:200])
                try:
                    await asyncio.wait_for(self._send(writer, h, ans, close=True), 1.0)
                except Exception:  # noqa: BLE001 - closing anyway
                    pass
        except (ConnectionError, TimeoutError, h11.LocalProtocolError, asyncio.CancelledError):
            pass
        finally:
            self._conns.pop(writer, None)
            self._open = len(self._conns)
            if not writer.is_closing():
                writer.transport.abort()

    async def _read(self, reader: asyncio.StreamReader, h: h11.Connection):
        """(request, body, early answer) of the next request, or None when the client
        closed.  ``early``: an answer given without reading the whole body (413)."""
        req, body = None, bytearray()
        while True:
            ev = h.next_event()
            if ev is h11.NEED_DATA:
                data = await reader.read(64 * 1024)
                h.receive_data(data)
                continue
            if isinstance(ev, h11.ConnectionClosed):
                return None
            if isinstance(ev, h11.Request):
                req = ev
                length = dict(ev.headers).get(b"content-length")
                if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
                    return req, b"", codec.failure(
                        413, f"body of {int(length):,} bytes is over {self.max_body_bytes:,}",
                        codec.answer_encoding(_header(req, b"content-type")))
                continue
            if isinstance(ev, h11.Data):
                body += ev.data
                if len(body) > self.max_body_bytes:
                    return req, b"", codec.failure(
                        413, f"body is over {self.max_body_bytes:,} bytes",
                        codec.answer_encoding(_header(req, b"content-type")))
                continue
            if isinstance(ev, h11.EndOfMessage):
                return req, bytes(body), None

    def _answer(self, req: h11.Request, body: bytes) -> codec.Answer:
        ctype = _header(req, b"content-type")
        enc = codec.answer_encoding(ctype)
        path = req.target.decode("latin-1").split("?", 1)[0]
        if path != TRACES_PATH:
            return codec.failure(404, f"not found: prefilltui receives traces at {TRACES_PATH}",
                                 enc)
        if req.method != b"POST":
            return codec.failure(405, "only POST", enc)
        try:
            msg = codec.decode_request(body, ctype, _header(req, b"content-encoding"),
                                       self.max_body_bytes)
        except codec.OtlpError as e:
            return codec.failure(e.status, str(e), enc)
        try:
            batch = read_batch(msg, received_s=time.time())
            self.spans += len(batch.found)
            self.router.deliver(batch)
        except Exception as e:  # noqa: BLE001 - a bug here answers 500, never stops the receiver
            log.exception("OTLP batch failed")
            return codec.failure(500, f"internal error: {type(e).__name__}", enc)
        if batch.rejected:
            return codec.success(batch.rejected, batch.reason[:200], enc)
        return codec.success(enc=enc)

    async def _send(self, writer: asyncio.StreamWriter, h: h11.Connection, ans: codec.Answer,
                    *, close: bool = False) -> None:
        headers = [("Content-Type", ans.content_type), ("Content-Length", str(len(ans.body)))]
        if close:
            headers.append(("Connection", "close"))
        data = h.send(h11.Response(status_code=ans.status, headers=headers))
        data += h.send(h11.Data(data=ans.body)) if ans.body else b""
        data += h.send(h11.EndOfMessage())
        writer.write(data)
        await writer.drain()


def _header(req: h11.Request, name: bytes) -> str | None:
    for k, v in req.headers:
        if k == name:
            return v.decode("latin-1")
    return None
