"""The expectation held over time: the server's line at its best, which an incident
cannot move (``HeldExpectation``), and the users' reference window their TTFT is held
against.  No I/O, but state: one owner per server (a prober's thread, the app's
thread) offers it each fit and shows it each verdict.  Seconds in data.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Iterable, Protocol, Sequence

from prefilltui.model.diagnosis.expectation import Expectation, finite, line_at, median
from prefilltui.model.diagnosis.causes import CHANGE_RECENT_S, HIT_DROP, LONGER
from prefilltui.model.diagnosis.slowdown import SLOW_GROUP, group_scatter
from prefilltui.model.server_change import ServerChange
from prefilltui.model.fit import LinearFit, fit_ols, fit_robust
from prefilltui.model.types import ProbeResult
from prefilltui.model.users import UsersWindow


class Judged(Protocol):
    """What ``observe`` reads of a verdict (``verdict.TtftVerdict``)."""

    @property
    def above(self) -> bool: ...


#: Probes a fit needs before it is held as the expectation (below, its interval is too
#: wide to judge by: ``margin_s`` is large anyway, but a fit on a handful of probes can
#: be off by more than its interval says).
HOLD_PROBES = 10
#: Users' windows the reference is the median of (joined half a window apart: 10
#: windows of 30 s are 2.5 min of traffic).
REF_WINDOWS = 10
#: Fewest users' requests a window needs to join the reference (the median of fewer
#: moves by half between healthy windows), and the windows joined
#: before a new one is held against the reference (``_worse``): held against one
#: unlucky first window (3-9 requests, a cold cache), every later healthy window read
#: "worse" and the reference stayed wrong.
REF_MIN_REQUESTS = 8
REF_GATED_AFTER = 3
#: Windows joined before there is a reference at all: one window of a few requests
#: (2 of them, 30 ms, median prompt 150: the first minute's) held every later healthy
#: window "above", so none joined again and the control said "prompts got longer".
REF_FIRST = 2
#: Healthy probes the held line is refitted on (the newest; 10 min at a 2-s interval,
#: 25 min at 5 s): enough for its interval to shrink far below one probe's scatter.
POOL_PROBES = 300
#: Probes newer than a probe that must be judged before it joins the pool (an onset's
#: first probes are not yet "above"), as ``judge.NOW_PROBES``.
JOIN_AFTER = 6
#: An "above" episode at most this long (s) is a burst of contention, not an incident:
#: its probes join the pool once it ends (censored, the pool would never see the
#: bursts, and its groups' scatter would read too narrow); a longer one never does.
EPISODE_S = 20.0
#: Healthy probes the pool needs before its groups' scatter is trusted: a burst one
#: group in fifteen meets must have been seen a few times.
POOL_TRUSTED = 120
#: The group sizes whose healthy scatter is kept: the newest probes ``judge`` reads on
#: their own, the slowdown's group, the recent window (``verdict.RECENT``).
GROUP_SIZES = (JOIN_AFTER, SLOW_GROUP, 20)


@dataclass
class HeldExpectation:
    """The expectation an incident cannot move: held from before it, so the verdict does
    not learn the incident as the new normal and fall silent.

    ``baseline``: a fixed line (``--baseline RUN``, the exporter's ``baseline_run`` or
    ``expected_throughput``), never replaced.  Without one, ``offer(fit)`` holds the first
    fit of at least ``HOLD_PROBES`` probes with a bounded throughput interval, and
    afterwards replaces it only by one that expects a lower TTFT at both ends of the
    held fit's lengths (the server at its best: an incident only ever makes TTFT
    higher, so it can never move the expectation; a warm-up's slow first probes are
    left behind).  The probes offered with each fit wait until ``JOIN_AFTER`` newer
    ones were judged with no verdict ``above``, then join a pool of the last
    ``POOL_PROBES`` healthy probes; once the pool holds ``min_probes`` the held line is
    its fit, so the expectation sharpens with every healthy probe (it stayed at a fit
    of 11 probes, ± 47 ms around 74 ms, and a doubling hid in that margin), with the
    scatter of the pool's runs of consecutive probes (``slowdown.group_scatter``).
    ``users_before``: the users' window of the last verdict that was not
    ``above`` (so an incident stops its updates), via ``observe``.  Not thread-safe:
    one owner (a prober's thread, the app's thread).
    """

    baseline: LinearFit | None = None
    source: str = "baseline run"
    held: LinearFit | None = None
    users_before: UsersWindow | None = None
    min_probes: int = HOLD_PROBES
    _held_n: int = field(default=0, repr=False)
    _fresh: bool = field(default=True, repr=False)  # the held fit is the last offered
    _pending: deque = field(default_factory=lambda: deque(maxlen=4096), repr=False)
    _refs: deque = field(default_factory=lambda: deque(maxlen=REF_WINDOWS), repr=False)
    _joined: float = field(default=-math.inf, repr=False)
    #: probes offered, not yet judged healthy (newest last), and the healthy pool
    _waiting: deque = field(default_factory=lambda: deque(maxlen=POOL_PROBES), repr=False)
    _pool: deque = field(default_factory=lambda: deque(maxlen=POOL_PROBES), repr=False)
    _seen: tuple = field(default=(-math.inf, -1), repr=False)
    _method: str = field(default="ols", repr=False)
    _pooled: bool = field(default=False, repr=False)  # the held line is the pool's fit
    _above_since: float | None = field(default=None, repr=False)
    _aside: list = field(default_factory=list, repr=False)
    _reset_for: float = field(default=-math.inf, repr=False)  # the change last learned after

    @property
    def fit(self) -> LinearFit | None:
        return self.baseline if self.baseline is not None else self.held

    @property
    def label(self) -> str:
        """Where the expectation comes from, in words."""
        if self.baseline is not None:
            return self.source
        if self._pooled:  # refitted on every healthy probe: it sharpens, never follows
            return f"idle fit held at {self._held_n} probes"
        if self.held is None or self._fresh:
            return "idle fit"
        return f"idle fit held at {self._held_n} probes"

    def offer(self, fit: LinearFit | None, probes: Sequence[ProbeResult] = ()) -> None:
        """A newer fit of the same server (the all-time or window fit), and the probes
        it was fitted on (each joins the healthy pool once judged so: ``observe``)."""
        if self.baseline is not None:
            return
        for r in probes:
            if not (r.ok and not r.warmup and r.tokens and finite(r.ttft_s)):
                continue
            key = (r.started_at or 0.0, r.seq)
            if key > self._seen:
                self._seen = key
                self._waiting.append((float(r.tokens), float(r.ttft_s)))
        if fit is None or fit is self.held:
            return
        self._method = fit.method if fit.method in ("ols", "robust") else self._method
        if self._pooled:
            return
        self._fresh = False
        lo = fit.prefill_tokens_per_s_ci[0]
        if fit.n < self.min_probes or not fit.prefill_tokens_per_s or not finite(lo) or lo <= 0:
            return
        h = self.held
        if h is not None:
            ends = (h.x_min, h.x_max) if h.x_max > h.x_min else (0.0, 1.0)
            if any(line_at(fit, x) > line_at(h, x) for x in ends):
                return
        self.held, self._held_n, self._fresh = fit, fit.n, True

    def observe(self, verdict: Judged, users_now: UsersWindow | None,
                at_s: float | None = None, changes: Sequence[ServerChange] = ()) -> None:
        """Note the users' window judged at ``at_s`` (unix s; None: now).

        A window joins the users' reference once it is a whole window old (so the
        present window never overlaps it), no verdict since was ``above`` (an
        ``above`` verdict drops the windows noted so far: they may hold the onset), and
        its traffic is not worse than the reference's by half a cause's threshold (hit
        rate down ``HIT_DROP``/2, median prompt up (``LONGER``-1)/2): an onset too slow
        to be ``above`` at once cannot creep in either.  Windows join half a window
        apart; the reference (``users_before``) is the median, field by field, of the
        last ``REF_WINDOWS`` joined (minutes of traffic): one lucky window does not set
        it."""
        at = time.time() if at_s is None else at_s
        # a change of the server (a restart, another server, a new config) older than
        # the verdict names it for: what was held described the server before it, so
        # the new one is learned from here (held forever, the old reference kept a
        # redeployed server "above" for good)
        done = [c.at_s for c in changes if getattr(c, "kind", "replicas") != "replicas"
                and at - c.at_s > CHANGE_RECENT_S]
        if done and max(done) > self._reset_for:
            self.reset()
            self._reset_for = max(done)
        if verdict.above:
            self._pending.clear()
            if self._above_since is None:
                self._above_since, self._aside = at, list(self._waiting)
            self._waiting.clear()
            if at - self._above_since > EPISODE_S:
                self._aside = []  # an incident: none of it joins
            return
        if self._above_since is not None:
            if at - self._above_since <= EPISODE_S:  # a burst: healthy after all
                self._waiting.extendleft(reversed(self._aside))
            self._above_since, self._aside = None, []
        self._join_probes()
        if users_now is not None and users_now.requests > 0:
            self._pending.append((at, users_now))
        while self._pending and self._pending[0][0] <= at - max(self._pending[0][1].window_s, 1.0):
            t, w = self._pending.popleft()
            spaced = t >= self._joined + max(w.window_s, 1.0) / 2  # windows half apart
            if w.requests < REF_MIN_REQUESTS:
                continue
            gated = len(self._refs) >= REF_GATED_AFTER and self.users_before is not None
            if spaced and not (gated and _worse(w, self.users_before)):
                self._refs.append(w)
                self._joined = t
                if len(self._refs) >= REF_FIRST:
                    self.users_before = _median_window(self._refs)

    def _join_probes(self) -> None:
        """Healthy probes join the pool; the held line becomes the pool's fit once it
        holds ``min_probes`` with a bounded throughput interval."""
        joined = False
        while len(self._waiting) > JOIN_AFTER:
            self._pool.append(self._waiting.popleft())
            joined = True
        if not joined or len(self._pool) < self.min_probes or self.baseline is not None:
            return
        pairs = list(self._pool)
        x, y = [p[0] for p in pairs], [p[1] for p in pairs]
        f = fit_robust(x, y) if self._method == "robust" else fit_ols(x, y)
        lo = f.prefill_tokens_per_s_ci[0] if f is not None else None
        if f is None or not f.prefill_tokens_per_s or not finite(lo) or lo <= 0:
            return
        seen = group_scatter(pairs, f, GROUP_SIZES) if len(pairs) >= POOL_TRUSTED else ()
        if f.rel_scale and seen:
            # once healthy groups were seen (their scatter bounds a group, bursts of
            # contention included), a median of probes is held to the centre's scatter
            # (the robust fit's MAD scale), not the s.d. of every relative residual: a
            # few probes behind a user's prompt made that 0.8 at 15 % noise
            f = replace(f, rel_scatter=f.rel_scale)
            seen = group_scatter(pairs, f, GROUP_SIZES)
        self.held = replace(f, group_scatter=seen)
        self._held_n, self._fresh, self._pooled = f.n, False, True

    def expectation(self, mfu: float | None = None, mfu_level: str | None = None
                    ) -> Expectation | None:
        if self.fit is None and mfu_level is None:
            return None
        return Expectation(self.fit, self.label, mfu, mfu_level)

    def reset(self) -> None:
        """Forget the held fit and the users' reference (the TUI's reset)."""
        self.held, self._held_n, self.users_before, self._fresh = None, 0, None, True
        self._pending.clear()
        self._refs.clear()
        self._joined = -math.inf
        self._waiting.clear()
        self._pool.clear()
        self._seen, self._pooled = (-math.inf, -1), False
        self._above_since, self._aside = None, []



def _worse(w: UsersWindow, ref: UsersWindow) -> bool:
    """``w``'s traffic is worse than ``ref``'s by half of a users' cause's threshold (the
    hit rate or the median prompt: what an onset changes; the TTFT p50 is left to
    wander, it moves by a third between healthy windows)."""
    h0, h1 = ref.prefix_cache_hit_rate, w.prefix_cache_hit_rate
    p0, p1 = ref.prompt_tokens_p50, w.prompt_tokens_p50
    return bool((finite(h0) and finite(h1) and h0 - h1 >= HIT_DROP / 2)
                or (finite(p0) and finite(p1) and p1 >= p0 * (1 + (LONGER - 1) / 2)))


def _median_window(ws: Iterable[UsersWindow]) -> UsersWindow:
    """The field-by-field median of users' windows (source, window and estimate of
    the newest; requests: the median, so the p50's error is not understated)."""
    ws = list(ws)
    last = ws[-1]

    def med(name):
        return median(getattr(w, name) for w in ws)

    return replace(last, requests=int(med("requests") or 0), ttft_p50_s=med("ttft_p50_s"),
                   ttft_p90_s=med("ttft_p90_s"), ttft_p99_s=med("ttft_p99_s"),
                   prompt_tokens_p50=med("prompt_tokens_p50"),
                   prompt_tokens_p90=med("prompt_tokens_p90"), queue_share=med("queue_share"),
                   prompt_tokens_mean=med("prompt_tokens_mean"),
                   expected_ttft_p50_s=med("expected_ttft_p50_s"),
                   unexplained_prefill_share=med("unexplained_prefill_share"),
                   prefix_cache_hit_rate=med("prefix_cache_hit_rate"))

