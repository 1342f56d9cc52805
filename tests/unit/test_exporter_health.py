"""The exporter's alerting inputs: the explicit baseline (config, healthy run, roofline),
freshness as data (fit age and staleness, the probe in flight and the hang threshold,
the last error), exact per-length medians, buckets at the timeout, a redacted URL."""

from __future__ import annotations

import re
import time

import pytest

from tests.fakeserver import Reply, models_reply, sse_data, sse_done, sse_text
from tests.unit.test_exporter import _wait
from prefilltui.cli import main
from prefilltui.exporter.collector import families
from prefilltui.exporter.config import check, load_toml, target
from prefilltui.exporter.health import (Expected, explicit_baseline, hang_threshold,
                                        length_medians, roofline_expected, ttft_buckets)
from prefilltui.exporter.snapshot import TargetSnapshot
from prefilltui.exporter.target import TargetProber, window_health
from prefilltui.measure.runfile import RunWriter
from prefilltui.model.summary import analyze
from prefilltui.model.types import ProbeResult


def _cfg(url: str = "http://a", **keys):
    """A checked TargetConfig from TOML-style keys."""
    return check(target(url, **keys))


def _results(b: float = 1e-4, lengths=(64, 256, 1024, 2048), reps: int = 3) -> list[ProbeResult]:
    return [ProbeResult(seq=i, ok=True, requested_tokens=n, prompt_tokens=n,
                        ttft_s=0.02 + b * n * (1 + 0.01 * (i % 3 - 1)))
            for i, n in enumerate([n for _ in range(reps) for n in lengths])]


def _samples(snap: TargetSnapshot, now: float) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in families([snap], now=now):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


# ------------------------------------------------------------------ the TOML keys


def test_toml_baseline_and_freshness_keys(tmp_path):
    (tmp_path / "runs").mkdir()
    f = tmp_path / "t.toml"
    f.write_text('[defaults]\nhang_after = 20\n\n'
                 '[[target]]\nurl = "http://a"\nexpected_throughput = 18000\nstale_after = 90\n\n'
                 '[[target]]\nurl = "http://b"\nexpected_throughput = "roofline"\n\n'
                 '[[target]]\nurl = "http://c"\nbaseline_run = "runs/healthy.jsonl"\n')
    a, b, c = load_toml(str(f))
    assert (a.expected_throughput, a.stale_window_s, a.hang_after_s) == (18000.0, 90.0, 20.0)
    assert b.expected_throughput == "roofline" and b.stale_window_s == 4 * b.interval_s
    assert c.baseline_run == str(tmp_path / "runs" / "healthy.jsonl")  # next to the TOML file
    assert a.probe.timeout_s == 120.0  # the real default, as the histogram's last bucket


@pytest.mark.parametrize("body,words", [
    ('expected_throughput = 0', "expected_throughput must be"),
    ('expected_throughput = "fast"', "expected_throughput must be"),
    ('expected_throughput = 1000\nbaseline_run = "x.jsonl"', "not both"),
    ('hang_after = -1', "hang_after must be a positive"),
    ('stale_after = 0', "stale_after must be a positive"),
])
def test_toml_baseline_errors_name_the_field(tmp_path, body, words):
    f = tmp_path / "t.toml"
    f.write_text(f'[[target]]\nurl = "http://a"\n{body}\n')
    with pytest.raises(ValueError, match=re.escape(words)):
        load_toml(str(f))


# ------------------------------------------------------------------ explicit baselines


