"""Roofline arithmetic: the lesson's numbers (shared/reference/hardware-and-models.md)."""

from __future__ import annotations

import numpy as np
import pytest

from prefilltui.model.roofline import flops, arithmetic as roofline
from prefilltui.model.roofline import lookup_model
from prefilltui.model.roofline import lookup_gpu

LLAMA = lookup_model("llama-3-8b")
H100 = lookup_gpu("h100-sxm").for_dtype("bf16")


def est(tokens, eff=0.5):
    return roofline.estimate(LLAMA.params, LLAMA.layers, LLAMA.d_attn, tokens, hidden=LLAMA.hidden,
                             peak_flops=H100.peak_flops, bandwidth_bytes_s=H100.bandwidth_bytes_s,
                             efficiency=eff)


def test_llama3_8b_2000_tokens_on_h100_sxm():
    e = est(2000)
    assert e.linear_flops == pytest.approx(32.12e12, rel=1e-3)  # the lesson's "32 TFLOP"
    assert e.flops == pytest.approx(32e12, rel=0.05)  # + 3 % attention
    assert e.linear_time_at_peak_s == pytest.approx(0.032, rel=0.03)  # 32 ms at peak
    assert e.time_at_peak_s == pytest.approx(0.032, rel=0.05)
    assert e.linear_time_at_efficiency_s == pytest.approx(0.065, rel=0.01)  # 65 ms at 50 %
    assert e.time_at_efficiency_s == pytest.approx(0.065, rel=0.05)
    assert e.tokens_per_s == pytest.approx(30_000, rel=0.05)  # ~30k prompt tok/s
    assert e.ridge_point == pytest.approx(295, abs=1)
    assert e.bound == "compute"
    assert e.estimate is True


@pytest.mark.parametrize("n,ai", [(1, 1.0), (500, 402), (2000, 1012)])
def test_arithmetic_intensity_d4096(n, ai):
    assert roofline.arithmetic_intensity(n, 4096) == pytest.approx(ai, rel=0.002)


def test_arithmetic_intensity_vectorised_and_memory_bound():
    v = roofline.arithmetic_intensity(np.array([1, 500, 2000]), 4096)
    assert v.shape == (3,)
    assert est(100).bound == "memory"


def test_ridge_points_of_the_reference_table():
    for key, ridge in [("h100-sxm", 295), ("h100-pcie", 378), ("h200", 206), ("a100-sxm-80gb", 153),
                       ("l4", 403), ("l40s", 419), ("mi300x", 247), ("a10", 208)]:
        hw = lookup_gpu(key).for_dtype("bf16")
        assert hw.ridge_point == pytest.approx(ridge, abs=1.5), key


def test_attention_share():
    P, L, d = LLAMA.params, LLAMA.layers, LLAMA.d_attn
    assert roofline.attention_share(2000, P, L, d) == pytest.approx(0.033, abs=0.002)
    assert 0.45 <= roofline.attention_share(32768, P, L, d) <= 0.6  # "about half" at 32k
    assert 57_000 <= roofline.attention_equal_tokens(P, L, d) <= 62_000  # equal near 60k
    assert est(2000).attention_share == pytest.approx(0.033, abs=0.002)
    assert roofline.prefill_flops(2000, P, L, d) == pytest.approx(est(2000).flops)


def test_mfu_and_achieved():
    b = 1 / 30000  # 30k tok/s
    f = flops.linear_coefficient(LLAMA)  # matmul FLOPs per token, not 2·P
    assert f == pytest.approx(2 * 6.979e9, rel=1e-3)
    assert roofline.achieved_flops(b, f) == pytest.approx(f * 30000)
    assert roofline.mfu(b, f, 989.4e12) == pytest.approx(f * 30000 / 989.4e12)
    assert roofline.mfu(b, f, None) is None
    assert roofline.mfu(-1.0, f, 1e15) is None
    m = roofline.mfu_with_attention((0.0, b, 0.0), 2000, LLAMA, 989.4e12)
    assert m > roofline.mfu(b, f, 989.4e12)


def test_verdict_names_the_count():
    _lv, text = roofline.verdict(0.5, achieved=1e14, throughput="1,000 prompt tok/s")
    assert text.startswith("MFU (matmul FLOPs) 50%")


def test_exact_estimate_beside_the_quick_one():
    x = roofline.exact_estimate(LLAMA, 2000, peak_flops=H100.peak_flops, quick_flops=est(2000).flops)
    assert x.flops == pytest.approx(28.97e12, rel=1e-3) and x.basis == "shape"
    assert x.quick_over_exact == pytest.approx(1.145, abs=0.001)
    assert x.time_at_peak_s == pytest.approx(0.0293, rel=0.01)
    assert x.attention_convention == "causal" and x.to_json()["terms"]["lm_head"] == 2 * 4096 * 128256


@pytest.mark.parametrize("mfu,level", [(0.5, "healthy"), (0.40, "healthy"), (0.3, "below"),
                                       (0.1, "wrong"), (1.5, "impossible"), (None, "unknown-peak")])
def test_verdict_levels(mfu, level):
    lv, text = roofline.verdict(mfu, achieved=1e14, throughput="1,000 prompt tok/s")
    assert lv == level and text
    if level == "wrong":
        assert "memory-bound" in text and "dtype" in text and "offload" in text and "queueing" in text
    if level == "unknown-peak":
        assert "--peak-tflops" in text


def test_verdict_short_prompts_are_memory_bound():
    lv, text = roofline.verdict(0.1, max_tokens=200, ridge=295, hidden=4096)
    assert lv == "short-prompts" and "2k" in text


def test_estimate_rejects_bad_input():
    with pytest.raises(ValueError):
        roofline.estimate(0, 32, 4096, 2000)
