"""The operations kit in deploy/: rules pass promtool (check and unit tests), every
series the rules and the dashboard use is one the exporter serves, the example
target file and the systemd command line parse."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from prefilltui.exporter.collector import families
from prefilltui.exporter.config import load_toml
from prefilltui.exporter.target import LengthHistogram, TargetSnapshot
from prefilltui.model.analysis import analyze
from prefilltui.model.types import ProbeResult, ServerInfo
from prefilltui.options import AnalysisOptions, RooflineSpec

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed "
                                    "(.ci/run installs it)")


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=DEPLOY, capture_output=True, text=True,
                          timeout=120)


@needs_promtool
def test_promtool_check_rules_and_config():
    out = _promtool("check", "rules", "prefilltui-alerts.yml")
    assert out.returncode == 0, out.stdout + out.stderr
    out = _promtool("check", "config", "prometheus.yml")
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_promtool_rule_unit_tests_fire_and_stay_quiet():
    out = _promtool("test", "rules", "prefilltui-alerts.test.yml")
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def _served_names() -> set[str]:
    """Every series name the exporter serves for a target with a full window summary
    (a fit with bounds, MFU with bounds, a verdict and the TTFT parts)."""
    window = [ProbeResult(seq=i, ok=True, requested_tokens=n, prompt_tokens=n,
                          ttft_s=(0.02 + 1e-4 * n) * (1 + 0.01 * (-1) ** i),
                          server_prefill_s=0.004 + 1e-4 * n, queue_s=0.001, overhead_s=0.015)
              for i, n in enumerate([64, 256, 1024, 2048] * 3)]
    summary = analyze(window, ServerInfo(kind="vllm", model="m"), AnalysisOptions(
        roofline=RooflineSpec(params=8e9, peak_tflops=989)))
    assert summary.roofline.mfu_ci is not None and summary.fit is not None
    snap = TargetSnapshot(
        target="t", model="m", server_kind="vllm", api="completions", interval_s=15.0,
        up=True, last_probe_ts=1.0, last_success_ts=1.0, probes=((("ok", ""), 1),),
        histograms=(LengthHistogram(64, (1,) * 14, 0.1, 1),), summary=summary)
    assert snap.verdict is not None and snap.parts_s
    names = set()
    for fam in families([snap]):
        names |= {s.name for s in fam.samples}
    return names


def test_rules_and_dashboard_use_only_served_series():
    served = _served_names()
    for f in ("prefilltui-alerts.yml", "grafana-dashboard.json"):
        used = set(re.findall(r"\bprefilltui_[a-z0-9_]+", (DEPLOY / f).read_text()))
        assert used, f
        assert used <= served, f"{f} uses series the exporter does not serve: {used - served}"


def test_dashboard_is_valid_json_with_a_target_variable():
    d = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    assert {v["name"] for v in d["templating"]["list"]} >= {"datasource", "target"}
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)) >= 8
    assert any(p["type"] == "heatmap" for p in d["panels"])


def test_example_targets_and_systemd_command_line_parse():
    targets = load_toml(str(DEPLOY / "targets.example.toml"))
    assert len(targets) == 2 and targets[0].roofline.gpu == "H100 SXM"
    unit = (DEPLOY / "prefilltui-exporter.service").read_text().replace("\\\n", " ")
    line = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
    argv = shlex.split(line)
    assert argv[0].endswith("/prefilltui") and argv[1] == "exporter"
    from prefilltui.cli import build_parser

    args = build_parser().parse_args(argv[1:])
    assert args.listen == "127.0.0.1:9464" and args.config.endswith("targets.toml")
