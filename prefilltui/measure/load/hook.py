"""The sweep's ProbeHook for background load: tag each probe with the load it ran
under and measure what its prefill did to the decode streams (``model.load.stall``).

After a probe, the decode streams' gap over its window is still open until each
stream's next token: the hook waits for it and ``QUIET_TOKENS - 1`` more (quiet gaps
for the baseline; at most ``max_wait_s``), then fills ``decode_stall_s`` / ``decode_excess_s`` /
``decode_gap_s`` / ``decode_tokens`` / ``decode_streams`` and ``load_ahead_tokens``,
and, where the server publishes an inter-token-latency histogram (vLLM), the
server's own figure over the same window from the metrics hook's delta
(``server_itl_max_s`` / ``server_itl_mean_s``).  It never raises into the sweep.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from typing import Any

from prefilltui.measure.load.generator import LoadGenerator
from prefilltui.model.load import (
    ahead_tokens, apply_stall, baseline_gap, probe_window, waiting_for, window_stall,
)
from prefilltui.model.types import ProbeResult

log = logging.getLogger(__name__)

#: Longest wait after a probe for every decode stream's next token (s).
MAX_WAIT_S = 10.0
#: Probe windows remembered, so no later baseline counts a gap that a probe stretched.
WINDOWS_KEPT = 512
#: Tokens each decode stream must bring after a probe's first token before the next
#: probe: the first closes the gap over the window, the others are quiet gaps that keep
#: the baseline fresh even when probes run back to back (the headless sweep).
QUIET_TOKENS = 3


class LoadHook:
    """ProbeHook around every probe (see the module docstring).  ``metrics``: the
    session's MetricsHook (its ``last_delta`` holds the server's ITL histogram delta);
    it must run before this hook."""

    def __init__(self, gen: LoadGenerator, metrics: Any = None, *,
                 max_wait_s: float = MAX_WAIT_S) -> None:
        self.gen = gen
        self.metrics = metrics
        self.max_wait_s = max_wait_s
        self._windows: deque[tuple[float, float]] = deque(maxlen=WINDOWS_KEPT)
        self._tag: tuple[str, float, float] | None = None

    async def before_probe(self, client: Any = None) -> None:
        g = self.gen
        # a configured load that is not running (not started yet, level 0 of a level
        # sweep, stopped, faulted) leaves the probe at level 0: the idle fit takes it
        level = g.level if g.alive and g.state != "off" else 0.0
        self._tag = (g.spec.kind, level, g.level_since)

    async def after_probe(self, r: ProbeResult) -> None:
        try:
            await self._after(r)
        except Exception:  # never into the sweep
            log.exception("load hook failed")

    async def _after(self, r: ProbeResult) -> None:
        tag, self._tag = self._tag, None
        w = probe_window(r)
        if tag is not None:
            kind, level, since = tag
            r.load_kind, r.load_level = kind, level  # type: ignore[assignment]
            g = self.gen
            if (level > 0 and w is not None and g.level_since == since and r.ok
                    and g.sending):
                traces = await self._wait_for_tokens(w)
                gap = baseline_gap(traces, list(self._windows) + [w], since=since)
                s = window_stall(traces, w, gap)
                apply_stall(r, s)
                if r.t_send is not None:
                    r.load_ahead_tokens = ahead_tokens(traces, r.t_send)
                self._server_itl(r)
        if w is not None:
            self._windows.append(w)

    async def _wait_for_tokens(self, w: tuple[float, float]):
        """The generator's traces once every stream spanning ``w`` has a token after it
        (or the wait ran out)."""
        g = self.gen
        start = time.monotonic()
        limit = self.max_wait_s
        traces = g.traces(since=w[0] - 1.0)
        while (waiting_for(traces, w, QUIET_TOKENS) and time.monotonic() - start < limit
               and g.alive):
            await asyncio.sleep(0.01)
            traces = g.traces(since=w[0] - 1.0)
        return g.traces()

    def _server_itl(self, r: ProbeResult) -> None:
        d = getattr(self.metrics, "last_delta", None)
        if d is None:
            return
        longest = d.longest("itl")
        if longest is not None and math.isfinite(longest):  # +Inf bucket: no bound
            r.server_itl_max_s = longest
        mean = d.mean("itl")
        if mean is not None:
            r.server_itl_mean_s = mean
