"""One bounded HTTP/1.1 server, the core of the exporter's pages and the OTLP receiver:
a subclass gives ``handle`` (a whole request in, an answer out) and, for errors in a
format of its own, ``error_answer``.  It stays up whatever its clients do (one asyncio
loop in a daemon thread, HTTP/1.1 parsed by h11):

* at most ``max_connections`` open (one file descriptor each), however many wait in
  the listen backlog: when full and one waits, the connection idle longest (half-sent,
  or kept alive between requests) is closed to make room (``evicted``), so a flood of
  those never keeps a whole request out; a new one waits only while every slot
  answers a request; out of file descriptors, one is closed and the accept retried;
* ``request_deadline_s`` from the accept (or the previous answer) to the whole request,
  head and body: a request sent byte by byte is cut off there (``timed_out``), holding
  no thread;
* the head at most ``MAX_HEAD_BYTES`` (431), the body at most ``max_body_bytes`` (413:
  a longer declared length refused unread, a chunked body cut at the cap; then closed);
* an answer taken within ``WRITE_DEADLINE_S``; keep-alive between requests;
* ``stop()`` is graceful: no new connection, the idle ones closed, the requests being
  answered given ``STOP_GRACE_S``.

``counts`` (answers by status), ``evicted``, ``timed_out`` and ``open_connections`` are
what the tests and the benchmarks read.

Why not a library: aiohttp 3.14, uvicorn 0.55 and Hypercorn 0.18 (their settings and
source; on loopback, 60 half-sent connections then one GET, and a 40 KB head) each miss
a bound the tests hold:

connection cap, evicting the oldest idle or half-sent connection
  aiohttp: no cap (``TCPSite(backlog=)`` only): all 60 held
  uvicorn: ``limit_concurrency=8`` answered the GET 503 and held all 60 half-sent
  Hypercorn: no cap (``backlog`` only): all 60 held
head deadline from the accept, a trickle not extending it
  aiohttp: holds (``keepalive_timeout``, armed at the accept)
  uvicorn: misses (``timeout_keep_alive`` starts after an answer: a first head trickles)
  Hypercorn: holds (``keep_alive_timeout``, idle until a whole head)
body deadline (a chunked body that never ends)
  aiohttp: no setting (a handler would time its own ``request.read()``)
  uvicorn: no setting (an app would time its own ``receive()``)
  Hypercorn: ``read_timeout`` is per read: a trickle extends it
body cap, a longer declared length refused unread
  aiohttp: holds (``client_max_size``, 413)
  uvicorn: no setting (``h11_max_incomplete_event_size`` bounds the head only)
  Hypercorn: none for ASGI (``wsgi_max_body_size`` is for WSGI apps)
431 for a head over 16 KiB
  aiohttp: 400 (``max_field_size``; every parser error is 400)
  uvicorn: 400 (every h11 error is 400)
  Hypercorn: 200 (``h11_max_incomplete_size``: h11 counts only what it holds unparsed,
  and a 64 KiB read brings the whole head)
evictions and cut-off requests counted: none of the three
(keep-alive, graceful stop, a listen backlog, a loop in a thread of its own: all three)
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from dataclasses import dataclass
from typing import Self

import h11

from prefilltui.measure.loop_thread import LoopThread

log = logging.getLogger(__name__)

#: Largest request head (request line + headers), bytes: h11's own default.
MAX_HEAD_BYTES = 16 * 1024
#: Seconds a client may take to read an answer.
WRITE_DEADLINE_S = 30.0
#: Seconds an error answer (400, 413, 431) is given before the connection is closed.
ERROR_WRITE_S = 1.0
#: Seconds ``stop()`` gives the requests being answered (it returns within 5 s).
STOP_GRACE_S = 2.0
#: Bytes asked of the socket per read of a body.
READ_BYTES = 64 * 1024

#: An answer: status, headers (Content-Length is added), body.
Answer = tuple[int, list[tuple[str, str]], bytes]


def parse_listen(value: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; ``:PORT`` = ``default_host``) as (host,
    port).

    Raises:
        ValueError: not HOST:PORT, a port outside 0..65535.
    """
    v = value.strip()
    host, sep, port = v.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{value!r} is not HOST:PORT")
    host = host.strip("[]") or default_host
    p = int(port)
    if not 0 <= p <= 65535:
        raise ValueError(f"port {p} is outside 0..65535")
    return host, p


