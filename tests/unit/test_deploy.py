"""The operations kit in deploy/: rules pass promtool (check and unit tests), the
Alertmanager config passes amtool, every series the rules and the dashboard use is one
the exporter serves (or a recording rule defines), every alert carries its runbook
section and dashboard link, the inhibit rules name real alerts, the dashboard reads
exact per-length figures and instant verdicts, the example target file and the
systemd command line parse."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.components import require

from prefilltui.exporter.collector import families
from prefilltui.exporter.config import load_toml
from prefilltui.exporter.health import Expected, ttft_buckets
from prefilltui.exporter.snapshot import LengthHistogram, TargetSnapshot
from prefilltui.model import defaults
from prefilltui.model.summary import analyze
from prefilltui.model.types import ProbeResult, ServerInfo
from prefilltui.options import AnalysisOptions, RooflineSpec

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
#: promtool and amtool come with the prometheus and alertmanager components
#: (tests/components.py): these tests run after the fast ones, once `make test` has
#: obtained them (skip, with the install line, where they cannot be had; fail in CI).
needs_promtool = needs_amtool = pytest.mark.component
_COMPONENT = {"promtool": "prometheus", "amtool": "alertmanager"}


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    require(_COMPONENT[tool])
    return subprocess.run([shutil.which(tool), *args], cwd=DEPLOY, capture_output=True,
                          text=True, timeout=120)


def _rules() -> dict:
    return yaml.safe_load((DEPLOY / "prefilltui-alerts.yml").read_text())


def _alerts() -> list[dict]:
    return [r for g in _rules()["groups"] for r in g["rules"] if "alert" in r]


@needs_promtool
def test_promtool_check_rules_and_config():
    out = _run("promtool", "check", "rules", "prefilltui-alerts.yml")
    assert out.returncode == 0, out.stdout + out.stderr
    out = _run("promtool", "check", "config", "prometheus.yml")
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_promtool_rule_unit_tests_fire_and_stay_quiet():
    """deploy/prefilltui-alerts.test.yml: 12 h of slowdown keeps firing on the learned
    baseline, slow from the start fires on the explicit one, a stale fit stops the
    throughput alert, missed scrapes neither resolve nor delay an alert, a hang fires
    at once and keeps firing through its retries, 1.25x never pages."""
    out = _run("promtool", "test", "rules", "prefilltui-alerts.test.yml")
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


@needs_amtool
def test_amtool_checks_the_alertmanager_config():
    out = _run("amtool", "check-config", "alertmanager.yml")
    assert out.returncode == 0 and "3 inhibit rules" in out.stdout, out.stdout + out.stderr


def _snapshot() -> TargetSnapshot:
    """A snapshot with every optional part present, so every family has samples: a full
    window summary (a fit with bounds, MFU with bounds, a verdict and the TTFT parts),
    freshness, an explicit baseline, per-length medians, a last error."""
    window = [ProbeResult(seq=i, ok=True, requested_tokens=n, prompt_tokens=n,
                          ttft_s=(0.02 + 1e-4 * n) * (1 + 0.01 * (-1) ** i),
                          server_prefill_s=0.004 + 1e-4 * n, queue_s=0.001, overhead_s=0.015)
              for i, n in enumerate([64, 256, 1024, 2048] * 3)]
    summary = analyze(window, ServerInfo(kind="vllm", model="m"), AnalysisOptions(
        roofline=RooflineSpec(params=8e9, peak_tflops=989)))
    assert summary.roofline.mfu_ci is not None and summary.fit is not None
    bounds = ttft_buckets(defaults.TIMEOUT_S)
    snap = TargetSnapshot(
        target="t", model="m", server_kind="vllm", api="completions", interval_s=15.0,
        url="http://u:***@h:8000", up=True, last_probe_ts=1.0, last_success_ts=1.0,
        probes=((("ok", ""), 1),), ttft_bounds_s=bounds,
        histograms=(LengthHistogram(64, (1,) * (len(bounds) + 1), 0.1, 1),), summary=summary,
        length_medians_s=((64, 0.03),), fit_ts=1.0, window_size=40, in_flight_since=2.0,
        expected=Expected(1e4, "config"), last_error=("http", 500), slo=_slo_figures(window))
    assert snap.verdict is not None and snap.parts_s
    return snap


def _slo_figures(window) -> tuple:
    """One objective with every part present: n_max at both lines, the users' and the
    probes' attainment, the users' share over n_max."""
    from prefilltui.exporter.slo import SloFigures
    from prefilltui.model.slo import Objective, slo_status
    from prefilltui.model.users import UserRequest

    o = Objective(0.2, 99.0)
    fit = analyze(window).fit
    users = [UserRequest(arrival_s=10.0 + i, prompt_tokens=500 + 100 * i, ttft_s=0.1 + 0.01 * i,
                         end_s=11.0 + i) for i in range(20)]
    st = slo_status(o, idle_fit=fit, now_fit=fit, probe_ttfts_s=[r.ttft_s for r in window],
                    users=users)
    return (SloFigures(o, (("users", 20, 18), ("probes", 12, 12)), st),)


def _served_names() -> set[str]:
    names = set()
    for fam in families([_snapshot()], now=3.0):
        names |= {s.name for s in fam.samples}
    return names


def _recorded_names() -> set[str]:
    return {r["record"] for g in _rules()["groups"] for r in g["rules"] if "record" in r}


def test_rules_and_dashboard_use_only_served_series():
    served, recorded = _served_names(), _recorded_names()
    for f in ("prefilltui-alerts.yml", "grafana-dashboard.json"):
        text = (DEPLOY / f).read_text()
        used = set(re.findall(r"\bprefilltui_[a-z0-9_]+", text))
        assert used, f
        assert used <= served, f"{f} uses series the exporter does not serve: {used - served}"
        rec = set(re.findall(r"\bprefilltui:[a-z0-9_:]+", text))
        assert rec <= recorded, f"{f} uses undefined recording rules: {rec - recorded}"


def test_every_alert_keeps_instance_and_job_and_links_its_runbook():
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", runbook, re.M)}
    dash_uid = json.loads((DEPLOY / "grafana-dashboard.json").read_text())["uid"]
    for a in _alerts():
        name, expr = a["alert"], a["expr"]
        # aggregations drop labels only with without(...), never by a list lacking them
        for by in re.findall(r"\bby\s*\(([^)]*)\)", expr):
            assert {"job", "instance"} <= {x.strip() for x in by.split(",")}, (name, by)
        ann = a["annotations"]
        assert ann["runbook"] == f"docs/runbook.md#{name.lower()}", name
        assert name.lower() in anchors, f"docs/runbook.md has no section {name}"
        if a["labels"]["severity"] != "info" and name != "PrefillExporterDown":
            assert ann["dashboard"].startswith(f"/d/{dash_uid}/"), name
            assert "$labels.target" in ann["dashboard"]


def test_throughput_alert_carries_the_evidence():
    a = next(a for a in _alerts() if a["alert"] == "PrefillThroughputBelowBaseline")
    assert {"ratio", "baseline", "current", "url", "summary", "description"} <= set(a["annotations"])
    assert "prefilltui_fit_stale" in a["expr"] and "< 0.75" in a["expr"]
    down = next(a for a in _alerts() if a["alert"] == "PrefillTargetDown")
    assert {"error_kind", "http_status", "url"} <= set(down["annotations"])
    assert down["keep_firing_for"] and next(
        a for a in _alerts() if a["alert"] == "PrefillProbeHung")["keep_firing_for"]


def _matching(matchers: list[str], names: set[str]) -> set[str]:
    """The alert names an Alertmanager matcher list selects (alertname matchers only)."""
    out = set(names)
    for m in matchers:
        mm = re.fullmatch(r'\s*alertname\s*(=~|!=|=)\s*"([^"]+)"\s*', m)
        if mm is None:
            continue
        op, val = mm.groups()
        pat = re.compile(val if op == "=~" else re.escape(val))
        out = {n for n in out if bool(pat.fullmatch(n)) != (op == "!=")}
    return out


def test_inhibit_rules_name_real_alerts_and_cover_a_down_target():
    names = {a["alert"] for a in _alerts()}
    am = yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())
    inhibits: dict[str, set[str]] = {}
    for rule in am["inhibit_rules"]:
        sources = _matching(rule["source_matchers"], names)
        targets = _matching(rule["target_matchers"], names)
        assert sources and targets, rule  # every matcher names real alerts
        assert "target" in rule["equal"] or rule["equal"] == ["job", "instance"], rule
        for s in sources:
            inhibits.setdefault(s, set()).update(targets - {s})
    assert inhibits["PrefillTargetDown"] >= {"PrefillProbeErrors", "PrefillThroughputBelowBaseline",
                                             "PrefillFixedCostHigh", "PrefillProbesStalled"}
    assert inhibits["PrefillProbeHung"] >= {"PrefillTargetDown", "PrefillProbeErrors",
                                            "PrefillThroughputBelowBaseline"}
    assert inhibits["PrefillExporterDown"] == names - {"PrefillExporterDown"}
    assert not inhibits.get("PrefillTargetDown", set()) & {"PrefillProbeHung"}  # no cycle


def test_histogram_buckets_end_at_the_probe_timeout():
    assert defaults.TIMEOUT_S == 120.0
    b = ttft_buckets(defaults.TIMEOUT_S)
    assert b[-1] == 120.0 and b[-2] == 100.0 and b[0] == 0.005
    assert ttft_buckets(30.0)[-2:] == (20.0, 30.0)
    text = "".join(f"{s.labels.get('le')} " for fam in families([_snapshot()], now=3.0)
                   for s in fam.samples if s.name == "prefilltui_ttft_seconds_bucket")
    assert "120.0 +Inf" in text


def _panel(d: dict, title_part: str) -> dict:
    return next(p for p in d["panels"] if title_part in p["title"])


def test_dashboard_reads_exact_per_length_figures_and_instant_verdicts():
    d = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    assert {v["name"] for v in d["templating"]["list"]} >= {"datasource", "target"}
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)) >= 8
    assert "histogram_quantile" not in json.dumps(d)
    by_len = _panel(d, "by prompt length")
    assert [t["expr"] for t in by_len["targets"]] == [
        'prefilltui_ttft_window_median_seconds{target=~"$target"}']
    assert "{{target}}" in by_len["targets"][0]["legendFormat"]
    heat = next(p for p in d["panels"] if p["type"] == "heatmap")
    assert heat["repeat"] == "target" and "$target" in heat["title"]
    assert 'target="$target"' in heat["targets"][0]["expr"]
    table = next(p for p in d["panels"] if p["type"] == "table")
    assert table["targets"] and all(t["instant"] is True and t["range"] is False
                                    for t in table["targets"])
    for p in d["panels"]:  # every per-target series says which target it is
        for t in p["targets"]:
            if "$target" in t["expr"] and p["type"] not in ("table", "heatmap"):
                assert "{{target}}" in t["legendFormat"], p["title"]


def test_example_targets_and_systemd_command_line_parse():
    targets = load_toml(str(DEPLOY / "targets.example.toml"))
    assert len(targets) == 2 and targets[0].roofline.gpu == "H100 SXM"
    assert targets[0].expected_throughput is not None
    unit = (DEPLOY / "prefilltui-exporter.service").read_text().replace("\\\n", " ")
    line = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
    argv = shlex.split(line)
    assert argv[0].endswith("/prefilltui") and argv[1] == "exporter"
    from prefilltui.cli import build_parser

    args = build_parser().parse_args(argv[1:])
    assert args.listen == "127.0.0.1:9464" and args.config.endswith("targets.toml")
