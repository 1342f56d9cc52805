"""model/fleet/health.py: the alert rules on one snapshot, in sync with the rules file, and
the parts the exporter shares with it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prefilltui.model.fleet import health as H
from prefilltui.model.fleet.health import HealthInputs, judge

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prefilltui-alerts.yml"


def _alerts() -> dict[str, str]:
    """alert name -> its block of the rules file (expr, for, labels)."""
    text = RULES.read_text()
    parts = re.split(r"\n\s*- alert: ", text)[1:]
    return {p.split("\n", 1)[0].strip(): p for p in parts}


def _expr(rule: str) -> str:
    return _alerts()[rule].split("\n        for:", 1)[0].split("keep_firing_for", 1)[0]


def _numbers(text: str) -> set[float]:
    return {float(x) for x in re.findall(r"(?<![\w.\[])(\d+(?:\.\d+)?)(?![\w.\]])", text)}


@pytest.mark.parametrize("rule,number", [
    ("PrefillThroughputBelowBaseline", H.THROUGHPUT_FRACTION),
    ("PrefillThroughputBelowBaseline", 1),  # the upper bound below the baseline itself
    ("PrefillFixedCostHigh", H.FIXED_COST_LOWER_S),
    ("PrefillProbeErrors", H.ERROR_SHARE),
    ("PrefillProbesStalled", H.STALLED_INTERVALS),
])
def test_thresholds_are_the_rules_files(rule, number):
    assert number in _numbers(_expr(rule)), f"{rule}: {number} not in {sorted(_numbers(_expr(rule)))}"


def test_windows_and_hang_threshold_are_the_exporters():
    assert "prefilltui_target_up[1m]" in _expr("PrefillTargetDown") and H.DOWN_WINDOW_S == 60
    assert "prefilltui_probe_hang_threshold_seconds" in _expr("PrefillProbeHung")
    # one home for the hang threshold: the exporter's default and factor are these
    from prefilltui.exporter import config, health

    assert config.DEFAULT_HANG_AFTER_S == H.HANG_AFTER_S == 30.0
    assert health.HANG_SLOWEST_FACTOR is H.HANG_SLOWEST_FACTOR
    assert health.roofline_expected is H.roofline_expected
    assert H.hang_threshold_s(30.0, [15.0, None, 2.0]) == 45.0
    assert H.hang_threshold_s(30.0, []) == 30.0


def test_rule_names_and_severities_are_the_rules_files():
    alerts = _alerts()
    seen = {
        "PrefillProbeHung": judge(HealthInputs(up=True, in_flight_s=40, hang_threshold_s=30)),
        "PrefillTargetDown": judge(HealthInputs(up=False)),
        "PrefillProbeErrors": judge(HealthInputs(up=True, recent_probes=10, recent_failed=3)),
        "PrefillThroughputBelowBaseline": judge(HealthInputs(
            up=True, throughput_tok_s=500, throughput_upper_tok_s=900, baseline_tok_s=1000)),
        "PrefillFixedCostHigh": judge(HealthInputs(up=True, fixed_cost_lower_s=0.8)),
        "PrefillProbesStalled": judge(HealthInputs(up=True, since_last_probe_s=900,
                                                   interval_s=15)),
        "PrefillProbeCacheHits": judge(HealthInputs(up=True, cache_hit_probes=2)),
    }
    for rule, health in seen.items():
        assert rule in alerts
        sev = re.search(r"severity:\s*(\w+)", alerts[rule]).group(1)
        assert [(f.rule, f.severity) for f in health.findings] == [(rule, sev)]


def test_healthy_and_unhealthy():
    ok = judge(HealthInputs(up=True, recent_probes=10, recent_failed=2, throughput_tok_s=900,
                            throughput_upper_tok_s=950, baseline_tok_s=1000,
                            fixed_cost_lower_s=0.4, since_last_probe_s=3, interval_s=4))
    assert not ok.findings and not ok.unhealthy and ok.word == "ok"
    info = judge(HealthInputs(up=True, cache_hit_probes=1))
    assert info.word == "info" and not info.unhealthy
    down = judge(HealthInputs(up=False, recent_probes=5, recent_failed=5,
                              last_error="connect: refused", cache_hit_probes=1))
    assert down.unhealthy and down.word == "down"
    # down says it once: not also as probe errors; worst first
    assert [f.rule for f in down.findings] == ["PrefillTargetDown", "PrefillProbeCacheHits"]
    assert "connect: refused" in down.findings[0].text


def test_a_hang_pages_as_a_hang_not_as_down_or_errors():
    h = judge(HealthInputs(up=False, in_flight_s=125, hang_threshold_s=30, recent_probes=4,
                           recent_failed=4, last_error="timeout: no first token"))
    assert [f.rule for f in h.findings] == ["PrefillProbeHung"] and h.word == "hung"
    # a probe in flight that has not reached the threshold yet is no hang
    assert not judge(HealthInputs(up=True, in_flight_s=20, hang_threshold_s=30)).findings
    # stalled only when nothing is in flight
    assert not judge(HealthInputs(up=True, since_last_probe_s=900, interval_s=15,
                                  in_flight_s=10)).findings


def test_throughput_needs_both_conditions_and_a_baseline():
    # 70 % of the baseline, but the interval reaches it: not judged low
    wide = judge(HealthInputs(up=True, throughput_tok_s=700, throughput_upper_tok_s=1100,
                              baseline_tok_s=1000))
    assert not wide.findings
    # the upper bound below the baseline, but 80 %: above the 75 % line
    near = judge(HealthInputs(up=True, throughput_tok_s=800, throughput_upper_tok_s=900,
                              baseline_tok_s=1000))
    assert not near.findings
    unbounded = judge(HealthInputs(up=True, throughput_tok_s=500, throughput_upper_tok_s=None,
                                   baseline_tok_s=1000))
    assert not unbounded.findings
    nobase = judge(HealthInputs(up=True, throughput_tok_s=500, throughput_upper_tok_s=510))
    assert not nobase.findings and "no baseline" in nobase.notes[0]
    j = judge(HealthInputs(up=True, throughput_tok_s=500, throughput_upper_tok_s=520,
                           baseline_tok_s=1000, baseline_source="baseline_run")).to_json()
    assert j["healthy"] is False and j["findings"][0]["rule"] == "PrefillThroughputBelowBaseline"
    assert "50% of the baseline_run 1,000 tok/s" in j["findings"][0]["text"]