@dataclass(slots=True)
class Request:
    """One whole request: ``method`` ("GET"), ``target`` (path and query), ``headers``
    (lower-case names; the last of repeated ones), ``body``."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes = b""

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @property
    def query(self) -> str:
        return self.target.partition("?")[2]


@dataclass(eq=False, slots=True)
class _Conn:
    sock: socket.socket
    writer: asyncio.StreamWriter | None = None
    busy: bool = False  # a whole request came: being answered, never closed for room
    task: asyncio.Task | None = None
    req: Request | None = None  # the one being read or answered

    def close(self) -> None:
        if self.writer is not None:
            self.writer.transport.abort()
        else:
            self.sock.close()


class HttpServer:
    """Serves ``handle`` on ``host:port`` in a daemon thread named ``name`` (module
    docstring for the bounds).  ``max_connections`` may be changed while serving.

    Raises (constructor):
        OSError: the address is in use or cannot be bound.
    """

    def __init__(self, host: str, port: int, *, name: str, max_connections: int,
                 backlog: int, request_deadline_s: float, max_body_bytes: int = 0) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, port), family=family, backlog=backlog)
        self.host, self.port = self._sock.getsockname()[:2]
        self.max_connections = max_connections
        self.request_deadline_s = request_deadline_s
        self.max_body_bytes = max_body_bytes
        self._conns: dict[_Conn, None] = {}  # oldest idle (or half-sent) first
        self._stopping = False
        self._thread = LoopThread(name)
        self.evicted = 0
        self.timed_out = 0
        self.counts: dict[int, int] = {}

    async def handle(self, req: Request) -> Answer:
        """The answer to ``req`` (a subclass's; an exception answers 500)."""
        return self.error_answer(404, "not found", req)

    def error_answer(self, status: int, message: str, req: Request | None) -> Answer:
        """The answer for an error the core (or ``handle``) found: ``message`` as text;
        ``req`` is None when no request head could be read."""
        return status, [("Content-Type", "text/plain; charset=utf-8")], f"{message}\n".encode()

    def start(self) -> Self:
        """Listen (returns self once accepting)."""
        self._thread.start(self._listen, ready_s=10)
        return self

    def stop(self) -> None:
        """Stop gracefully (module docstring); returns once stopped."""
        self._thread.stop(STOP_GRACE_S + 3)
        self._sock.close()  # _listen closed it if it ran; never started: closed here

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    async def _listen(self) -> None:
        """Accept until ``stop()`` cancels it (the thread's ``LoopThread`` main), then
        let the requests being answered finish."""
        loop = asyncio.get_running_loop()
        try:
            self._sock.setblocking(False)
            loop.add_reader(self._sock.fileno(), self._accept, loop)
            self._thread.ready()
            await loop.create_future()  # forever, until cancelled
        finally:
            self._stopping = True
            loop.remove_reader(self._sock.fileno())
            self._sock.close()
            for c in [c for c in self._conns if not c.busy]:
                c.close()
            busy = [c.task for c in self._conns if c.task is not None]
            if busy:
                await asyncio.wait(busy, timeout=STOP_GRACE_S)
            for c in list(self._conns):
                c.close()

    def _accept(self, loop: asyncio.AbstractEventLoop) -> None:
        """A connection waits in the listen backlog: accept it, first making room when
        full (so room is made only for one that waits); called again while more wait."""
        if self._make_room(force=False):
            try:
                sock, _ = self._sock.accept()
            except BlockingIOError:  # gone meanwhile
                return
            except OSError as e:
                if e.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    return
                self._make_room(force=True)  # out of files: free one, then retry
            else:
                conn = _Conn(sock)
                self._conns[conn] = None
                conn.task = loop.create_task(self._serve(conn))
                return
        # every slot answers a whole request, or out of files: look again shortly
        fd = self._sock.fileno()
        loop.remove_reader(fd)
        loop.call_later(0.01, lambda: self._stopping or loop.add_reader(fd, self._accept, loop))

    def _make_room(self, *, force: bool) -> bool:
        """Below ``max_connections`` (or ``force``): close the oldest connection not
        answering a request when there is no room.  False: none can be closed."""
        if len(self._conns) < self.max_connections and not force:
            return True
        for c in self._conns:
            if not c.busy:
                c.close()
                del self._conns[c]
                self.evicted += 1
                return True
        return False

    async def _serve(self, conn: _Conn) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=conn.sock, limit=READ_BYTES)
        except OSError:  # closed to make room before it started
            self._conns.pop(conn, None)
            return
        if conn not in self._conns:  # closed to make room meanwhile
            writer.transport.abort()
            return
        conn.writer = writer
        h = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            while not self._stopping:
                try:
                    async with asyncio.timeout(self.request_deadline_s):
                        req = await self._read(reader, h, conn)
                except TimeoutError:
                    self.timed_out += 1
                    return
                if req is None or conn not in self._conns:  # closed, or to make room
                    return
                conn.busy = True
                try:
                    ans = await self.handle(req)
                except Exception as e:  # noqa: BLE001 - a handler's bug answers 500, never more
                    log.exception("%s: answering %s %s failed", self._thread.name,
                                  req.method, req.path)
                    ans = self.error_answer(500, f"internal error: {type(e).__name__}", req)
                await self._send(writer, h, ans, head=req.method == "HEAD")
                if h.our_state is not h11.DONE or h.their_state is not h11.DONE:
                    return
                h.start_next_cycle()
                conn.busy = False  # waiting for its next request: it may go for room
                self._conns.pop(conn, None)
                self._conns[conn] = None
        except h11.RemoteProtocolError as e:  # not HTTP/1.1, or over a cap
            if h.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                why = str(e) if e.error_status_hint == 413 else f"bad HTTP request: {e}"
                ans = self.error_answer(e.error_status_hint, why[:200], conn.req)
                try:
                    async with asyncio.timeout(ERROR_WRITE_S):
                        await self._send(writer, h, ans, close=True)
                except Exception:  # noqa: BLE001 - closing anyway
                    pass
        except (ConnectionError, TimeoutError, h11.LocalProtocolError, asyncio.CancelledError):
            pass
        finally:
            self._conns.pop(conn, None)
            if not writer.is_closing():
                writer.transport.abort()

    async def _read(self, reader: asyncio.StreamReader, h: h11.Connection, conn: _Conn
                    ) -> Request | None:
        """The next whole request, or None when the client closed the connection.

        Raises:
            h11.RemoteProtocolError: not HTTP/1.1, a head over ``MAX_HEAD_BYTES``, a
                body over ``max_body_bytes`` (413).
        """
        conn.req, body, cap = None, bytearray(), self.max_body_bytes
        too_long = "a request body is not accepted" if not cap else f"body is over {cap:,} bytes"
        while True:
            ev = h.next_event()
            if ev is h11.NEED_DATA:
                # a head is read in MAX_HEAD_BYTES steps: h11 measures only what it
                # holds unparsed, so one large read would let a longer head through
                h.receive_data(await reader.read(READ_BYTES if conn.req else MAX_HEAD_BYTES))
            elif isinstance(ev, h11.ConnectionClosed):
                return None
            elif isinstance(ev, h11.Request):
                conn.req = Request(ev.method.decode("latin-1"), ev.target.decode("latin-1"),
                                   {k.decode("latin-1"): v.decode("latin-1")
                                    for k, v in ev.headers})
                length = conn.req.headers.get("content-length", "")
                if length.isdigit() and int(length) > cap:  # refused unread
                    raise h11.RemoteProtocolError(f"{too_long} ({int(length):,} declared)", 413)
            elif isinstance(ev, h11.Data):
                body += ev.data
                if len(body) > cap:
                    raise h11.RemoteProtocolError(too_long, 413)
            elif isinstance(ev, h11.EndOfMessage):
                conn.req.body = bytes(body)
                return conn.req

    async def _send(self, writer: asyncio.StreamWriter, h: h11.Connection, ans: Answer, *,
                    close: bool = False, head: bool = False) -> None:
        """Send ``ans`` (no body to a HEAD), within ``WRITE_DEADLINE_S``."""
        status, headers, body = ans
        headers = [*headers, ("Content-Length", str(len(body)))]
        if close or self._stopping:
            headers.append(("Connection", "close"))
        data = h.send(h11.Response(status_code=status, headers=headers))
        data += h.send(h11.Data(data=body)) if body and not head else b""
        data += h.send(h11.EndOfMessage())
        self.counts[status] = self.counts.get(status, 0) + 1
        writer.write(data)
        if writer.transport.get_write_buffer_size():  # not all taken at once
            async with asyncio.timeout(WRITE_DEADLINE_S):
                await writer.drain()
