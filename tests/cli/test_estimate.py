"""`prefilltui estimate`: the lesson's back-of-envelope numbers through the CLI."""

from __future__ import annotations

import json

import pytest

from prefilltui.cli import main


def run_json(capsys, *argv):
    assert main(["estimate", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_llama3_8b_h100_2000_tokens(capsys):
    d = run_json(capsys, "--model", "llama-3-8b", "--gpu", "h100-sxm", "--tokens", "2000")
    for k in ("flops", "time_at_peak_s", "time_at_efficiency_s", "tokens_per_s",
              "arithmetic_intensity", "ridge_point", "attention_share"):
        assert d[k] is not None
    assert d["flops"] == pytest.approx(32e12, rel=0.05)
    assert d["linear_flops"] == pytest.approx(32.1e12, rel=0.01)
    assert d["time_at_peak_s"] == pytest.approx(0.032, rel=0.05)
    assert d["time_at_efficiency_s"] == pytest.approx(0.065, rel=0.05)
    assert d["tokens_per_s"] == pytest.approx(30000, rel=0.05)
    assert d["arithmetic_intensity"] == pytest.approx(1012, rel=0.002)
    assert d["ridge_point"] == pytest.approx(295, abs=1)
    assert d["attention_share"] == pytest.approx(0.033, abs=0.002)
    assert d["estimate"] is True


@pytest.mark.parametrize("tokens,ai", [(1, 1.0), (500, 402), (2000, 1012)])
def test_arithmetic_intensity(capsys, tokens, ai):
    d = run_json(capsys, "--model", "llama-3-8b", "--gpu", "h100-sxm", "--tokens", str(tokens))
    assert d["arithmetic_intensity"] == pytest.approx(ai, rel=0.002)
    assert d["bound"] == ("memory" if tokens < 295 else "compute")


def test_attention_at_32k_and_60k(capsys):
    d = run_json(capsys, "--model", "llama-3-8b", "--gpu", "h100-sxm", "--tokens", "32768")
    assert 0.45 <= d["attention_share"] <= 0.6
    assert 57000 <= d["attention_equal_tokens"] <= 62000
    d = run_json(capsys, "--model", "llama-3-8b", "--tokens", "60000")
    assert d["attention_share"] == pytest.approx(1.0, abs=0.05)


def test_efficiency_and_text(capsys):
    d = run_json(capsys, "--model", "llama-3-8b", "--gpu", "h100-sxm", "--efficiency", "0.25")
    assert d["time_at_efficiency_s"] == pytest.approx(4 * d["time_at_peak_s"])
    assert main(["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm"]) == 0
    out = capsys.readouterr().out
    assert "estimate" in out and "ms at peak" in out and "295" in out and "compute-bound" in out


def test_no_gpu_and_flags(capsys):
    d = run_json(capsys, "--params", "1e9", "--layers", "16", "--hidden", "2048", "--tokens", "1000")
    assert d["flops"] == pytest.approx(2e12 + 2 * 16 * 2048 * 1e6)
    assert d["time_at_peak_s"] is None and d["ridge_point"] is None
    d = run_json(capsys, "--model", "smollm2-135m", "--peak-tflops", "1.0", "--tokens", "1000")
    assert d["time_at_peak_s"] == pytest.approx(d["flops"] / 1e12)
    assert main(["estimate", "--model", "smollm2-135m"]) == 0
    assert "--peak-tflops" in capsys.readouterr().out


def test_errors_are_one_line_exit_2(capsys):
    assert main(["estimate", "--model", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("prefilltui: unknown model") and err.count("\n") == 1
    assert main(["estimate", "--model", "llama-3-8b", "--gpu", "no-such-gpu"]) == 2
    assert "unknown GPU" in capsys.readouterr().err
    assert main(["estimate"]) == 2
    assert main(["estimate", "--model-config", "/nonexistent.json"]) == 2
    assert "cannot read" in capsys.readouterr().err


def _text(capsys, *argv) -> str:
    assert main(["estimate", *argv]) == 0
    return capsys.readouterr().out


def test_estimate_says_what_its_question_marks_mean(capsys):
    """"3.35 TB/s (?)" left the newcomer guessing: the hardware line says why its
    figures are in doubt -- a GPU matched by its family's name (which variant's figures
    were taken, and the names that would pick one), or figures the catalog's sources
    leave uncertain (which) -- and a figure in no doubt carries no mark."""
    out = _text(capsys, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100")
    hw = next(line for line in out.splitlines() if "hardware:" in line)
    assert "(?)" not in out, out
    assert "3.35 TB/s (? matched by family: the H100 SXM's figures, a guess)" in hw, hw
    assert "--gpu h100-sxm, h100-pcie or h100-nvl names the exact one" in out  # the names that pick a variant
    hw = next(line for line in _text(capsys, "--model", "llama-3-8b", "--gpu", "b200")
              .splitlines() if "hardware:" in line)
    assert "(? uncertain in the sources: bandwidth, memory)" in hw, hw
    out = _text(capsys, "--model", "llama-3-8b", "--gpu", "h100-sxm")
    assert "?" not in out.splitlines()[1], out  # exact: no doubt, no mark
    first = _text(capsys, "--model", "deepseek-v3", "--gpu", "h100-sxm").splitlines()[0]
    assert "(?)" not in first and "(? uncertain: attention width)" in first, first
