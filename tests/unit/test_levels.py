"""The load-level table (model/load/levels.py), the ITL histogram delta (model/metrics.py),
load lines in the run file, and report on a run with load: pure, no server."""

from __future__ import annotations

import json

import pytest

from prefilltui.cli import main
from prefilltui.measure.runfile import LOAD_RECORD, RunWriter, record_of_trace
from prefilltui.measure.runfile import read_load, read_run
from prefilltui.model.load.levels import level_table, level_view
from prefilltui.render.load_text import format_levels
from prefilltui.model.metrics import delta, parse_metrics
from prefilltui.model.load import DecodeTrace
from prefilltui.model.types import ProbeResult

LENGTHS = (100, 500, 1000)


def level_probes(level, *, queue=0.0, extra=0.0, t0=0.0):
    out = []
    for i, n in enumerate(LENGTHS * 2):
        ttft = 0.02 + 0.0005 * n + queue + extra
        out.append(ProbeResult(seq=i, requested_tokens=n, prompt_tokens=n, ok=True, ttft_s=ttft,
                               t_send=t0 + i, t_end=t0 + i + ttft, queue_s=queue,
                               server_prefill_s=0.0005 * n + extra, overhead_s=0.02,
                               load_kind="decode", load_level=float(level),
                               decode_stall_s=0.1 if level else None,
                               decode_excess_s=0.4 if level else None))
    return out


def test_levels_knee_and_their_own_fits():
    rs = level_probes(0) + level_probes(2, queue=0.05, t0=100) + level_probes(8, queue=1.5, t0=200)
    t = level_table(rs, [DecodeTrace(0, "decode", 2.0, 99.0, tuple(100 + 0.02 * i for i in range(300)))])
    assert [r.level for r in t.rows] == [0.0, 2.0, 8.0]
    assert t.knee == 8.0 and t.knee_line.startswith("queueing takes over at 8 decode streams: queue 1,500 ms")
    for r in t.rows:  # the queue moves TTFT up, never the level's own slope
        assert r.throughput_tok_s == pytest.approx(2000, rel=1e-6)
    assert t.rows[1].itl_p50_s == pytest.approx(0.02) and t.rows[0].itl_p50_s is None
    assert t.rows[2].stall_s == 0.1 and t.rows[2].stall_tokens == 1000
    assert t.rows[2].wait_s == pytest.approx(1.5)
    text = "\n".join(format_levels(t))
    assert "queueing takes over at 8" in text and "2,000 ±0%" in text
    # the probes under load never enter the idle fit; their level view does
    assert not any(r.fit_eligible for r in rs if r.load_level)
    assert all(r.fit_eligible for r in level_view(rs, 8.0))


def test_no_queue_time_uses_the_wait_above_the_idle_fit():
    rs = level_probes(0)
    loaded = level_probes(3, extra=0.0, t0=50)
    for r in loaded:
        r.queue_s, r.ttft_s = None, r.ttft_s + 2.0
    t = level_table(rs + loaded)
    assert t.rows[1].queue_s is None and t.rows[1].wait_s == pytest.approx(2.0, abs=1e-6)
    assert t.knee == 3.0 and "waiting 2,000 ms above the idle TTFT" in t.knee_line


def test_a_run_without_load_has_no_table():
    assert level_table([ProbeResult(requested_tokens=8, ok=True, ttft_s=0.1)]) is None


ITL = """# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{{le="0.05",model_name="m"}} {a}
vllm:inter_token_latency_seconds_bucket{{le="0.5",model_name="m"}} {b}
vllm:inter_token_latency_seconds_bucket{{le="2.5",model_name="m"}} {c}
vllm:inter_token_latency_seconds_bucket{{le="+Inf",model_name="m"}} {c}
vllm:inter_token_latency_seconds_sum{{model_name="m"}} {s}
vllm:inter_token_latency_seconds_count{{model_name="m"}} {c}
"""


def test_itl_histogram_delta_gives_the_longest_bucket_and_the_mean():
    before = parse_metrics(ITL.format(a=10, b=10, c=10, s=0.3), "vllm")
    after = parse_metrics(ITL.format(a=19, b=19, c=20, s=1.8), "vllm")
    d = delta(before, after)
    assert d.longest("itl") == 2.5  # one gap in (0.5, 2.5]
    assert d.mean("itl") == pytest.approx(0.15)
    quiet = delta(before, parse_metrics(ITL.format(a=15, b=15, c=15, s=0.4), "vllm"))
    assert quiet.longest("itl") == 0.05
    assert delta(before, before).longest("itl") is None


def test_load_lines_round_trip_and_are_not_probes(tmp_path):
    p = tmp_path / "run.jsonl"
    tr = DecodeTrace(1, "decode", 2.0, t_send=100.0, arrivals=(100.05, 100.1, 100.9),
                     prompt_tokens=16, ended=True)
    with RunWriter(p) as w:
        w.set_session(load={"kind": "decode", "level": 2.0})
        w.append_record(LOAD_RECORD, record_of_trace(tr))
        w.append(ProbeResult(seq=1, requested_tokens=8, ok=True, ttft_s=0.1))
        w.append_record(LOAD_RECORD, {"kind": "decode", "t_send": 1.0, "arrivals": [0.2, 0.1]})
    results, problems = read_run(p)
    assert len(results) == 1 and not problems
    traces, bad = read_load(p)
    assert traces == [tr] and len(bad) == 1 and "ascending" in bad[0]


def test_report_on_a_level_run(tmp_path, capsys):
    p = tmp_path / "run.jsonl"
    with RunWriter(p) as w:
        w.set_session(load={"kind": "decode", "level": 8.0, "prompt_tokens": 16,
                            "output_tokens": 1024, "max_requests": 5000, "max_s": 3600.0})
        for r in level_probes(0) + level_probes(2, queue=0.05, t0=100) + level_probes(8, queue=1.5, t0=200):
            w.append(r)
    svg = tmp_path / "fig.svg"
    assert main(["report", str(p), "--no-plot", "--svg", str(svg)]) == 0
    out = capsys.readouterr().out
    assert "background load: decode:8 (0 requests, 0 tokens)" in out
    assert "queueing takes over at 8 decode streams" in out
    assert "why is TTFT high? queueing: queue 1,500 ms" in out
    load_svg = (tmp_path / "fig-load.svg").read_text()
    assert "<svg" in load_svg and "knee" in load_svg
    assert main(["report", str(p), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["load"]["levels"]["knee"] == 8.0 and d["ttft_verdict"]["cause"] == "queueing"
    assert d["fit"]["n"] == 6  # the idle level alone
