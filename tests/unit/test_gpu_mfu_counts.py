"""The GPU device check's MFU table (tests/bench/gpu/mfu_counts.py), on recorded inputs:
last round's H200 fit and the PyTorch counter fixture."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from prefilltui.model.roofline import flops
from prefilltui.model.roofline import lookup_model
from tests.bench.gpu.mfu_counts import counter_secant, main, rows

FIXTURE = Path(__file__).parent / "fixtures" / "flop_counter.json"
#: last round's H200 run (tests/bench/gpu/README.md): robust fit 29.3 µs/token over
#: 1,024-8,192 prompt tokens, Llama-3.1-8B shape, H200 dense BF16 peak 989.4 TFLOP/s
H200 = {"fit": {"slope_s_per_token": 29.3e-6, "x_min": 1024, "x_max": 8192},
        "roofline": {"peak_flops": 989.4e12}}


def test_the_h200_run_under_each_count():
    got = {name: mfu for name, _f, mfu in rows(H200, "llama-3-8b", None)}
    assert got["quick 2·P"] == pytest.approx(0.554, abs=5e-4)
    assert got["matmul, linear layers only"] == pytest.approx(0.482, abs=5e-4)
    assert got["matmul, causal attention (shown)"] == pytest.approx(0.565, abs=5e-4)
    assert got["matmul, full-square attention"] > got["matmul, causal attention (shown)"]


def test_the_counters_secant_is_the_full_square_count():
    counts = json.loads(FIXTURE.read_text())["shapes"]["llama-3-8b-2layers"]["counts"]
    two_layers = replace(lookup_model("llama-3-8b"), layers=2, params=None)
    assert counter_secant(counts, 1024, 4096) == pytest.approx(
        flops.marginal_flops(two_layers, 1024, 4096, 0, "full"), rel=1e-9)
    with pytest.raises(ValueError):
        counter_secant({"16": {"total": 1}}, 16, 64)


def test_the_script_prints_every_count(tmp_path, capsys):
    s = tmp_path / "summary.json"
    s.write_text(json.dumps(H200))
    assert main([str(s)]) == 0
    out = capsys.readouterr().out
    assert "MFU  56.5%" in out and "quick 2·P" in out and "29.30 µs/token" in out
