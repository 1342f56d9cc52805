"""What a sweep is told: its config, the lengths it probes, the context and time caps,
and the numbers of its retry policy.

``SweepConfig`` (lengths, repeats, pacing, targets, rate ceiling, time cap),
``ProbeHook`` (what runs around each probe), ``make_lengths`` (log-spaced lengths),
``cap_for_context`` (the longest prompt under a context limit), ``expected_ttft`` /
``time_cap`` (the longest prompt a probe should take under ``TIME_CAP_S`` for) and
``rate_limit_wait`` (the wait after a 429/503), with the constants they and
``sweep_loop`` use.  No I/O here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, NamedTuple, Protocol

from prefilltui.model.pacing import Pacing
from prefilltui.model.types import ProbeResult

#: Tokens kept free below the server's context limit: the one generated token, a
#: chat template, and the +-2 % length tolerance (applied on top, see ``_cap_for``).
CONTEXT_RESERVE = 8
#: Longest back-off after repeated 429/503 without Retry-After (seconds).
MAX_BACKOFF_S = 60.0
#: Longest wait between two discovery attempts of a continuous runner whose server does
#: not answer yet (seconds): its interval, but at most this (and at least 2 s).  A
#: discovery is a few cheap reads (``/v1/models``, ``/props``), no prompt; waiting a
#: whole 600 s interval left a server that came up a second after the exporter
#: unprobed for ten minutes.
DISCOVERY_RETRY_MAX_S = 30.0
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
#: The longest one probe of a default sweep (no ``--lengths``: ``sweep``, ``demo
#: --headless`` and the TUI's live sweep) should take (s): lengths whose expected TTFT
#: is longer are capped and merged (``time_cap``).  A headless sweep of
#: the default 4-4,096 tokens on a CPU (llama.cpp, ~170 prompt tok/s) took 78 s, 47 s of
#: it one probe at 4,007 tokens; capped, the longest probe takes about this long.
TIME_CAP_S = 5.0
#: Past the longest probe TTFT is extrapolated as n^e, e from the two longest probes
#: kept between 1 (linear layers) and this (attention's n²).
MAX_GROWTH = 2.0


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
    #: are at least ``interval_s`` apart, failures and rate-limit retries included, plus
    #: a random ``0..jitter`` fraction of it, so the rate never exceeds 1/interval_s per
    #: runner and runners started together drift apart.  The first probe follows
    #: discovery at once; discovery itself is retried every ``interval_s`` clamped to
    #: [2 s, ``DISCOVERY_RETRY_MAX_S``].  None: no ceiling (``pacing`` alone spaces the
    #: probes).
    interval_s: float | None = None
    jitter: float = 0.0
    #: How many results a continuous runner keeps in memory (None: RECENT_RESULTS).
    keep_results: int | None = None
    #: Cap the lengths where one probe is expected to take longer than this (s;
    #: ``TIME_CAP_S`` for a default sweep, one pass or continuous; None: off, as for
    #: ``--lengths``).  The first round then sends each length only once the probes so
    #: far expect it within the cap (``expected_ttft``), and merges the lengths left over
    #: into one at the cap; later rounds probe the capped lengths (until ``set_range``).
    time_cap_s: float | None = None

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


class TimeCap(NamedTuple):
    """The longest prompt (``tokens``) expected to take at most the cap and the probes it
    was estimated from: ``below`` (tokens, fastest TTFT s), the longest length measured
    within the cap; ``above`` the next length measured, over the cap (the cap is on the
    straight line between the two), or None (past the longest length, extrapolated as
    n^``growth``)."""

    tokens: int
    below: tuple[int, float]
    above: tuple[int, float] | None
    growth: float = 1.0


def _fastest(points: Iterable[tuple[int, float]]) -> list[tuple[int, float]]:
    """(tokens, the fastest TTFT at that length) sorted by tokens; unusable points
    (no length, a TTFT that is not finite and positive) left out."""
    best: dict[int, float] = {}
    for n, t in points:
        if n and n > 0 and t is not None and math.isfinite(t) and t > 0:
            best[n] = min(t, best.get(n, t))
    return sorted(best.items())


def _growth(pts: list[tuple[int, float]]) -> float:
    """The exponent e of TTFT ~ n^e between the two longest lengths, in [1, MAX_GROWTH]
    (1 with one length: a fixed cost makes a straight line through 0 err long)."""
    if len(pts) < 2:
        return 1.0
    (n_p, t_p), (n_m, t_m) = pts[-2], pts[-1]
    return min(MAX_GROWTH, max(1.0, math.log(t_m / t_p) / math.log(n_m / n_p)))


def expected_ttft(points: Iterable[tuple[int, float]], n: int) -> float | None:
    """The TTFT (s) an ``n``-token prompt is expected to take, from measured
    (prompt tokens, TTFT s) pairs (the fastest TTFT of each length), erring long: at or
    below the shortest length, its TTFT; between two measured lengths, the straight
    line between them (TTFT = a + b n + c n², c >= 0, lies under its chords); beyond the
    longest, its t_m · (n / n_m)^e (``_growth``; e >= 1 keeps the fixed cost in the
    per-token time).  None without a usable point."""
    pts = _fastest(points)
    if not pts:
        return None
    if n <= pts[0][0]:
        return pts[0][1]
    for (m0, t0), (m1, t1) in zip(pts, pts[1:]):
        if n <= m1:
            return t0 + (t1 - t0) * (n - m0) / (m1 - m0)
    n_m, t_m = pts[-1]
    return t_m * (n / n_m) ** _growth(pts)


def time_cap(points: Iterable[tuple[int, float]], budget_s: float) -> TimeCap | None:
    """The longest prompt ``expected_ttft`` keeps within ``budget_s``, never below the
    longest length measured within it (n_w, t_w): when a longer length was measured
    (n_o, t_o over the budget: a slow probe, or TTFT growing faster than the probes
    below it said), where the line between the two reaches ``budget_s``,
    n_w + (budget_s - t_w) (n_o - n_w) / (t_o - t_w); else past n_w where
    t_w · (n / n_w)^e = budget_s.  None without a usable point, or when no length was
    within the budget (the fixed cost alone is over: a shorter prompt saves nothing)."""
    pts = _fastest(points)
    within = [(m, t) for m, t in pts if t <= budget_s]
    if not within:
        return None
    n_w, t_w = within[-1]
    above = next(((m, t) for m, t in pts if m > n_w), None)
    if above is not None:
        n_o, t_o = above
        return TimeCap(n_w + int((budget_s - t_w) * (n_o - n_w) / (t_o - t_w)), (n_w, t_w), above)
    e = _growth(pts)
    return TimeCap(max(n_w, int(n_w * (budget_s / t_w) ** (1.0 / e))), (n_w, t_w), None, e)
