"""How many requests met an objective: ``Attainment`` from exact values or from a
histogram's buckets, with its interval; the error budget left.

- **Exact** (``attainment_of``): the users' TTFTs from their spans, or the probes'
  (labelled "probes": prefilltui's own requests, not the users').  ``good`` counts
  TTFT <= threshold.
- **Histogram** (``attainment_from_buckets``): a cumulative TTFT histogram (the
  engine's ``*_time_to_first_token_seconds_bucket``) knows the count below the
  threshold only at its bucket bounds.  With the bounds b_lo <= S <= b_hi around the
  threshold S, count(<= b_lo) <= good <= count(<= b_hi): ``good_lo`` / ``good_hi``,
  and ``bounds_s`` says which bounds were used.  Nothing is interpolated inside a
  bucket; a threshold on a bound is exact.
- The interval ``ci``: Wilson's score interval (Wilson 1927) at 95 % on the share,
  taken from ``good_lo`` for its lower end and ``good_hi`` for its upper, so it holds
  both the sampling uncertainty and the bucket's.

The error budget over the requests counted: ``budget_left`` = 1 - bad / (budget x
total) (1: none spent; 0: all; negative: overspent), between its bounds from the
bucket counts.  Pure: no I/O.  Seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Literal, Sequence

from prefilltui.model.slo.objective import Objective

AttainmentSource = Literal["spans", "histogram", "probes", "load"]
#: The normal quantile of a two-sided 95 % interval.
Z95 = 1.959963984540054


def wilson(good: float, total: float, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval (lo, hi) for ``good`` of ``total`` (0..1; (0, 1) for 0)."""
    if total <= 0:
        return (0.0, 1.0)
    p = min(max(good / total, 0.0), 1.0)
    d = 1 + z * z / total
    mid = (p + z * z / (2 * total)) / d
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / d
    return (max(0.0, mid - half), min(1.0, mid + half))


@dataclass(frozen=True, slots=True)
class Attainment:
    """The share of requests within ``objective`` over one set of requests.

    good_lo / good_hi -- requests within the threshold, at least / at most (equal when
      exact); total -- requests counted; source -- "spans" (the users' exact TTFTs),
      "histogram" (bucket counts: see ``bounds_s``), "probes" (prefilltui's own) or
      "load" (prefilltui's rate-search requests);
    bounds_s -- (b_lo, b_hi) the bucket bounds the counts were read at (None: exact;
      b_hi None when the threshold is above the last finite bound);
    window_s -- the time the requests span (s), when known.
    """

    objective: Objective
    good_lo: float
    good_hi: float
    total: float
    source: AttainmentSource
    bounds_s: tuple[float, float | None] | None = None
    window_s: float | None = None

    @property
    def exact(self) -> bool:
        return self.good_lo == self.good_hi

    @property
    def share(self) -> float | None:
        """The share within (0..1): exact, or the middle of the bucket bounds'
        (``share_bounds`` says how far it may be off); None without requests."""
        if self.total <= 0:
            return None
        return 0.5 * (self.good_lo + self.good_hi) / self.total

    @property
    def share_bounds(self) -> tuple[float, float] | None:
        if self.total <= 0:
            return None
        return (self.good_lo / self.total, self.good_hi / self.total)

    @property
    def ci(self) -> tuple[float, float] | None:
        """The 95 % interval on the share (Wilson at ``good_lo`` and at ``good_hi``)."""
        if self.total <= 0:
            return None
        return (wilson(self.good_lo, self.total)[0], wilson(self.good_hi, self.total)[1])

    @property
    def meets(self) -> bool | None:
        """True when the whole interval is at or above the target, False when all of
        it is below, None while it straddles the target (or no requests)."""
        ci = self.ci
        if ci is None:
            return None
        if ci[0] >= self.objective.target:
            return True
        if ci[1] < self.objective.target:
            return False
        return None

    @property
    def budget_left(self) -> float | None:
        """1 - bad / (budget x total) at the share (``budget_left_bounds`` for the
        histogram's range); None without requests."""
        s = self.share
        return None if s is None else 1.0 - (1.0 - s) / self.objective.budget

    @property
    def budget_left_bounds(self) -> tuple[float, float] | None:
        b = self.share_bounds
        if b is None:
            return None
        return tuple(1.0 - (1.0 - s) / self.objective.budget for s in b)  # type: ignore[return-value]

    @property
    def burn_rate(self) -> float | None:
        """The bad share over the budget: 1 spends the budget exactly over the window."""
        s = self.share
        return None if s is None else (1.0 - s) / self.objective.budget

    def to_json(self) -> dict:
        return {"objective": self.objective.key, "source": self.source,
                "total": self.total, "good_lo": self.good_lo, "good_hi": self.good_hi,
                "share": self.share, "ci": list(self.ci) if self.ci else None,
                "bounds_s": list(self.bounds_s) if self.bounds_s else None,
                "budget_left": self.budget_left, "window_s": self.window_s,
                "target": self.objective.target}


def attainment_of(ttfts_s: Iterable[float | None], objective: Objective,
                  source: AttainmentSource = "spans", window_s: float | None = None
                  ) -> Attainment:
    """Exact attainment of TTFTs (seconds); None, NaN and negative values are left
    out (not counted either way)."""
    good = total = 0
    for t in ttfts_s:
        if t is None or not math.isfinite(t) or t < 0:
            continue
        total += 1
        if t <= objective.threshold_s:
            good += 1
    return Attainment(objective, good, good, total, source, None, window_s)


def attainment_from_buckets(buckets: Sequence[tuple[float, float]], objective: Objective,
                            window_s: float | None = None) -> Attainment | None:
    """Attainment from a cumulative histogram: ``buckets`` = (upper bound s, count of
    observations <= it), the +Inf bucket (bound inf) holding the total.  None without
    a +Inf bucket, with counts that are not finite or fall as the bound grows (a reset
    mid-window), or with no observations."""
    rows = sorted((float(le), float(c)) for le, c in buckets)
    if not rows or not math.isinf(rows[-1][0]):
        return None
    counts = [c for _, c in rows]
    if any(not math.isfinite(c) or c < 0 for c in counts):
        return None
    if any(b < a - 1e-9 for a, b in zip(counts, counts[1:])):
        return None
    total = counts[-1]
    if total <= 0:
        return None
    s = objective.threshold_s
    lo_b, lo_c = 0.0, 0.0
    hi_b: float | None = None
    hi_c = total
    for le, c in rows:
        if le <= s * (1 + 1e-9):
            lo_b, lo_c = le, c
        if le >= s * (1 - 1e-9):
            hi_b, hi_c = (le if math.isfinite(le) else None), c
            break
    if hi_b is not None and abs(hi_b - lo_b) <= 1e-9 * max(1.0, s):
        return Attainment(objective, lo_c, lo_c, total, "histogram", (lo_b, hi_b), window_s)
    return Attainment(objective, lo_c, hi_c, total, "histogram", (lo_b, hi_b), window_s)
