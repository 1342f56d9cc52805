"""The exporter's HTTP side: ``/metrics``, ``/probe?target=NAME``, ``/-/healthy``,
``/-/ready``, ``/``.

``/metrics``   every target, the build info and the process metrics.
``/probe``     one configured target's series only (blackbox-exporter style, so a
               Prometheus job can list targets and relabel ``__param_target``); the
               probing itself stays continuous and paced: a scrape never fires a
               request at the target.  Unknown target: 404; missing: 400.
``/-/healthy`` 200 "OK" while the process serves.
``/-/ready``   200 once every target has started, 503 (how many wait) before.

The server is built to stay up whatever its clients do (one asyncio loop in its own
thread, HTTP/1.1 parsed by h11):

* a listen backlog of ``LISTEN_BACKLOG`` (the kernel caps it at ``somaxconn``);
* at most ``MAX_CONNECTIONS`` open connections: when full, the oldest one that has not
  sent a whole request is closed to make room (a half-sent request never keeps a
  scraper out);
* one deadline per request, ``REQUEST_DEADLINE_S`` from accept (or from the end of the
  previous answer) to a whole request head, ``MAX_HEAD_BYTES`` at most: a request
  sent byte by byte is cut off there, holding no thread at any time;
* the pages are rendered by a pool of ``WORKERS`` threads, at most ``MAX_QUEUED``
  renderings waiting (beyond: 503); a rendering is shared by the scrapes that ask
  for it while it runs and reused for ``RENDER_TTL_S`` (the data change once per
  probe interval), so N scrapers cost one rendering, not N;
* an answer must be taken within ``WRITE_DEADLINE_S``.
"""

from __future__ import annotations

import asyncio
import errno
import gzip
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable
from urllib.parse import parse_qs, quote

import h11
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import choose_encoder, gzip_accepted

from prefilltui.exporter.collector import HealthCollector
from prefilltui.measure.loop_thread import LoopThread

#: Connections the kernel queues before the exporter accepts them (the old server's 5
#: lost scrapes under 200 concurrent scrapers).
LISTEN_BACKLOG = 1024
#: Open HTTP connections at most; each holds one file descriptor.
MAX_CONNECTIONS = 256
#: Seconds from accept (or the previous answer) to a whole request head.
REQUEST_DEADLINE_S = 10.0
#: Seconds a client may take to read an answer.
WRITE_DEADLINE_S = 30.0
#: Largest request head (request line + headers), bytes; a body is not read at all.
MAX_HEAD_BYTES = 16 * 1024
#: Threads rendering pages, and renderings that may wait for one.
WORKERS = 4
MAX_QUEUED = 64
#: Seconds a rendering of a page is reused (the snapshots change once per probe).
RENDER_TTL_S = 1.0

Answer = tuple[int, list[tuple[str, str]], bytes]


def _registry(sources, *, process: bool, extra: Iterable = ()) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(HealthCollector(sources, with_build_info=process))
    for collector in extra:  # the exporter's own series (service discovery, shard)
        reg.register(collector)
    if process:
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)
    return reg


def _text(status: int, body: str, ctype: str = "text/plain; charset=utf-8") -> Answer:
    return status, [("Content-Type", ctype)], body.encode()


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


class Pages:
    """What each path answers (synchronous; run in a worker thread).  ``sources``: the
    probers (a list, or a ``Fleet`` read at every request), objects with ``cfg``
    (``label``, ``shown_url``, ``url``) and ``snapshot``; ``extra``: more collectors
    on ``/metrics`` (not on ``/probe``)."""

    def __init__(self, sources: Iterable, extra: Iterable = ()) -> None:
        self.sources = sources
        self._all = _registry(sources, process=True, extra=extra)

    def find(self, name: str):
        """The prober a ``/probe?target=`` value names (``TargetConfig.lookup_names``)."""
        name = name.rstrip("/")
        for p in list(self.sources):
            if name in {k.rstrip("/") for k in p.cfg.lookup_names}:
                return p
        return None

    def metrics(self, prober, accept: str, gzip_ok: bool) -> Answer:
        reg = self._all if prober is None else _registry([prober], process=False)
        encoder, ctype = choose_encoder(accept)
        body = encoder(reg)
        headers = [("Content-Type", ctype)]
        if gzip_ok:
            body = gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        return 200, headers, body

    def index(self) -> Answer:
        rows = "".join(f'<li><a href="/probe?target={quote(p.cfg.label, safe="")}">'
                       f"{_esc(p.cfg.label)}</a> {_esc(p.snapshot.state)}</li>"
                       for p in list(self.sources))
        return _text(200, "<html><head><title>prefilltui exporter</title></head><body>"
                     "<h1>prefilltui exporter</h1><p><a href=\"/metrics\">/metrics</a></p>"
                     f"<ul>{rows}</ul></body></html>\n", "text/html; charset=utf-8")

    def ready(self) -> Answer:
        probers = list(self.sources)
        waiting = sum(1 for p in probers if p.snapshot.state == "queued")
        if waiting:
            return _text(503, f"starting: {waiting} of {len(probers)} targets not started\n")
        return _text(200, "OK\n")


