"""What a sweep is told: its config, the lengths it probes, the context cap, and the
numbers of its retry policy.

``SweepConfig`` (lengths, repeats, pacing, targets, rate ceiling), ``ProbeHook`` (what
runs around each probe), ``make_lengths`` (log-spaced lengths), ``cap_for_context``
(the longest prompt under a context limit) and ``rate_limit_wait`` (the wait after a
429/503), with the constants they and ``sweep_loop`` use.  No I/O here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from prefilltui.model.pacing import Pacing
from prefilltui.model.types import ProbeResult

#: Tokens kept free below the server's context limit: the one generated token, a
#: chat template, and the +-2 % length tolerance (applied on top, see ``_cap_for``).
CONTEXT_RESERVE = 8
#: Longest back-off after repeated 429/503 without Retry-After (seconds).
MAX_BACKOFF_S = 60.0
#: Shortest wait after a 429/503, whatever Retry-After says ("0", "-5" or garbage
#: would otherwise re-send at once, hammering a server that asked us to slow down).
MIN_RATE_LIMIT_WAIT_S = 1.0
#: A non-continuous sweep gives up on one probe after this many rate-limited
#: attempts in a row, or once its waits would pass MAX_RATE_LIMIT_WAIT_S; the
#: probe is then a failed ``rate_limited`` probe and the sweep moves on.
MAX_RATE_LIMITED_TRIES = 5
MAX_RATE_LIMIT_WAIT_S = 120.0
#: A non-continuous sweep gives up after this many failures in a row
#: (context-length caps and rate-limited attempts that are retried excluded).
MAX_CONSECUTIVE_FAILURES = 10


class ProbeHook(Protocol):
    """Runs around every probe, in the runner's loop (``MetricsHook``, a ``Sampler``);
    must not raise into the sweep."""

    async def before_probe(self, client) -> None: ...
    async def after_probe(self, result: ProbeResult) -> None: ...


@dataclass
class SweepConfig:
    lengths: list[int]
    repeats: int = 1
    warmup: int = 1
    pause_s: float = 0.0
    seed: int | None = None
    continuous: bool = False
    #: stop once the throughput 95 % interval's half-width is under this % (None: off)
    until_ci_pct: float | None = None
    #: stop after this many probes / seconds of probing (None: no limit)
    budget_probes: int | None = None
    budget_s: float | None = None
    #: spacing of probes and the size of a burst (core.pacing); None = a fixed
    #: ``pause_s`` gap after each probe and one-probe bursts (the headless pacing)
    pacing: Pacing | None = None

    #: A rate ceiling for long-running probers (the exporter): successive probe *starts*
    #: are at least ``interval_s`` apart, failures, rate-limit retries and reconnects
    #: included, plus a random ``0..jitter`` fraction of it, so the rate never exceeds
    #: 1/interval_s per runner and runners started together drift apart.  None: no
    #: ceiling (``pacing`` alone spaces the probes).
    interval_s: float | None = None
    jitter: float = 0.0
    #: How many results a continuous runner keeps in memory (None: RECENT_RESULTS).
    keep_results: int | None = None

    @property
    def effective_pacing(self) -> Pacing:
        return self.pacing if self.pacing is not None else Pacing(idle_floor_s=self.pause_s)


def rate_limit_wait(retry_after_s: float | None, backoff_s: float) -> float:
    """Seconds to wait after a 429/503: Retry-After when given, else ``backoff_s``,
    clamped to [MIN_RATE_LIMIT_WAIT_S, MAX_BACKOFF_S] (a negative, zero or absurd
    Retry-After never makes a busy loop or a day-long wait)."""
    wait = retry_after_s if retry_after_s is not None else backoff_s
    return min(MAX_BACKOFF_S, max(MIN_RATE_LIMIT_WAIT_S, wait))


def make_lengths(min_tokens: int, max_tokens: int, points: int) -> list[int]:
    """``points`` log-spaced integer lengths from min to max inclusive (sorted, unique).

    Raises:
        ValueError: when min < 1, max < min or points < 1.
    """
    if min_tokens < 1 or max_tokens < min_tokens or points < 1:
        raise ValueError(f"bad range {min_tokens}..{max_tokens} x {points}")
    if points == 1 or min_tokens == max_tokens:
        return [int(max_tokens)]
    lo, hi = math.log(min_tokens), math.log(max_tokens)
    vals = {int(round(math.exp(lo + (hi - lo) * i / (points - 1)))) for i in range(points)}
    return sorted(vals)


def cap_for_context(context_tokens: int | None) -> int | None:
    """Longest prompt to request under a context limit (None when unknown)."""
    if not context_tokens:
        return None
    return max(1, int((context_tokens - CONTEXT_RESERVE) / 1.02))
