"""Watch what the server says about itself, to see it restart or change: ``ServerWatch``.

Every ``/metrics`` scrape the metrics hook makes around a probe is also read for the
server's identity (``model.metrics.metrics_reading``: its process start time, vLLM's
``vllm:cache_config_info`` labels, its cumulative counters), at no extra request; the
metadata endpoints (``server_facts.STATED_PATHS``: ``/version``, ``/v1/models``,
``/props``, ``/server_info``, ``/info``) are read after a probe at most every
``STATED_EVERY_S``, and at once while a new state is pending on ``/metrics`` (they
confirm a restart and name its config; at most every ``STATED_MIN_GAP_S``).  Both go to
one ``model.server_change.ServerChangeTracker``; each change it confirms is kept (the
last ``RECENT_S``: ``recent()``) and handed to ``on_change`` (the run file's
``server_change`` record, the exporter's log, the TUI's probe log).

It is a probe hook (``before_probe`` notes the probe client: its pool, auth and TLS are
the ones the endpoints are read through; ``after_probe`` reads them when due) and the
metrics hook's ``on_sample``.  Thread-safe: the scrapes come from the runner's thread,
``recent()`` is read from any.  Never raises into the sweep.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Callable

import httpx

from prefilltui.measure import bounded
from prefilltui.measure.server_facts import STATED_DEFAULT, STATED_PATHS, stated_facts
from prefilltui.model.metrics import Exposition, MetricsSample, metrics_reading
from prefilltui.model.server_change import (RECENT_S, ServerChange, ServerChangeTracker,
                                            ServerReading)
from prefilltui.model.types import ProbeResult

log = logging.getLogger(__name__)

#: Seconds between two reads of the metadata endpoints while nothing is pending: a
#: switch they alone show (another version behind a gateway) is seen within one of
#: these (the read that differs, then the confirming one ``STATED_MIN_GAP_S`` later).
STATED_EVERY_S = 30.0
#: The least gap between two reads of them while a change is pending (s).
STATED_MIN_GAP_S = 1.0
#: One endpoint's deadline (s): a loaded server answers these in milliseconds.
STATED_DEADLINE_S = 5.0


async def read_stated(http: httpx.AsyncClient, root: str, kind: str, *,
                      models_url: str | None = None, at_s: float | None = None,
                      timeout: float = STATED_DEADLINE_S) -> ServerReading | None:
    """GET the ``kind``'s ``STATED_PATHS`` under ``root`` at once (each at most
    ``bounded.MAX_META_BYTES``, ``timeout`` s; the model list at ``models_url`` when
    given: the probe client's, an Azure deployment's ``/openai/models``) and make the
    "stated" ``ServerReading`` of what answered 200 with JSON
    (``server_facts.stated_facts``); None when none did.  Never raises for the network
    or the server."""
    paths = STATED_PATHS.get(kind, STATED_DEFAULT)

    async def get(path: str) -> Any:
        url = models_url if path == "/v1/models" and models_url else root + path
        try:
            r = await bounded.fetch(http, "GET", url, max_bytes=bounded.MAX_META_BYTES,
                                    deadline_s=timeout)
        except (httpx.HTTPError, TimeoutError):
            return None
        return r.json()  # None unless a whole 200 answer of JSON

    answers = dict(zip(paths, await asyncio.gather(*(get(p) for p in paths))))
    if not any(isinstance(j, dict) for j in answers.values()):
        return None
    return ServerReading.make(time.time() if at_s is None else at_s, "stated",
                              facts=stated_facts(kind, answers))


class ServerWatch:
    """One target's server, watched for restarts and changes (module docstring).

    ``recent(now_s)``: the changes of the last ``RECENT_S`` (oldest first);
    ``start_time_s``: the server's confirmed process start time (unix s), None where it
    publishes none; ``counts``: changes by kind so far; ``on_change``: callbacks given
    each change as it is confirmed (in the runner's thread; a failing one is logged).
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.tracker = ServerChangeTracker()
        self.on_change: list[Callable[[ServerChange], None]] = []
        self._http: httpx.AsyncClient | None = None
        self._root: str | None = None
        self._kind: str | None = None
        self._models_url: str | None = None
        self._stated_at = -float("inf")  # monotonic: the last read of the endpoints

    # -- what callers read (any thread)
    def recent(self, now_s: float | None = None, within_s: float = RECENT_S
               ) -> tuple[ServerChange, ...]:
        now = self._clock() if now_s is None else now_s
        with self._lock:
            return self.tracker.recent(now, within_s)

    @property
    def start_time_s(self) -> float | None:
        with self._lock:
            return self.tracker.start_time_s

    @property
    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self.tracker.counts)

    # -- reads in
    def feed(self, reading: ServerReading | None) -> tuple[ServerChange, ...]:
        """Give the tracker one reading; the changes it confirmed go to ``on_change``."""
        with self._lock:
            new = self.tracker.feed(reading)
        self._tell(new)
        return new

    def _tell(self, changes: tuple[ServerChange, ...]) -> None:
        for change in changes:
            log.info("server change: %s", change)
            for call in list(self.on_change):
                try:
                    call(change)
                except Exception:  # noqa: BLE001 - a consumer's bug never costs the probing
                    log.exception("server change callback failed")

    def feed_sample(self, exp: Exposition, sample: MetricsSample) -> None:
        """One ``/metrics`` scrape (``MetricsReader.on_sample``)."""
        self.feed(metrics_reading(exp, sample, self._clock()))

    # -- the probe hook
    async def before_probe(self, client: Any = None) -> None:
        info = getattr(client, "info", None)
        http, root = getattr(client, "http", None), getattr(client, "root", None)
        if info is not None and isinstance(http, httpx.AsyncClient) and isinstance(root, str):
            self._http, self._root, self._kind = http, root, info.kind
            # where the client itself lists models (a deployment's own shape)
            models = getattr(getattr(client, "urls", None), "models_url", None)
            self._models_url = models if isinstance(models, str) and models else None

    async def after_probe(self, result: ProbeResult) -> None:
        if self._http is None or self._root is None or self._http.is_closed:
            return
        now = time.monotonic()
        with self._lock:
            pending = self.tracker.wants_stated
            new = self.tracker.tick(self._clock())
        self._tell(new)  # a held restart whose stated facts never came
        gap = now - self._stated_at
        if gap < STATED_MIN_GAP_S or (gap < STATED_EVERY_S and not pending):
            return
        self._stated_at = now
        try:
            reading = await read_stated(self._http, self._root, self._kind or "openai",
                                        models_url=self._models_url, at_s=self._clock())
        except Exception:  # noqa: BLE001 - never into the sweep
            log.exception("reading the server's stated facts failed")
            return
        self.feed(reading)
