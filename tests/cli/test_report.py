"""`prefilltui report RUN.jsonl` against small run files written from ProbeResult.to_json()."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prefilltui.cli import main
from prefilltui.core.types import ProbeResult


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
    assert "drift" in d and d["drift"] is None  # same run: no drift


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
