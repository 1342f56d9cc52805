"""Error-budget burn rate over short and long windows, as the SRE workbook's
multiwindow, multi-burn-rate alerts judge it: ``BURN_RULES``, ``burn_state``.

The burn rate over a window is the share of requests that missed the objective in it
over the error budget (1 - target): 1 spends the budget exactly over the SLO period;
14.4 spends 2 % of a 30-day budget in one hour.  An alert fires when the long window
*and* its short window (1/12 of it: it resets the alert soon after the burning stops)
both burn faster than the rule's rate.  Source: the SRE workbook, "Alerting on SLOs"
(Google, 2018), "6: Multiwindow, Multi-Burn-Rate Alerts", its recommended table:
page at 14.4x over 1 h with 5 min, page at 6x over 6 h with 30 min (the third row,
ticket at 1x over 3 d with 6 h, is left out: a monitor's memory of spans is shorter).
The same thresholds are the Prometheus rules in deploy/prefilltui-alerts.yml.
Pure: no I/O.  Seconds, unix time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Literal

from prefilltui.model.slo.objective import Objective

BurnSeverity = Literal["fast", "slow"]


@dataclass(frozen=True, slots=True)
class BurnRule:
    """Burn faster than ``rate`` over ``long_s`` and over ``short_s`` at once."""

    severity: BurnSeverity
    long_s: float
    short_s: float
    rate: float


BURN_RULES: tuple[BurnRule, ...] = (
    BurnRule("fast", 3600.0, 300.0, 14.4),
    BurnRule("slow", 21600.0, 1800.0, 6.0),
)


@dataclass(frozen=True, slots=True)
class WindowBurn:
    """One window's burn: requests in it, how many missed, the burn rate (None: no
    requests), and whether the requests seen reach back the whole window (``full``:
    a monitor started 10 minutes ago cannot know the 1-h rate)."""

    window_s: float
    total: int
    bad: int
    rate: float | None
    full: bool


@dataclass(frozen=True, slots=True)
class BurnState:
    """The burn rate per window and which rules fire: ``firing`` the severities whose
    long and short windows both exceed their rate, fast first."""

    objective: Objective
    windows: tuple[WindowBurn, ...]
    firing: tuple[BurnSeverity, ...]

    @property
    def burning(self) -> BurnSeverity | None:
        """"fast" (page: 14.4x over 1 h and 5 min), "slow" (6x over 6 h and 30 min) or
        None."""
        return self.firing[0] if self.firing else None

    def rate(self, window_s: float) -> float | None:
        return next((w.rate for w in self.windows if w.window_s == window_s), None)


def burn_state(events: Iterable[tuple[float, float | None]], objective: Objective,
               now_s: float, rules: tuple[BurnRule, ...] = BURN_RULES) -> BurnState:
    """The burn over ``rules``' windows ending at ``now_s`` (unix s) from ``events`` =
    (unix s the request finished, its TTFT s); events with no finite TTFT, or in the
    future, are left out.  A window with no request has no rate and fires nothing."""
    spans = sorted({w for r in rules for w in (r.long_s, r.short_s)})
    total = dict.fromkeys(spans, 0)
    bad = dict.fromkeys(spans, 0)
    oldest = math.inf
    for t, ttft in events:
        if ttft is None or not math.isfinite(ttft) or not math.isfinite(t) or t > now_s + 1e-6:
            continue
        oldest = min(oldest, t)
        age = now_s - t
        missed = ttft > objective.threshold_s
        for w in spans:
            if age <= w:
                total[w] += 1
                bad[w] += missed
    budget = objective.budget
    windows = tuple(WindowBurn(w, total[w], bad[w],
                               (bad[w] / total[w]) / budget if total[w] else None,
                               full=now_s - oldest >= w) for w in spans)
    by = {w.window_s: w for w in windows}
    firing = tuple(r.severity for r in rules
                   if all(by[s].rate is not None and by[s].rate > r.rate
                          for s in (r.long_s, r.short_s)))
    return BurnState(objective, windows, firing)
