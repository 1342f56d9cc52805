"""model/health.py: the alert rules on one snapshot, in sync with the rules file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prefilltui.model import health as H
from prefilltui.model.health import HealthInputs, judge

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prefilltui-alerts.yml"


def _alerts() -> dict[str, str]:
    """alert name -> its block of the rules file (expr, for, labels)."""
    text = RULES.read_text()
    parts = re.split(r"\n\s*- alert: ", text)[1:]
    return {p.split("\n", 1)[0].strip(): p for p in parts}


@pytest.mark.parametrize("rule,number", [
    ("PrefillThroughputBelowBaseline", H.THROUGHPUT_FRACTION),
    ("PrefillFixedCostHigh", H.FIXED_COST_LOWER_S),
    ("PrefillProbeErrors", H.ERROR_SHARE),
    ("PrefillProbesStalled", H.STALLED_S),
])
def test_thresholds_are_the_rules_files(rule, number):
    block = _alerts()[rule]
    expr = block.split("for:", 1)[0]
    found = {float(x) for x in re.findall(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.\[])", expr)}
    assert number in found, f"{rule}: {number} not in {sorted(found)}"


def test_rule_names_and_severities_are_the_rules_files():
    alerts = _alerts()
    seen = {
        "PrefillTargetDown": judge(HealthInputs(up=False)),
        "PrefillProbeErrors": judge(HealthInputs(up=True, recent_probes=10, recent_failed=3)),
        "PrefillThroughputBelowBaseline": judge(HealthInputs(
            up=True, throughput_tok_s=500, throughput_upper_tok_s=600, baseline_tok_s=1000)),
        "PrefillFixedCostHigh": judge(HealthInputs(up=True, fixed_cost_lower_s=0.8)),
        "PrefillProbesStalled": judge(HealthInputs(up=True, since_last_probe_s=900)),
        "PrefillProbeCacheHits": judge(HealthInputs(up=True, cache_hit_probes=2)),
    }
    for rule, health in seen.items():
        assert rule in alerts
        sev = re.search(r"severity:\s*(\w+)", alerts[rule]).group(1)
        assert [(f.rule, f.severity) for f in health.findings] == [(rule, sev)]


def test_healthy_and_unhealthy():
    ok = judge(HealthInputs(up=True, recent_probes=10, recent_failed=2, throughput_tok_s=900,
                            throughput_upper_tok_s=950, baseline_tok_s=1000,
                            fixed_cost_lower_s=0.4, since_last_probe_s=3))
    assert not ok.findings and not ok.unhealthy and ok.word == "ok"
    info = judge(HealthInputs(up=True, cache_hit_probes=1))
    assert info.word == "info" and not info.unhealthy
    down = judge(HealthInputs(up=False, recent_probes=5, recent_failed=5,
                              last_error="connect: refused", cache_hit_probes=1))
    assert down.unhealthy and down.word == "down"
    # down says it once: not also as probe errors; worst first
    assert [f.rule for f in down.findings] == ["PrefillTargetDown", "PrefillProbeCacheHits"]
    assert "connect: refused" in down.findings[0].text


def test_throughput_needs_the_upper_bound_below_and_a_baseline():
    # the point estimate is low but the interval reaches the baseline: not judged low
    wide = judge(HealthInputs(up=True, throughput_tok_s=500, throughput_upper_tok_s=800,
                              baseline_tok_s=1000))
    assert not wide.findings
    unbounded = judge(HealthInputs(up=True, throughput_tok_s=500, throughput_upper_tok_s=None,
                                   baseline_tok_s=1000))
    assert not unbounded.findings
    nobase = judge(HealthInputs(up=True, throughput_tok_s=500, throughput_upper_tok_s=510))
    assert not nobase.findings and "no baseline" in nobase.notes[0]
    j = judge(HealthInputs(up=True, throughput_tok_s=500, throughput_upper_tok_s=520,
                           baseline_tok_s=1000, baseline_source="baseline run")).to_json()
    assert j["healthy"] is False and j["findings"][0]["rule"] == "PrefillThroughputBelowBaseline"
    assert "baseline run 1,000 tok/s" in j["findings"][0]["text"]
