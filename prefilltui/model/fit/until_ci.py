"""Repeat until confident: probe until the prefill throughput's 95 % interval is narrow
enough, or a budget of probes / time is spent.

``ConfidenceTarget(pct, budget_probes=, budget_s=)`` is fed every probe the runner
sends (``add``); ``progress()`` fits the fit-eligible points (the fit shown:
``running_fit.analyze_points``) and says whether the throughput interval's
half-width is under ``pct`` % of the estimate, or a budget ran out.
``next_length(lengths)`` picks where the next repeat shrinks the throughput
interval most: for each candidate length L it adds one point to the weighted design
(weights 1/(yhat + s0)^2, the robust fit's noise model) and scores the drop of
var(b)/b^2 (lengths below a knee are never picked: the fit leaves them out).  That
favours the long end (the most slope per probe, and the least relative jitter), and
the shortest length while the intercept is loose (a and b are correlated).  Every
fourth pick goes to the length with the fewest probes instead, so repeats stay
spread over the range: the short anchors keep pinning the intercept, and curvature, a
knee and drift stay visible.  Scoring per second of probing instead (gain / TTFT)
was tried and dropped: on a busy 2-core machine, where 4-token probes swung from 0.1
to 0.9 s, it put 38 of 60 probes at 4 tokens and the interval widened; a budget of
time (``budget_s``) is the way to bound the cost.
Seconds throughout; no I/O; not thread-safe (the
runner's thread owns it).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from prefilltui.model.fit.running import analyze_points
from prefilltui.model.types import JsonObject, ProbeResult

SPREAD_EVERY = 4  # every 4th pick: the least-probed length


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a repeat-until-confident run stands.

    ``half_width_pct``: the throughput interval's half-width in % of the estimate
    (None before a fit; inf when the interval is unbounded).  ``probes``: probes sent
    (warm-up and failed included, what a budget counts); ``fit_points``: probes in
    the fit.  ``reason``: why it is done ("target reached", "probe budget spent",
    "time budget spent") or None.
    """

    target_pct: float | None
    half_width_pct: float | None
    probes: int
    fit_points: int
    elapsed_s: float
    done: bool
    reason: str | None
    budget_probes: int | None = None
    budget_s: float | None = None

    def to_json(self) -> JsonObject:
        d = asdict(self)
        if d["half_width_pct"] is not None and not math.isfinite(d["half_width_pct"]):
            d["half_width_pct"] = None
        return d

    def line(self) -> str:
        """One line of plain text, e.g. 'throughput +-3.1 % (target 2 %), 40 probes'."""
        hw = self.half_width_pct
        now = "no fit yet" if hw is None else ("unbounded" if not math.isfinite(hw) else f"+-{hw:.1f} %")
        parts = [f"throughput {now}"
                 + (f" (target {self.target_pct:g} %)" if self.target_pct is not None else "")]
        budget = f" of {self.budget_probes}" if self.budget_probes else ""
        parts.append(f"{self.probes}{budget} probes")
        if self.budget_s:
            parts.append(f"{self.elapsed_s:.0f} of {self.budget_s:.0f} s")
        if self.reason:
            parts.append(self.reason)
        return ", ".join(parts)


class ConfidenceTarget:
    """See the module docstring.  ``pct`` None: budgets only.

    Raises:
        ValueError: when ``pct`` or a budget is not positive.
    """

    def __init__(self, pct: float | None, *, budget_probes: int | None = None,
                 budget_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                 seed: int = 0) -> None:
        for name, v in (("pct", pct), ("budget_probes", budget_probes), ("budget_s", budget_s)):
            if v is not None and not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be > 0, got {v!r}")
        self.pct = pct
        self.budget_probes = budget_probes
        self.budget_s = budget_s
        self.clock = clock
        self.seed = seed
        self._t0: float | None = None
        self._sent = 0
        self._x: list[float] = []
        self._y: list[float] = []
        self._counts: Counter[int] = Counter()
        self._picks = 0
        self._snap: Any = None
        self._snap_n = -1
        self._done_reason: str | None = None

    def start(self) -> None:
        """Start the clock of the time budget (first call only)."""
        if self._t0 is None:
            self._t0 = self.clock()

    def add(self, r: ProbeResult) -> None:
        """Count one probe sent; keep its point when it is fit-eligible."""
        self.start()
        self._sent += 1
        self._counts[int(r.requested_tokens)] += 1
        if r.fit_eligible:
            self._x.append(float(r.tokens))
            self._y.append(float(r.ttft_s))

    def _fit(self):
        if self._snap_n != len(self._x):
            self._snap_n = len(self._x)
            self._snap = analyze_points(self._x, self._y, seed=self.seed) if len(self._x) >= 3 else None
        return self._snap.fit if self._snap is not None else None

    def half_width_pct(self) -> float | None:
        fit = self._fit()
        if fit is None or not fit.prefill_tokens_per_s:
            return None
        lo, hi = fit.prefill_tokens_per_s_ci
        if lo is None or hi is None:
            return math.inf
        return 100.0 * (hi - lo) / 2.0 / fit.prefill_tokens_per_s

    def progress(self) -> Progress:
        elapsed = 0.0 if self._t0 is None else self.clock() - self._t0
        hw = self.half_width_pct() if self.pct is not None else None
        reason = self._done_reason
        if reason is None:
            if self.pct is not None and hw is not None and hw <= self.pct:
                reason = "target reached"
            elif self.budget_probes is not None and self._sent >= self.budget_probes:
                reason = "probe budget spent"
            elif self.budget_s is not None and elapsed >= self.budget_s:
                reason = "time budget spent"
            self._done_reason = reason
        return Progress(target_pct=self.pct, half_width_pct=hw, probes=self._sent,
                        fit_points=len(self._x), elapsed_s=elapsed, done=reason is not None,
                        reason=reason, budget_probes=self.budget_probes, budget_s=self.budget_s)

    def next_length(self, lengths: list[int]) -> int:
        """The length whose next probe shrinks the intervals most per second."""
        if not lengths:
            raise ValueError("no lengths to choose from")
        self._picks += 1
        least = min(lengths, key=lambda n: (self._counts[int(n)], n))
        fit = self._fit()
        if fit is None or self._picks % SPREAD_EVERY == 0 or fit.slope_s_per_token <= 0:
            return least
        x = np.asarray(self._x)
        s0 = fit.noise_floor_s or 0.0
        floor = 1e-6
        w = 1.0 / (np.maximum(fit.predict(x), floor) + s0) ** 2
        m = np.array([[w.sum(), w @ x], [w @ x, w @ (x * x)]])
        inv0 = np.linalg.pinv(m)
        b = fit.slope_s_per_token
        knee = fit.knee_tokens or 0  # below a knee probes are left out of the fit
        best, best_score = least, -math.inf
        for n in (n for n in lengths if n >= knee):
            yhat = max(float(fit.predict(float(n))), floor)
            wl = 1.0 / (yhat + s0) ** 2
            v = np.array([1.0, float(n)])
            mv = inv0 @ v  # Sherman-Morrison: inv(M + w v v') = inv - w inv v v' inv / (1 + w v' inv v)
            inv1 = inv0 - wl * np.outer(mv, mv) / (1.0 + wl * v @ mv)
            gain = (inv0[1, 1] - inv1[1, 1]) / (b * b)  # x the noise scale^2, the same for all
            score = gain - 1e-9 * yhat  # a tie goes to the cheaper length
            if score > best_score:
                best, best_score = n, score
        return int(best)
