"""Is a target healthy?  The exporter's alert rules, judged on one snapshot.

``deploy/prefilltui-alerts.yml`` pages on the exporter's series; the fleet overview
and ``prefilltui status`` judge the same conditions with the same thresholds on what
they measured themselves, so "unhealthy" means the same thing in the terminal, in a
script's exit code and in Alertmanager.  Each ``Finding`` is named after its alert:

- ``PrefillTargetDown`` (critical): the target does not answer: discovery failed, or
  the last probe failed (``prefilltui_target_up == 0``);
- ``PrefillProbeErrors`` (warning): more than ``ERROR_SHARE`` of the recent probes
  failed;
- ``PrefillThroughputBelowBaseline`` (warning): even the upper 95 % bound of the
  throughput is below ``THROUGHPUT_FRACTION`` of the baseline (the alert's baseline
  is the target's own 1-day median; here: an explicit one, ``--baseline`` /
  ``baseline_run``, else the median of this session's readings when there are enough;
  with neither the rule is not judged and ``notes`` says so);
- ``PrefillFixedCostHigh`` (warning): the fixed cost's lower 95 % bound is above
  ``FIXED_COST_LOWER_S``;
- ``PrefillProbesStalled`` (warning): no probe finished for ``STALLED_S``;
- ``PrefillProbeCacheHits`` (info): a probe was served from the prefix cache.

What a snapshot cannot do is wait: the alerts' ``for:`` durations need a history, so a
condition counts here as soon as it holds.  ``tests/unit/test_health.py`` checks that
every threshold here is the one in the rules file, so the two move together.
Critical and warning findings make a target unhealthy; info does not.  Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from prefilltui.model.jsontypes import JsonObject
from prefilltui.model.units import duration

Severity = Literal["critical", "warning", "info"]
#: Worst first.
SEVERITIES: tuple[Severity, ...] = ("critical", "warning", "info")

#: PrefillThroughputBelowBaseline: the throughput's upper bound below this share of
#: the baseline (deploy/prefilltui-alerts.yml: ``< 0.7 * quantile_over_time(0.5, ...)``).
THROUGHPUT_FRACTION = 0.7
#: PrefillFixedCostHigh: the fixed cost's lower 95 % bound above this (s).
FIXED_COST_LOWER_S = 0.5
#: PrefillProbeErrors: the failed share of the recent probes above this.
ERROR_SHARE = 0.2
#: PrefillProbesStalled: no probe finished for this long (s).
STALLED_S = 600.0


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

    up: the target answered its last probe or discovery (None: nothing tried yet);
    recent_probes / recent_failed: probes in the recent window (the last 10 minutes,
    or one ``status`` pass) and how many failed; last_error: the last failure's kind
    and message; throughput_tok_s / throughput_upper_tok_s: the fit's throughput and
    its upper 95 % bound (None: unbounded); baseline_tok_s / baseline_source: what it is
    held against (None: no baseline); fixed_cost_lower_s: the intercept's lower 95 %
    bound; cache_hit_probes: recent probes the prefix cache served; since_last_probe_s:
    seconds since a probe last finished (None: none yet).
    """

    up: bool | None = None
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
        """"down", "unhealthy", "info" or "ok"."""
        if any(f.rule == "PrefillTargetDown" for f in self.findings):
            return "down"
        return {"critical": "unhealthy", "warning": "unhealthy", "info": "info"}.get(
            self.severity or "", "ok")

    def to_json(self) -> JsonObject:
        return {"healthy": not self.unhealthy, "word": self.word,
                "findings": [f.to_json() for f in self.findings], "notes": list(self.notes)}


def judge(h: HealthInputs) -> Health:
    """The rules of the module docstring on ``h``.  Never raises."""
    found: list[Finding] = []
    notes: list[str] = []
    if h.up is False:
        found.append(Finding("PrefillTargetDown", "critical",
                             "does not answer" + (f": {h.last_error}" if h.last_error else "")))
    if h.recent_probes and h.recent_failed / h.recent_probes > ERROR_SHARE and h.up is not False:
        found.append(Finding("PrefillProbeErrors", "warning",
                             f"{h.recent_failed} of {h.recent_probes} recent probes failed "
                             f"({h.recent_failed / h.recent_probes:.0%} > {ERROR_SHARE:.0%})"
                             + (f"; last: {h.last_error}" if h.last_error else "")))
    tp, base = h.throughput_tok_s, h.baseline_tok_s
    if tp is not None and base:
        upper = h.throughput_upper_tok_s
        if upper is not None and upper < THROUGHPUT_FRACTION * base:
            found.append(Finding(
                "PrefillThroughputBelowBaseline", "warning",
                f"prefill {tp:,.0f} tok/s (upper 95 % {upper:,.0f}) < {THROUGHPUT_FRACTION:.0%} "
                f"of the {h.baseline_source or 'baseline'} {base:,.0f} tok/s"))
    elif tp is not None:
        notes.append("throughput not judged: no baseline (--baseline RUN.jsonl, or a longer "
                     "session)")
    lo = h.fixed_cost_lower_s
    if lo is not None and lo > FIXED_COST_LOWER_S:
        found.append(Finding("PrefillFixedCostHigh", "warning",
                             f"fixed cost ≥ {duration(lo)} (lower 95 % bound) > "
                             f"{duration(FIXED_COST_LOWER_S)}"))
    if h.since_last_probe_s is not None and h.since_last_probe_s > STALLED_S:
        found.append(Finding("PrefillProbesStalled", "warning",
                             f"no probe finished for {duration(h.since_last_probe_s)}"))
    if h.cache_hit_probes:
        found.append(Finding("PrefillProbeCacheHits", "info",
                             f"{h.cache_hit_probes} probe(s) served from the prefix cache "
                             "(kept out of the fit)"))
    found.sort(key=lambda f: SEVERITIES.index(f.severity))
    return Health(tuple(found), tuple(notes))
