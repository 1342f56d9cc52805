"""Is a target healthy?  The exporter's alert rules, judged on one snapshot, and the
pure parts the exporter and the rules share.

``deploy/prefilltui-alerts.yml`` pages on the exporter's series; the fleet overview
and ``prefilltui status`` judge the same conditions with the same thresholds on what
they measured themselves, so "unhealthy" means the same in the terminal, in a script's
exit code and in Alertmanager.  Each ``Finding`` is named after its alert:

- ``PrefillProbeHung`` (critical): a probe in flight longer than the hang threshold
  (``hang_threshold_s``: ``hang_after``, 30 s, or 3 x the window's slowest TTFT);
- ``PrefillTargetDown`` (critical): every probe of the last minute failed, or discovery
  did (not during a hang: that is the hang's page);
- ``PrefillProbeErrors`` (warning): more than ``ERROR_SHARE`` of the recent probes
  failed, while the target is neither down nor hung;
- ``PrefillThroughputBelowBaseline`` (warning): the throughput is below
  ``THROUGHPUT_FRACTION`` of the baseline and even its upper 95 % bound is below the
  baseline.  The baseline: an explicit one (``expected_throughput``, ``baseline_run``,
  "roofline": ``roofline_expected``; ``--baseline RUN.jsonl``); the alert's learned one
  (the 90th percentile of 7 days of hourly medians) needs Prometheus, so the overview
  uses the median of its own session's readings and ``status`` none (``notes`` says so);
- ``PrefillFixedCostHigh`` (warning): the fixed cost's lower 95 % bound is above
  ``FIXED_COST_LOWER_S``;
- ``PrefillProbesStalled`` (warning): no probe finished for ``STALLED_INTERVALS``
  probe intervals and none is in flight;
- ``PrefillProbeCacheHits`` (info): a probe was served from the prefix cache.

What a snapshot cannot do is wait: the alerts' ``for:`` durations and the hysteresis of
the throughput alert (it resolves at 80 %) need a history, so a condition counts here
as soon as it holds.  ``tests/unit/test_health.py`` holds every threshold to the rules
file, so the two move together.  Critical and warning findings make a target
unhealthy; info does not.  Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Literal

from prefilltui.model.jsontypes import JsonObject
from prefilltui.model.summary import RunSummary
from prefilltui.model.units import duration

Severity = Literal["critical", "warning", "info"]
#: Worst first.
SEVERITIES: tuple[Severity, ...] = ("critical", "warning", "info")

#: PrefillThroughputBelowBaseline: below this share of the baseline (``< 0.75``), its
#: upper bound below the baseline (``< 1``).
THROUGHPUT_FRACTION = 0.75
#: PrefillFixedCostHigh: the fixed cost's lower 95 % bound above this (s).
FIXED_COST_LOWER_S = 0.5
#: PrefillProbeErrors: the failed share of the recent probes above this.
ERROR_SHARE = 0.2
#: PrefillTargetDown: every probe finished in this many seconds failed (``[1m]``).
DOWN_WINDOW_S = 60.0
#: PrefillProbesStalled: no probe finished for this many probe intervals.
STALLED_INTERVALS = 40
#: PrefillProbeHung: the hang threshold's floor (s), the exporter's ``hang_after``
#: default (``exporter.config.DEFAULT_HANG_AFTER_S``) ...
HANG_AFTER_S = 30.0
#: ... raised to this many times the window's slowest TTFT (a CPU target's long
#: prompts take tens of seconds).
HANG_SLOWEST_FACTOR = 3.0


def hang_threshold_s(hang_after_s: float, ttfts: Iterable[float | None]) -> float:
    """Seconds a probe may be in flight before it is a hang: ``hang_after_s``, or
    ``HANG_SLOWEST_FACTOR`` x the slowest of ``ttfts`` (s) when that is longer."""
    slowest = max((t for t in ttfts if t is not None and math.isfinite(t)), default=0.0)
    return max(hang_after_s, HANG_SLOWEST_FACTOR * slowest)


def roofline_expected(summary: RunSummary | None) -> float | None:
    """The roofline's expected prefill throughput (prompt tokens/s) of a summary:
    ``efficiency`` x the peak FLOP/s over the matmul FLOPs one more prompt token costs
    (``RooflineSummary.flops_per_token``, the count MFU uses: model/roofline/flops.py; 2 x params
    before there is a fit; an estimate), or None without a peak and a parameter
    count.  The baseline of ``expected_throughput = "roofline"``."""
    if summary is None or summary.roofline is None or summary.model is None:
        return None
    peak, eff = summary.roofline.peak_flops, summary.roofline.efficiency
    params = summary.model.params
    per_token = summary.roofline.flops_per_token or (2.0 * params if params else None)
    return eff * peak / per_token if per_token and peak and eff else None


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule that holds: the alert's name, its severity and the numbers in words."""

    rule: str
    severity: Severity
    text: str

    def to_json(self) -> JsonObject:
        return {"rule": self.rule, "severity": self.severity, "text": self.text}


