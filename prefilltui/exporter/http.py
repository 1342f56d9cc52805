"""The exporter's HTTP side: ``/metrics``, ``/probe?target=NAME``, ``/-/healthy``,
``/-/ready``, ``/``.

``/metrics``   every target, the build info and the process metrics.
``/probe``     one configured target's series only (blackbox-exporter style, so a
               Prometheus job can list targets and relabel ``__param_target``); the
               probing itself stays continuous and paced: a scrape never fires a
               request at the target.  Unknown target: 404; missing: 400.
``/-/healthy`` 200 "OK" while the process serves.
``/-/ready``   200 once every target has started, 503 (how many wait) before.

Served by ``measure.httpserver.HttpServer`` (its docstring says how it is bounded)
with ``LISTEN_BACKLOG``, ``MAX_CONNECTIONS``, ``REQUEST_DEADLINE_S`` and no request
body.  The pages are rendered by a pool of ``WORKERS`` threads, at most ``MAX_QUEUED``
renderings waiting (beyond: 503); a rendering is shared by the scrapes that ask for it
while it runs and reused for ``RENDER_TTL_S`` (the data change once per probe
interval), so N scrapers cost one rendering, not N.
"""

from __future__ import annotations

import asyncio
import gzip
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable
from urllib.parse import parse_qs, quote

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import choose_encoder, gzip_accepted

from prefilltui.exporter.collector import HealthCollector
from prefilltui.measure.httpserver import Answer, HttpServer, Request

#: Connections the kernel queues before the exporter accepts them (the old server's 5
#: lost scrapes under 200 concurrent scrapers).
LISTEN_BACKLOG = 1024
#: Open HTTP connections at most; each holds one file descriptor.
MAX_CONNECTIONS = 256
#: Seconds from accept (or the previous answer) to a whole request head.
REQUEST_DEADLINE_S = 10.0
#: Threads rendering pages, and renderings that may wait for one.
WORKERS = 4
MAX_QUEUED = 64
#: Seconds a rendering of a page is reused (the snapshots change once per probe).
RENDER_TTL_S = 1.0


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


class MetricsServer(HttpServer):
    """Serves ``Pages(sources)`` on ``host:port`` in a daemon thread (see the module
    docstring for what bounds it).  ``sources``: the probers, or a ``Fleet``;
    ``max_connections`` (``fleet.check_capacity`` gives what the file limit leaves once
    the targets have theirs) may be changed while serving.

    Raises (constructor):
        OSError: the address is in use or cannot be bound.
    """

    def __init__(self, host: str, port: int, sources: Iterable, *,
                 max_connections: int = MAX_CONNECTIONS, extra: Iterable = ()) -> None:
        super().__init__(host, port, name="prefilltui-http", max_connections=max_connections,
                         backlog=LISTEN_BACKLOG, request_deadline_s=REQUEST_DEADLINE_S)
        self.pages = Pages(sources, extra)
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="prefilltui-render")
        self._cache: dict[tuple, tuple[float, Answer]] = {}
        self._inflight: dict[tuple, asyncio.Future] = {}
        self._queued = 0

    def stop(self) -> None:
        super().stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def handle(self, req: Request) -> Answer:
        if req.method not in ("GET", "HEAD"):
            return _text(405, "only GET and HEAD\n")
        path, hdrs = req.path, req.headers
        if path in ("/metrics", "/probe"):
            prober = None
            if path == "/probe":
                name = (parse_qs(req.query).get("target") or [""])[0]
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
