"""Chunked prefill told from the n² curve: steps are claimed only when a step model
beats the quadratic fit by the partial F test (Bonferroni-corrected when searched)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from prefilltui.model.diagnosis import chunking as C
from prefilltui.model.types import ServerInfo

#: (server-counted prompt tokens, TTFT s) of the demo sweep against the real vLLM
#: 0.32.0 (chunk budget 2,048, so no probe was chunked): the old detector said
#: "chunked prefill: TTFT steps up ~49 ms every 320 tokens" on these.
VLLM_DEMO = [(552, 0.28183), (4, 0.05357), (47, 0.07046), (1025, 0.55784), (161, 0.10856),
             (87, 0.07639), (7, 0.05252), (14, 0.05445), (25, 0.06337), (300, 0.16282)]


def curve(*, chunk=None, step=0.0, a=0.049, b=3.2e-4, c=1.7e-7, noise=0.03, n=40, hi=4000,
          seed=1):
    """TTFT = a + b n + c n² (+ step per chunk), relative noise; c as measured on vLLM
    (171 ms per (1k tokens)²)."""
    rng = random.Random(seed)
    x = [rng.randint(4, hi) for _ in range(n)]
    y = [(a + b * v + c * v * v + (step * np.ceil(v / chunk) if chunk else 0.0))
         * (1 + rng.gauss(0, noise)) for v in x]
    return x, y


def test_the_real_vllm_curve_is_not_steps():
    x, y = zip(*VLLM_DEMO)
    info = C.detect_chunking(x=x, y=y)
    assert info.source is None and info.chunk_tokens is None
    assert "no TTFT steps beyond the n² curve" in info.line
    assert "Bonferroni over" in info.line and "alpha 0.01" in info.line


@pytest.mark.parametrize("seed", range(20))
def test_a_smooth_n2_curve_never_reads_as_steps(seed):
    x, y = curve(seed=seed)
    assert C.find_steps(x, y) is None


@pytest.mark.parametrize("chunk", [256, 512, 1024])
def test_steps_on_top_of_the_n2_curve_are_found(chunk):
    x, y = curve(chunk=chunk, step=0.06, noise=0.01, n=80)
    t = C.step_test(x, y)
    assert t is not None and t.significant and t.chunk_tokens == chunk
    assert t.step_s == pytest.approx(0.06, rel=0.25)
    info = C.detect_chunking(x=x, y=y)
    assert info.source == "detected" and info.chunk_tokens == chunk
    assert info.p_value is not None and info.p_value < C.ALPHA


def test_a_stated_budget_is_tested_alone():
    x, y = curve(chunk=512, step=0.06, noise=0.01, n=60)
    info = C.detect_chunking(x=x, y=y, server_info=ServerInfo(kind="vllm",
                                                              max_num_batched_tokens=512))
    assert info.source == "server" and info.chunk_tokens == 512 and info.step_s
    assert "vLLM max_num_batched_tokens 512" in info.line and "per chunk" in info.line
    assert "Bonferroni" not in info.test  # one size tested: no correction
    flat = C.detect_chunking(*(), x=curve(n=60)[0], y=curve(n=60)[1],
                             server_info=ServerInfo(kind="vllm", max_num_batched_tokens=512))
    assert flat.source == "server" and flat.step_s is None
    assert "no TTFT step beyond the n² curve" in flat.line


def test_a_budget_above_every_probe_says_so():
    x, y = zip(*VLLM_DEMO)
    info = C.detect_chunking(x=x, y=y, server_info=ServerInfo(kind="vllm",
                                                              max_num_batched_tokens=2048))
    assert info.chunk_tokens == 2048 and info.boundaries == ()
    assert "every measured prompt fits in one chunk" in info.line


def test_queueing_spikes_do_not_make_steps():
    x, y = curve(seed=3, n=40)
    y = list(y)
    for i in (3, 17, 29):
        y[i] *= 4  # another tenant's long prompt ahead of ours
    assert C.find_steps(x, y) is None


def test_f_pvalue_matches_t_squared():
    # F(1, 10) = t(10)²: t = 2.228 is the two-sided 5 % point
    assert C._f_pvalue(2.228 ** 2, 10) == pytest.approx(0.05, abs=1e-3)
    assert C._f_pvalue(0.0, 10) == 1.0 and C._f_pvalue(float("inf"), 10) == 0.0


def test_repeated_lengths_are_tested_on_their_medians():
    """81 real probes of vLLM at budget 128 on a loaded machine (27 exact lengths either
    side of and between the boundaries, three rounds): all probes together leave the
    steps unproven (p 0.023), the per-length medians show them (p ~4e-05, ~47 ms)."""
    import json
    from pathlib import Path

    fix = json.loads((Path(__file__).parent / "fixtures" / "vllm_budget128_under_load.json")
                     .read_text())
    x, y = zip(*fix["points"])
    assert not C.step_test(x, y, [128], min_steps=1).significant
    c = C.detect_chunking(x=x, y=y, server_info=ServerInfo(kind="vllm",
                                                           max_num_batched_tokens=128))
    assert c.source == "server" and c.step_s == pytest.approx(0.047, abs=0.01), c.line
    assert c.p_value < 1e-3
    assert "over the medians of 28 lengths (81 probes)" in c.line  # 320 once counted 319


def test_medians_group_by_the_requested_length():
    from prefilltui.model.types import ProbeResult

    rs = [ProbeResult(ok=True, requested_tokens=n, prompt_tokens=n + d, ttft_s=0.1 + n * 1e-3)
          for n in (100, 200, 300, 400, 500, 600, 700, 800) for d in (-1, 0, 1)]
    xs, ys, probes = C.per_length_medians([r.tokens for r in rs], [r.ttft_s for r in rs],
                                          [r.requested_tokens for r in rs])
    assert xs == [100, 200, 300, 400, 500, 600, 700, 800] and probes == 24