@dataclass(frozen=True, slots=True)
class HealthInputs:
    """What the rules read, measured by the caller (seconds, prompt tokens/s).

    up: False when every probe of the last minute failed, or discovery did (None:
    nothing tried yet); in_flight_s: how long the probe in flight has waited (for a
    finished snapshot: the longest a probe waited before it timed out), against
    ``hang_threshold_s``; recent_probes / recent_failed: probes of the recent window
    (the last 10 minutes, or one ``status`` pass) and how many failed; last_error: the
    last failure's kind and message; throughput_tok_s / throughput_upper_tok_s: the
    fit's throughput and its upper 95 % bound (None: unbounded); baseline_tok_s /
    baseline_source: what it is held against (None: no baseline); fixed_cost_lower_s:
    the intercept's lower 95 % bound; cache_hit_probes: recent probes the prefix cache
    served; since_last_probe_s / interval_s: since a probe last finished, and the
    target's interval (None: not a paced prober).
    """

    up: bool | None = None
    in_flight_s: float | None = None
    hang_threshold_s: float = HANG_AFTER_S
    recent_probes: int = 0
    recent_failed: int = 0
    last_error: str | None = None
    throughput_tok_s: float | None = None
    throughput_upper_tok_s: float | None = None
    baseline_tok_s: float | None = None
    baseline_source: str | None = None
    fixed_cost_lower_s: float | None = None
    cache_hit_probes: int = 0
    since_last_probe_s: float | None = None
    interval_s: float | None = None


@dataclass(frozen=True, slots=True)
class Health:
    """The findings, worst first, and what could not be judged (``notes``)."""

    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def severity(self) -> Severity | None:
        """The worst finding's severity (None: nothing holds)."""
        return self.findings[0].severity if self.findings else None

    @property
    def unhealthy(self) -> bool:
        """A critical or warning finding holds (info alone is healthy)."""
        return self.severity in ("critical", "warning")

    @property
    def word(self) -> str:
        """"down", "hung", "unhealthy", "info" or "ok"."""
        rules = {f.rule for f in self.findings}
        if "PrefillTargetDown" in rules:
            return "down"
        if "PrefillProbeHung" in rules:
            return "hung"
        return {"critical": "unhealthy", "warning": "unhealthy", "info": "info"}.get(
            self.severity or "", "ok")

    def to_json(self) -> JsonObject:
        return {"healthy": not self.unhealthy, "word": self.word,
                "findings": [f.to_json() for f in self.findings], "notes": list(self.notes)}


def judge(h: HealthInputs) -> Health:
    """The rules of the module docstring on ``h``.  Never raises."""
    found: list[Finding] = []
    notes: list[str] = []
    hung = h.in_flight_s is not None and h.in_flight_s > h.hang_threshold_s
    if hung:
        found.append(Finding("PrefillProbeHung", "critical",
                             f"a probe waited {duration(h.in_flight_s)} for its first token "
                             f"(hang threshold {duration(h.hang_threshold_s)})"))
    down = h.up is False and not hung
    if down:
        found.append(Finding("PrefillTargetDown", "critical",
                             "every probe of the last minute failed"
                             + (f": {h.last_error}" if h.last_error else "")))
    if (h.recent_probes and h.recent_failed / h.recent_probes > ERROR_SHARE
            and not down and not hung):
        found.append(Finding("PrefillProbeErrors", "warning",
                             f"{h.recent_failed} of {h.recent_probes} recent probes failed "
                             f"({h.recent_failed / h.recent_probes:.0%} > {ERROR_SHARE:.0%})"
                             + (f"; last: {h.last_error}" if h.last_error else "")))
    tp, base = h.throughput_tok_s, h.baseline_tok_s
    if tp is not None and base:
        upper = h.throughput_upper_tok_s
        if tp < THROUGHPUT_FRACTION * base and upper is not None and upper < base:
            found.append(Finding(
                "PrefillThroughputBelowBaseline", "warning",
                f"prefill {tp:,.0f} tok/s = {tp / base:.0%} of the {h.baseline_source or 'baseline'}"
                f" {base:,.0f} tok/s (< {THROUGHPUT_FRACTION:.0%}; upper 95 % {upper:,.0f})"))
    elif tp is not None:
        notes.append("throughput not judged: no baseline (--baseline RUN.jsonl, "
                     "expected_throughput or baseline_run in the target file, or a longer "
                     "session)")
    lo = h.fixed_cost_lower_s
    if lo is not None and lo > FIXED_COST_LOWER_S:
        found.append(Finding("PrefillFixedCostHigh", "warning",
                             f"fixed cost ≥ {duration(lo)} (lower 95 % bound) > "
                             f"{duration(FIXED_COST_LOWER_S)}"))
    if (h.since_last_probe_s is not None and h.interval_s
            and h.since_last_probe_s > STALLED_INTERVALS * h.interval_s and not h.in_flight_s):
        found.append(Finding("PrefillProbesStalled", "warning",
                             f"no probe finished for {duration(h.since_last_probe_s)} "
                             f"(> {STALLED_INTERVALS} intervals of {duration(h.interval_s)})"))
    if h.cache_hit_probes:
        found.append(Finding("PrefillProbeCacheHits", "info",
                             f"{h.cache_hit_probes} probe(s) served from the prefix cache "
                             "(kept out of the fit)"))
    found.sort(key=lambda f: SEVERITIES.index(f.severity))
    return Health(tuple(found), tuple(notes))
