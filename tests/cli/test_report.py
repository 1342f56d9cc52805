"""`prefilltui report RUN.jsonl` against small run files written from ProbeResult.to_json()."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prefilltui.cli import main
from prefilltui.model.types import ProbeResult


def write_run(path, n=30, ok=True, model="SmolLM2-135M-Instruct.Q4_1.gguf", junk=False):
    rng = np.random.default_rng(1)
    with open(path, "w") as f:
        for i in range(n):
            x = [64, 128, 256, 512, 1024, 2048][i % 6]
            r = ProbeResult(seq=i, requested_tokens=x, prompt_tokens=x if ok else None,
                            ttft_s=(0.01 + x / 3000) * (1 + 0.03 * rng.standard_normal()) if ok else None,
                            ok=ok, error_kind=None if ok else "connect", model=model, warmup=i == 0)
            f.write(json.dumps(r.to_json()) + "\n")
        if junk:
            f.write("{not json\n")
    return path


def test_report_json(tmp_path, capsys):
    p = write_run(tmp_path / "run.jsonl", junk=True)
    assert main(["report", str(p), "--format", "json"]) == 0
    cap = capsys.readouterr()
    d = json.loads(cap.out)
    assert d["fit"]["prefill_tokens_per_s"] == pytest.approx(3000, rel=0.05)
    assert d["fit"]["n"] >= 25 and d["probes"]["warmup"] == 1
    assert d["model"]["key"] == "smollm2-135m"
    assert d["verdict"]["level"] == "unknown-peak"
    assert "line 31" in cap.err  # the bad line is reported, not fatal


def test_report_text_with_plot(tmp_path, capsys):
    p = write_run(tmp_path / "run.jsonl")
    assert main(["report", str(p), "--peak-tflops", "1.5"]) == 0
    out = capsys.readouterr().out
    assert "prompt tok/s" in out and "MFU" in out and "estimate" in out
    assert "TTFT vs prompt length" in out and "prompt tokens" in out  # the plotext plot
    assert "\x1b[" not in out  # no colour codes when not a terminal
    assert main(["report", str(p), "--no-plot"]) == 0
    assert "TTFT vs prompt length" not in capsys.readouterr().out


def test_report_baseline(tmp_path, capsys):
    p = write_run(tmp_path / "run.jsonl")
    assert main(["report", str(p), "--baseline", str(p), "--format", "json", "--no-plot"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["diagnosis"]["baseline_used"] and d["diagnosis"]["drift"] is None  # same run


def test_report_errors(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("prefilltui: cannot read") and err.count("\n") == 1
    (tmp_path / "empty.jsonl").write_text("")
    assert main(["report", str(tmp_path / "empty.jsonl")]) == 1
    assert "no probe results" in capsys.readouterr().err
    p = write_run(tmp_path / "failed.jsonl", ok=False)
    assert main(["report", str(p), "--format", "json"]) == 3
    assert json.loads(capsys.readouterr().out)["verdict"]["level"] == "failed"


def test_report_reads_the_run_as_the_sweep_saw_it(tmp_path, capsys):
    """A run file's session line carries the server's model shape and the GPU names
    telemetry saw, so `report` resolves the same peak and params as the sweep (before
    it, report of an H200 run said "unknown peak")."""
    from prefilltui.measure.runfile import RunWriter
    from prefilltui.measure.runfile import read_run, read_session

    path = tmp_path / "run.jsonl"
    w = RunWriter(path)
    w.set_session(gpu_names=["NVIDIA H200"])
    w.set_session(server={"kind": "llama.cpp", "model": "my-8b.gguf", "params": 7.0e9,
                          "hidden": 4096, "layers": 32, "context_tokens": 16384})
    rng = np.random.default_rng(2)
    for i in range(30):
        x = [1024, 2048, 4096, 8192][i % 4]
        w.append(ProbeResult(seq=i, requested_tokens=x, prompt_tokens=x, ok=True,
                             ttft_s=(0.008 + x * 29.3e-6) * (1 + 0.01 * rng.standard_normal()),
                             model="my-8b.gguf"))
    w.close()
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["record"] == "session" and len(lines) == 31
    results, problems = read_run(path)
    assert len(results) == 30 and problems == []
    assert read_session(path)["gpu_names"] == ["NVIDIA H200"]
    assert main(["report", str(path), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["hardware"]["name"].startswith("H200")
    assert d["model"]["params"] == 7.0e9  # the server's count, as the sweep used
    # no catalog shape for "my-8b" and no vocabulary: the linear part is 2·P per token
    # ("quick" basis) plus causal attention's secant over 1,024-8,192 tokens, 2·L·d·(1+lo+hi):
    # (2·7e9 + 2·32·4096·9217) / (29.3e-6 s · 989.4e12 FLOP/s) = 56.8 %
    assert d["roofline"]["flop_basis"] == "quick"
    assert d["roofline"]["mfu"] == pytest.approx(0.568, rel=0.03)
    assert d["verdict"]["level"] != "unknown-peak"


def test_a_run_without_probes_leaves_no_file_even_with_session_facts(tmp_path):
    from prefilltui.measure.runfile import RunWriter

    w = RunWriter(tmp_path / "empty.jsonl")
    w.set_session(gpu_names=["NVIDIA H200"])
    w.close()
    assert not (tmp_path / "empty.jsonl").exists()


def _axis_labels(plot: str) -> tuple[list[str], list[str]]:
    """The y tick labels (left of ┤) and the x tick labels (the row under └┬)."""
    import re

    rows = plot.splitlines()
    ys = [m.group(1) for r in rows if (m := re.match(r"^\s*(\S+)┤", r))]
    axis = next(i for i, r in enumerate(rows) if "└" in r)
    return ys, rows[axis + 1].split()


def test_report_plot_ticks_are_the_dashboards_round_ones():
    """The text plot's ticks were plotext's own, unrounded ("9383.6┤", "514.2"): now
    the dashboard's nice ticks and labels, axes from 0 (as its plot)."""
    from prefilltui.commands.report import render_plot
    from prefilltui.model.spec import AnalysisOptions
    from prefilltui.model.summary import analyze
    from prefilltui.render.ticks import nice_ticks, tick_label

    rng = np.random.default_rng(2)
    results = [ProbeResult(seq=i, requested_tokens=x, prompt_tokens=x,
                           ttft_s=(0.015 + x * 2.4e-3) * (1 + 0.4 * abs(rng.standard_normal())),
                           ok=True)
               for i, x in enumerate([4, 25, 87, 299, 553, 1024, 2045] * 3)]
    summary = analyze(results, None, AnalysisOptions())
    plot = render_plot(results, summary, width=80, height=24)
    ys, xs = _axis_labels(plot)
    assert ys and xs, plot
    # the dashboard's labels of the dashboard's ticks: round steps from the origin
    assert xs == [tick_label(v) for v in nice_ticks(2045 * 1.05, 80 // 9)], xs
    assert xs == ["0", "500", "1k", "1.5k", "2k"] and ys == ["6k", "4k", "2k", "0"], (xs, ys)
    assert "." not in " ".join(label for label in ys + xs if not label.endswith("k"))
