"""The users' window from the server's ``/metrics`` (no traces needed): every scrape
the metrics hook makes is also read for the users' histograms and counters
(``model.metrics.users.parse_users``), at most once per ``MIN_GAP_S``, and kept for
``KEEP_S``; ``window(now)`` is the delta between the scrape at or before
``now - window_s`` and the newest (``users_from_metrics``: bucket estimates).

``UsersMetrics`` has the same face as ``measure.otlp.UsersTrace`` (``window``,
``before``, ``recent``, ``stats``), so a consumer reads either; a ``UsersTrace`` falls
back to it while no user span has arrived, and takes its prefix-cache hit rate from
it when the spans count no cached tokens (vLLM 0.32's).  It is also a probe hook: it
notes the probes sent, so their requests are taken off the users' count and their
prompt and cached tokens off the users' prefix-cache queries and hits; the background
load's (``--load``) requests are taken off the count the same way, counted by the load
itself (``load_requests``: ``LoadGenerator.requests_between``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

from prefilltui.model.fit import LinearFit
from prefilltui.model.metrics import Exposition, UsersCounters, parse_users, users_from_metrics
from prefilltui.model.types import ProbeResult
from prefilltui.model.users import TraceStats, UserRequest, UsersWindow

#: The users' window (s), as ``measure.otlp.users.WINDOW_S``.
WINDOW_S = 60.0
#: Scrapes kept (s) and the least time between two that are read (s): a scrape is
#: read for the users' series at most once a second, whatever the probe rate.
KEEP_S = 2 * WINDOW_S + 30.0
MIN_GAP_S = 1.0
MAX_SAMPLES = 1024


class UsersMetrics:
    """The users' window from /metrics deltas (module docstring); thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: deque[UsersCounters] = deque(maxlen=MAX_SAMPLES)
        #: (start, prompt tokens, cached tokens, the server's TTFT or the probe's) of
        #: each probe sent
        self._probes: deque[tuple[float, int, int, float | None]] = deque(maxlen=4096)
        self.fit: Callable[[], LinearFit | None] = lambda: None
        #: the background load's requests the server counted in (t0, t1] (unix s):
        #: ``LoadGenerator.requests_between``, set by the session that has a load
        self.load_requests: Callable[[float, float], int] = lambda t0, t1: 0

    #: ``UsersTrace.version``'s place: no span ever changes this window (it moves with
    #: the scrapes around probes, which redraw anyway)
    version = 0

    def feed(self, kind: str, text: "str | Exposition", group_size: int | None = None) -> None:
        """One scrape's text or its parsed ``Exposition`` (``MetricsReader.on_text``);
        ``group_size``: the ranks per attention data-parallel group the server stated
        (``model.metrics.ranks``)."""
        now = self._clock()
        with self._lock:
            if self._samples and now - self._samples[-1].t < MIN_GAP_S:
                return
        c = parse_users(text, kind, now, group_size=group_size)
        if c is None:
            return
        with self._lock:
            self._samples.append(c)
            while self._samples and self._samples[0].t < now - KEEP_S:
                self._samples.popleft()

    async def before_probe(self, client) -> None:
        return None

    async def after_probe(self, result: ProbeResult) -> None:
        n = result.prompt_tokens or result.requested_tokens or 0
        with self._lock:
            t = result.server_ttft_s if result.server_ttft_s is not None else result.ttft_s
            self._probes.append((result.started_at or self._clock(), int(n),
                                 int(result.cached_tokens or 0), t))

    def window(self, now_s: float | None = None, *, fit: LinearFit | None = None,
               window_s: float = WINDOW_S, running: float | None = None,
               waiting: float | None = None) -> UsersWindow:
        """The users' window ending at the newest scrape at or before ``now_s``; source
        "none" with fewer than two scrapes in it."""
        now = self._clock() if now_s is None else now_s
        with self._lock:
            got = [s for s in self._samples if s.t <= now]
            probes = list(self._probes)
        if len(got) < 2:
            return UsersWindow(running=running, waiting=waiting)
        after = got[-1]
        before = next((s for s in reversed(got) if s.t <= after.t - window_s), got[0])
        if before is after:
            return UsersWindow(running=running, waiting=waiting)
        mine = [p for p in probes if before.t < p[0] <= after.t]
        n = len(mine) + self.load_requests(before.t, after.t)
        return users_from_metrics(before, after, own=n,
                                  probe_tokens=sum(p[1] for p in mine),
                                  probe_cached=sum(p[2] for p in mine),
                                  probe_prompts=[p[1] for p in mine if p[1]],
                                  probe_ttfts=[p[3] for p in mine if p[3] is not None],
                                  fit=fit if fit is not None else self.fit(),
                                  running=running, waiting=waiting)

    def ttft_buckets(self, now_s: float | None = None, window_s: float = WINDOW_S
                     ) -> tuple[tuple[float, float], ...]:
        """The TTFT histogram's cumulative (le, count) deltas over the window ending at
        the newest scrape at or before ``now_s`` (the server counts every request:
        prefilltui's own probes and load are in it); () with fewer than two scrapes,
        no TTFT histogram or a counter reset."""
        now = self._clock() if now_s is None else now_s
        with self._lock:
            got = [s for s in self._samples if s.t <= now]
        if len(got) < 2:
            return ()
        after = got[-1]
        before = next((s for s in reversed(got) if s.t <= after.t - window_s), got[0])
        old = dict(before.buckets.get("ttft", ()))
        out = tuple((le, c - old.get(le, 0.0)) for le, c in after.buckets.get("ttft", ()))
        return out if out and all(c >= 0 for _, c in out) else ()

    def before(self, now_s: float | None = None, *, fit: LinearFit | None = None,
               window_s: float = WINDOW_S) -> UsersWindow | None:
        """The window before ``window(now_s)``; None when it has no users' requests."""
        now = self._clock() if now_s is None else now_s
        w = self.window(now - window_s, fit=fit, window_s=window_s)
        return w if w.requests else None

    def recent(self, since_s: float | None = None) -> tuple[UserRequest, ...]:
        """No single requests from /metrics (histograms only)."""
        return ()

    def stats(self) -> TraceStats | None:
        """No spans from /metrics."""
        return None