class _Conn:
    __slots__ = ("sock", "writer", "busy")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.writer: asyncio.StreamWriter | None = None
        self.busy = False  # a whole request came: being answered

    def close(self) -> None:
        if self.writer is not None:
            self.writer.transport.abort()
        else:
            self.sock.close()


class MetricsServer:
    """Serves ``Pages(sources)`` on ``host:port`` in a daemon thread (see the module
    docstring for what bounds it).  ``sources``: the probers, or a ``Fleet``.

    Raises (constructor):
        OSError: the address is in use or cannot be bound.
    """

    def __init__(self, host: str, port: int, sources: Iterable, *,
                 max_connections: int = MAX_CONNECTIONS, extra: Iterable = ()) -> None:
        #: open connections at most (``fleet.check_capacity`` gives what the file
        #: limit leaves once the targets have theirs); may be changed while serving
        self.max_connections = max_connections
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, port), family=family, backlog=LISTEN_BACKLOG)
        self.host, self.port = self._sock.getsockname()[:2]
        self.pages = Pages(sources, extra)
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="prefilltui-render")
        self._conns: dict[_Conn, None] = {}  # insertion order: oldest first
        self._cache: dict[tuple, tuple[float, Answer]] = {}
        self._inflight: dict[tuple, asyncio.Future] = {}
        self._queued = 0
        self._thread = LoopThread("prefilltui-http")
        #: counters for tests and the benchmark: connections closed to make room, and
        #: requests cut off at their deadline
        self.evicted = 0
        self.timed_out = 0

    def start(self) -> "MetricsServer":
        self._thread.start(self._listen, ready_s=10)
        return self

    def stop(self) -> None:
        self._thread.stop(5)
        self._sock.close()  # _listen closed it if it ran; never started: closed here
        self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    # -- the loop
    async def _listen(self) -> None:
        """Accept until ``stop()`` cancels it (the thread's ``LoopThread`` main)."""
        try:
            self._sock.setblocking(False)
            accepting = asyncio.get_running_loop().create_task(self._accept())
            self._thread.ready()
            await accepting  # forever, until cancelled
        finally:
            self._sock.close()
            for c in list(self._conns):
                c.close()

    async def _accept(self) -> None:
        """Accept one connection at a time, making room first: the open connections
        (and so the file descriptors) never exceed ``max_connections``, however many
        wait in the backlog."""
        loop = asyncio.get_running_loop()
        while True:
            if not self._make_room(force=False):
                await asyncio.sleep(0.01)  # every slot answers a whole request
                continue
            try:
                sock, _ = await loop.sock_accept(self._sock)
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._make_room(force=True)  # out of files: free one, then retry
                    await asyncio.sleep(0.05)
                continue
            conn = _Conn(sock)
            self._conns[conn] = None
            loop.create_task(self._serve(conn))

    def _make_room(self, *, force: bool) -> bool:
        """Below ``max_connections`` (or ``force``): close the oldest connection that has
        not sent a whole request when there is no room.  False: none can be closed."""
        if len(self._conns) < self.max_connections and not force:
            return True
        for c in self._conns:
            if not c.busy:
                c.close()
                self._conns.pop(c, None)
                self.evicted += 1
                return True
        return False

    async def _serve(self, conn: _Conn) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=conn.sock, limit=MAX_HEAD_BYTES)
        except OSError:  # closed to make room before it started
            self._conns.pop(conn, None)
            return
        if conn not in self._conns:  # closed to make room meanwhile
            writer.transport.abort()
            return
        conn.writer = writer
        h = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            while True:
                conn.busy = False
                try:
                    async with asyncio.timeout(REQUEST_DEADLINE_S):
                        req = await self._read_request(reader, h)
                except TimeoutError:
                    self.timed_out += 1
                    return
                if req is None:
                    return
                conn.busy = True
                try:
                    status, headers, body = await self._answer(req)
                except Exception as e:  # noqa: BLE001 - a page's bug answers 500, never more
                    status, headers, body = _text(500, f"internal error: {type(e).__name__}\n")
                if req.method == b"HEAD":
                    body = b""
                async with asyncio.timeout(WRITE_DEADLINE_S):
                    await self._send(writer, h, status, headers, body)
                if h.our_state is not h11.DONE or h.their_state is not h11.DONE:
                    return
                h.start_next_cycle()
        except h11.RemoteProtocolError as e:
            if h.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                try:
                    await asyncio.wait_for(self._send(writer, h, e.error_status_hint, [],
                                                      b"bad request\n"), 1.0)
                except Exception:  # noqa: BLE001 - closing anyway
                    pass
        except (ConnectionError, TimeoutError, h11.LocalProtocolError, asyncio.CancelledError):
            pass
        finally:
            self._conns.pop(conn, None)
            if not writer.is_closing():
                writer.transport.abort()

    async def _read_request(self, reader: asyncio.StreamReader, h: h11.Connection
                            ) -> h11.Request | None:
        """The next whole request (its body, if any, is refused unread), or None when
        the client closed the connection."""
        req = None
        while True:
            ev = h.next_event()
            if ev is h11.NEED_DATA:
                data = await reader.read(MAX_HEAD_BYTES)
                h.receive_data(data)
                continue
            if isinstance(ev, h11.ConnectionClosed):
                return None
            if isinstance(ev, h11.Request):
                req = ev
                if any(k == b"content-length" and v != b"0" or k == b"transfer-encoding"
                       for k, v in ev.headers):
                    raise h11.RemoteProtocolError("a request body is not accepted", 413)
                continue
            if isinstance(ev, h11.EndOfMessage):
                return req

    async def _send(self, writer: asyncio.StreamWriter, h: h11.Connection, status: int,
                    headers: list[tuple[str, str]], body: bytes) -> None:
        headers = headers + [("Content-Length", str(len(body)))]
        data = h.send(h11.Response(status_code=status, headers=headers))
        data += h.send(h11.Data(data=body)) if body else b""
        data += h.send(h11.EndOfMessage())
        writer.write(data)
        await writer.drain()

    async def _answer(self, req: h11.Request) -> Answer:
        if req.method not in (b"GET", b"HEAD"):
            return _text(405, "only GET and HEAD\n")
        target = req.target.decode("latin-1")
        path, _, query = target.partition("?")
        hdrs = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in req.headers}
        if path in ("/metrics", "/probe"):
            prober = None
            if path == "/probe":
                name = (parse_qs(query).get("target") or [""])[0]
                if not name:
                    return _text(400, "missing ?target=NAME\n")
                prober = self.pages.find(name)
                if prober is None:
                    return _text(404, "unknown target (the exporter probes only the targets "
                                 "it was started with)\n")
            accept, gz = hdrs.get("accept", ""), gzip_accepted(hdrs.get("accept-encoding", ""))
            key = (path, prober.cfg.label if prober else "", choose_encoder(accept)[1], gz)
            return await self._work(key, lambda: self.pages.metrics(prober, accept, gz))
        if path == "/-/healthy":
            return _text(200, "OK\n")
        if path == "/-/ready":
            return self.pages.ready()
        if path == "/":
            return await self._work(("index",), self.pages.index, cache=False)
        return _text(404, "not found\n")

    async def _work(self, key: tuple, fn: Callable, *, cache: bool = True):
        """``fn()`` in the worker pool: shared with the requests asking for the same
        ``key`` while it runs, reused for RENDER_TTL_S when ``cache``; 503 when
        MAX_QUEUED renderings already wait."""
        now = time.monotonic()
        hit = self._cache.get(key) if cache else None
        if hit is not None and now - hit[0] < RENDER_TTL_S:
            return hit[1]
        fut = self._inflight.get(key)
        if fut is None:
            if self._queued >= MAX_QUEUED:
                return _text(503, "busy: too many pages being rendered; retry\n")
            self._queued += 1
            fut = self._inflight[key] = asyncio.get_running_loop().run_in_executor(self._pool, fn)
            fut.add_done_callback(lambda _f: self._done(key))
        value = await asyncio.shield(fut)
        if cache:
            if len(self._cache) > 4 * MAX_QUEUED:
                self._cache = {k: v for k, v in self._cache.items()
                               if now - v[0] < RENDER_TTL_S}
            self._cache[key] = (time.monotonic(), value)
        return value

    def _done(self, key: tuple) -> None:
        self._queued -= 1
        self._inflight.pop(key, None)
