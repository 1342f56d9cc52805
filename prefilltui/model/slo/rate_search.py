"""The highest offered request rate that holds an objective: the pure part of the rate
search (``RateStep``, ``RateSearch``, ``next_rate``, ``saturated``, ``search_result``).

At each offered rate the driver (``commands/rate_search``) sends open-loop Poisson
requests for a dwell and hands back their TTFTs in send order.  A step *meets* the
objective when its attainment (the share within the threshold) is at or above the
target; its 95 % interval (Wilson, ``attainment``) is shown beside it and says when
the step could not tell (the interval straddles the target).  The search bisects
between the highest rate that met it and the lowest that did not, on a log scale
(rates span decades), until they are within ``RESOLUTION`` of each other or the steps
run out.  A step is *over-saturated* when waiting grows without bound: the second
half of its requests' TTFTs has a median above ``GROWTH`` x the first half's and above
the threshold, or requests were refused for being too many in flight; it fails and
the search goes no higher than it (a saturated server answers later and later, so a
longer dwell would only fail worse).  Pure: no I/O.  Requests/s, seconds.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from prefilltui.model.slo.attainment import Attainment, attainment_of
from prefilltui.model.slo.objective import Objective

#: The search stops when the highest meeting and the lowest failing rate are within
#: this ratio (1.1: 10 %): finer than a dwell's attainment can tell at tens of requests.
RESOLUTION = 1.1
#: Waiting that grows without bound: the second half's median TTFT this many times
#: the first half's (a queue that keeps up grows by its noise only).
GROWTH = 2.0


@dataclass(frozen=True, slots=True)
class RateStep:
    """One offered rate (requests/s): its requests' attainment, whether it saturated
    and why, requests refused (too many in flight) and the rate achieved (sent /
    dwell)."""

    rate: float
    attainment: Attainment
    saturated: bool = False
    why: str = ""
    refused: int = 0
    achieved: float | None = None

    @property
    def meets(self) -> bool:
        """At or above the target at its point estimate, and not saturated."""
        s = self.attainment.share
        return (not self.saturated and s is not None
                and s >= self.attainment.objective.target)

    @property
    def decided(self) -> bool:
        """The 95 % interval is wholly on one side of the target."""
        return self.attainment.meets is not None or self.saturated

    def to_json(self) -> dict:
        return {"rate_per_s": self.rate, "meets": self.meets, "decided": self.decided,
                "saturated": self.saturated, "why": self.why, "refused": self.refused,
                "achieved_per_s": self.achieved, "attainment": self.attainment.to_json()}


def saturated(ttfts_s: Sequence[float], threshold_s: float, refused: int = 0) -> tuple[bool, str]:
    """Whether waiting grew without bound over one step (see the module docstring):
    (saturated, why)."""
    if refused > 0:
        return True, f"{refused} request(s) refused: too many in flight"
    t = [x for x in ttfts_s if x is not None and math.isfinite(x)]
    if len(t) < 6:
        return False, ""
    half = len(t) // 2
    a, b = statistics.median(t[:half]), statistics.median(t[half:])
    if b > GROWTH * max(a, 1e-9) and b > threshold_s:
        return True, f"TTFT grew from a median {a:.3g} s to {b:.3g} s within the step"
    return False, ""


def step_of(rate: float, ttfts_s: Sequence[float | None], objective: Objective, *,
            unanswered: int = 0, refused: int = 0, achieved: float | None = None) -> RateStep:
    """One step from its requests' TTFTs (s, in send order; None: no token came, counted
    as missing the objective) and ``unanswered`` requests still waiting at the end
    (each missing it too: a request with no first token yet has waited its whole
    age)."""
    got = [t for t in ttfts_s if t is not None and math.isfinite(t)]
    misses = [math.inf] * (unanswered + sum(1 for t in ttfts_s if t is None))
    att = attainment_of([*got, *[1e12 for _ in misses]], objective, source="load")
    sat, why = saturated(got, objective.threshold_s, refused)
    return RateStep(rate, att, sat, why, refused, achieved)


def next_rate(steps: Sequence[RateStep], lo: float, hi: float) -> float | None:
    """The next rate to try between ``lo`` and ``hi`` (requests/s), or None when done:
    first ``lo``; then ``hi`` if ``lo`` met it; then the geometric middle of the
    highest meeting and the lowest failing rate until they are within ``RESOLUTION``.
    Nothing more once ``lo`` fails (the server cannot hold it even there) or ``hi``
    meets it (the answer is at least ``hi``)."""
    if not steps:
        return lo
    good = [s.rate for s in steps if s.meets]
    bad = [s.rate for s in steps if not s.meets]
    if not good:
        return None
    best = max(good)
    if not bad:
        return None if best >= hi else hi
    worst = min(r for r in bad if r > best) if any(r > best for r in bad) else None
    if worst is None or worst / best <= RESOLUTION:
        return None
    return math.sqrt(best * worst)


@dataclass(frozen=True, slots=True)
class RateSearch:
    """The search's steps (in the order run) and its answer: ``rate`` the highest rate
    that met the objective (None: not even the lowest), ``below`` / ``above`` the
    bracket it lies in (``above`` None: the highest tried met it), and ``attainment``
    the answer's own step's attainment (its interval)."""

    objective: Objective
    steps: tuple[RateStep, ...]
    rate: float | None
    above: float | None

    @property
    def answer_step(self) -> RateStep | None:
        return next((s for s in self.steps if s.rate == self.rate), None)

    def to_json(self) -> dict:
        a = self.answer_step
        return {"objective": self.objective.key, "rate_per_s": self.rate,
                "fails_at_per_s": self.above,
                "attainment": a.attainment.to_json() if a else None,
                "steps": [s.to_json() for s in self.steps]}


def search_result(objective: Objective, steps: Sequence[RateStep]) -> RateSearch:
    """The answer of ``steps`` (see ``RateSearch``)."""
    good = [s.rate for s in steps if s.meets]
    rate = max(good) if good else None
    above = min((s.rate for s in steps if not s.meets and (rate is None or s.rate > rate)),
                default=None)
    return RateSearch(objective, tuple(steps), rate, above)