def test_baseline_run_gives_the_expected_throughput(tmp_path):
    run = tmp_path / "healthy.jsonl"
    w = RunWriter(run)
    for r in _results(b=1e-4):
        w.append(r)
    w.close()
    e = explicit_baseline(_cfg(name="gpu-a", baseline_run=str(run)))
    assert e is not None and e.source == "baseline_run" and abs(e.tokens_per_s / 1e4 - 1) < 0.02
    assert explicit_baseline(_cfg(expected_throughput=5e3)) == Expected(5e3, "config")
    assert explicit_baseline(_cfg(expected_throughput="roofline")) is None
    bad = tmp_path / "bad.jsonl"
    bad.write_text("")
    with pytest.raises(ValueError, match="target 'gpu-a': baseline_run .*bad.jsonl"):
        explicit_baseline(_cfg(name="gpu-a", baseline_run=str(bad)))


def test_exporter_refuses_a_baseline_run_without_a_fit(tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("")
    f = tmp_path / "t.toml"
    f.write_text('[[target]]\nurl = "http://127.0.0.1:9"\nname = "x"\nbaseline_run = "empty.jsonl"\n')
    rc = main(["exporter", "--config", str(f), "--listen", "127.0.0.1:0",
               "--run-dir", str(tmp_path / "runs")])
    assert rc == 2 and "target 'x': baseline_run" in capsys.readouterr().err


def test_roofline_expected_throughput_is_efficiency_times_peak_over_2p():
    cfg = _cfg(params=8e9, peak_tflops=989.0, efficiency=0.5, expected_throughput="roofline")
    h = window_health(_results(), None, cfg)
    assert h.fit is not None and roofline_expected(h) == pytest.approx(0.5 * 989e12 / 16e9)
    assert roofline_expected(window_health(_results(), None, _cfg())) is None
    assert roofline_expected(None) is None


# ------------------------------------------------------------------ freshness


_SUMMARY = analyze(_results(), None)


def _snap(**kw) -> TargetSnapshot:
    base = dict(target="t", model="m", server_kind="vllm", api="completions", interval_s=15.0,
                summary=_SUMMARY, fit_ts=1000.0, stale_after_s=60.0, hang_threshold_s=30.0,
                window_size=40)
    base.update(kw)
    return TargetSnapshot(**base)


def test_fit_age_and_staleness_are_taken_at_scrape_time():
    fresh = _samples(_snap(), now=1050.0)
    assert fresh["prefilltui_fit_age_seconds"][0][1] == 50.0
    assert fresh["prefilltui_fit_stale"][0][1] == 0.0
    assert fresh["prefilltui_fit_stale_after_seconds"][0][1] == 60.0
    assert fresh["prefilltui_fit_window_size"][0][1] == 40.0
    stale = _samples(_snap(), now=1061.0)
    assert stale["prefilltui_fit_stale"][0][1] == 1.0
    tps = stale["prefilltui_prefill_throughput_tokens_per_second"][0][1]
    assert abs(tps / 1e4 - 1) < 0.05  # still shown
    none = _samples(_snap(summary=None, fit_ts=None), now=1061.0)
    assert "prefilltui_fit_stale" not in none and "prefilltui_fit_age_seconds" not in none


def test_in_flight_expected_and_last_error_series():
    s = _samples(_snap(in_flight_since=1000.0, expected=Expected(2e4, "config"),
                       last_error=("http", 500)), now=1042.5)
    assert s["prefilltui_probe_in_flight_seconds"][0][1] == 42.5
    assert s["prefilltui_probe_hang_threshold_seconds"][0][1] == 30.0
    assert s["prefilltui_probe_timeout_seconds"][0][1] == 120.0
    (labels, v), = s["prefilltui_prefill_throughput_expected_tokens_per_second"]
    assert labels["source"] == "config" and v == 2e4
    (labels, v), = s["prefilltui_last_error_info"]
    assert (labels["error_kind"], labels["http_status"], v) == ("http", "500", 1.0)
    idle = _samples(_snap(), now=1042.5)
    assert idle["prefilltui_probe_in_flight_seconds"][0][1] == 0.0
    assert "prefilltui_prefill_throughput_expected_tokens_per_second" not in idle


def test_hang_threshold_is_hang_after_or_three_slowest_ttfts():
    cfg = _cfg(hang_after=30.0)
    assert hang_threshold(cfg, []) == 30.0
    assert hang_threshold(cfg, [ProbeResult(ok=True, ttft_s=15.0)]) == 45.0


def test_length_medians_are_exact_per_length():
    rs = [ProbeResult(ok=True, requested_tokens=n, ttft_s=t)
          for n, t in ((64, 0.03), (64, 0.05), (64, 0.04), (2048, 0.2), (2048, 0.3))]
    assert length_medians(rs) == ((64, 0.04), (2048, 0.25))
    s = _samples(_snap(length_medians_s=((64, 0.04), (2048, 0.25))), now=1001.0)
    assert [(lab["prompt_tokens"], v) for lab, v in s["prefilltui_ttft_window_median_seconds"]] == [
        ("64", 0.04), ("2048", 0.25)]


def test_buckets_end_at_the_targets_timeout():
    assert ttft_buckets(30.0)[-3:] == (10.0, 20.0, 30.0)
    assert ttft_buckets(120.0)[-3:] == (50.0, 100.0, 120.0)


def test_a_password_in_the_url_is_never_a_label():
    cfg = _cfg("http://user:s3cret@gpu-1:8000")
    assert cfg.label == "http://user:***@gpu-1:8000"
    p = TargetProber(cfg, run_dir="/nonexistent")  # not started: the snapshot alone
    text = repr(families([p.snapshot], now=1.0))
    assert "s3cret" not in text and "user:***@gpu-1" in text


# ------------------------------------------------------------------ a live target


def test_live_hang_then_timeout_then_stale_fit(fake_server, tmp_path):
    """A target that answers, then hangs: the probe in flight's age passes the hang
    threshold before the timeout; the timeout is the last error; with no success the
    fit goes stale.  Then it answers again: fresh, no probe in flight."""
    state = {"hang": False}

    def complete(req):
        if state["hang"]:
            return Reply.sse([(30.0, sse_text("x"))])
        words = len(req.json["prompt"].split())
        t = 0.004 + 40e-6 * words
        return Reply.sse([(t, sse_text("x")),
                          (t + 0.001, sse_data({"choices": [], "usage": {"prompt_tokens": words}})),
                          (t + 0.002, sse_done())])

    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": complete})
    cfg = _cfg(srv.base_url, name="h", lengths=(64, 512), interval=0.05, timeout=1.5,
               hang_after=0.3, stale_after=1.0, window=6, expected_throughput=25000.0)
    p = TargetProber(cfg, run_dir=tmp_path).start()
    try:
        assert _wait(lambda: p.snapshot.fit is not None)
        s = _samples(p.snapshot, now=time.time())
        assert s["prefilltui_fit_stale"][0][1] == 0.0
        assert s["prefilltui_prefill_throughput_expected_tokens_per_second"][0][0]["source"] == "config"
        state["hang"] = True
        assert _wait(lambda: p.snapshot.in_flight_since is not None
                     and time.time() - p.snapshot.in_flight_since > 0.5, timeout=10)
        s = _samples(p.snapshot, now=time.time())
        hung = s["prefilltui_probe_in_flight_seconds"][0][1]
        assert hung > s["prefilltui_probe_hang_threshold_seconds"][0][1] >= 0.3
        assert s["prefilltui_target_up"][0][1] == 1.0  # before the timeout, only the age says it
        assert _wait(lambda: p.snapshot.last_error == ("timeout", None), timeout=10)
        assert _wait(lambda: _samples(p.snapshot, now=time.time())["prefilltui_fit_stale"][0][1] == 1.0,
                     timeout=10)
        state["hang"] = False
        assert _wait(lambda: p.snapshot.up is True and _samples(
            p.snapshot, now=time.time())["prefilltui_fit_stale"][0][1] == 0.0, timeout=20)
    finally:
        p.stop(timeout=2)
