"""The exporter's TTFT objectives: ``slo`` in the targets file, the counters Prometheus
takes burn rates from (each probe and each user's span counted once), the gauges, and a
page promtool accepts."""

from __future__ import annotations

import pytest

from prefilltui.exporter.collector import families
from prefilltui.exporter.config import check, load_toml, target
from prefilltui.exporter.slo import SloCounters
from prefilltui.exporter.target import TargetProber
from prefilltui.model.slo import Objective, parse_objective
from prefilltui.model.users import UserRequest
from tests.unit.test_exporter import _wait, prefill_server


def test_slo_in_the_targets_file_fleet_default_and_own(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('[defaults]\nslo = "ttft=2s@p99"\n'
                 '[[target]]\nurl = "http://127.0.0.1:8000"\nname = "a"\n'
                 '[[target]]\nurl = "http://127.0.0.1:8001"\nname = "b"\n'
                 'slo = ["ttft=500ms@p90", "mlperf-server"]\n')
    a, b = load_toml(str(f))
    assert [i.key for i in a.slo] == ["ttft=2s@p99"] and a.analysis.slo == a.slo
    assert [i.key for i in b.slo] == ["ttft=500ms@p90", "mlperf-server"]
    assert a.slo[0].source == "config"


@pytest.mark.parametrize("line,why", [('slo = "ttft=2s@p101"', "p50 .. p99.9"),
                                      ("slo = 2", "slo must be an objective"),
                                      ("slo = []", "slo must be an objective"),
                                      ('slo = ["ttft=2"]', "is not an objective")])
def test_bad_slo_in_the_file_names_the_target(tmp_path, line, why):
    f = tmp_path / "t.toml"
    f.write_text(f'[[target]]\nurl = "http://127.0.0.1:8000"\n{line}\n')
    with pytest.raises(ValueError) as e:
        load_toml(str(f))
    assert "target 1" in str(e.value) and why in str(e.value)


def _user(i: int, ttft: float) -> UserRequest:
    return UserRequest(arrival_s=1000.0 + i, prompt_tokens=100, ttft_s=ttft, end_s=1001.0 + i,
                       request_id=f"u{i}")


def test_each_users_span_is_counted_once():
    o = (Objective(1.0, 99.0),)
    c = SloCounters()
    kept = tuple(_user(i, 0.5 if i % 4 else 2.0) for i in range(8))
    c.users(o, kept[:5])
    c.users(o, kept[:5])  # nothing new
    c.users(o, kept[2:8])  # the oldest pruned, three new
    c.users(o, (_user(99, float("nan")),))  # the last counted gone: all new; NaN not counted
    (fig,) = c.figures(o, ())
    assert dict((s, (n, k)) for s, n, k in fig.counts) == {"users": (8, 6), "probes": (0, 0)}


def test_prober_counts_probes_and_publishes_n_max(fake_server, tmp_path):
    srv = prefill_server(fake_server)
    cfg = check(target(srv.base_url, lengths=(16, 64, 256), interval=0.05, window=12,
                       slo=(parse_objective("ttft=50ms@p90"),)))
    p = TargetProber(cfg, run_dir=tmp_path, seed=3).start()
    try:
        assert _wait(lambda: p.snapshot.fit is not None and dict(p.snapshot.probes)[("ok", "")] >= 12,
                     timeout=30)
    finally:
        p.stop(timeout=2)
    s = p.snapshot
    (f,) = s.slo
    counts = {src: (n, k) for src, n, k in f.counts}
    assert counts["users"] == (0, 0)
    assert counts["probes"][0] >= 10 and 0 <= counts["probes"][1] <= counts["probes"][0]
    assert f.status is not None and f.status.now is not None
    fams = {m.name: m for m in families([s])}
    req = [x for x in fams["prefilltui_slo_requests"].samples if x.labels["source"] == "probes"]
    assert req and req[0].labels["objective"] == "ttft=50ms@p90"
    assert req[0].value == counts["probes"][0]
    nmax = fams["prefilltui_slo_max_prompt_tokens"].samples
    assert {x.labels["line"] for x in nmax} == {"idle", "now"}
    assert fams["prefilltui_slo_target_ratio"].samples[0].value == pytest.approx(0.9)


def test_no_objective_no_series(fake_server, tmp_path):
    srv = prefill_server(fake_server)
    p = TargetProber(check(target(srv.base_url, lengths=(16, 64), interval=0.05)),
                     run_dir=tmp_path).start()
    try:
        assert _wait(lambda: dict(p.snapshot.probes)[("ok", "")] >= 3)
    finally:
        p.stop(timeout=2)
    assert not any(m.name.startswith("prefilltui_slo_") for m in families([p.snapshot]))


@pytest.mark.component
def test_slo_series_pass_promtool(fake_server, tmp_path):
    import shutil
    import subprocess

    from prometheus_client import CollectorRegistry, generate_latest

    from prefilltui.exporter.collector import HealthCollector
    from tests.components import require

    require("prometheus")
    srv = prefill_server(fake_server)
    cfg = check(target(srv.base_url, name="t", lengths=(16, 64, 256), interval=0.05,
                       slo=(parse_objective("ttft=50ms@p90"), parse_objective("ttft=1s@p99"))))
    p = TargetProber(cfg, run_dir=tmp_path, seed=3).start()
    try:
        assert _wait(lambda: p.snapshot.fit is not None, timeout=30)
    finally:
        p.stop(timeout=2)
    reg = CollectorRegistry()
    reg.register(HealthCollector([p]))
    text = generate_latest(reg).decode()
    assert 'prefilltui_slo_good_requests_total{' in text
    out = subprocess.run([shutil.which("promtool"), "check", "metrics"], input=text,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "" and out.stderr.strip() == "", (
        out.stdout + out.stderr)
