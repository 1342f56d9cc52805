"""analyze() / format_summary(): the run summary shared by sweep, report and the TUI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prefilltui.model import units
from prefilltui.model.roofline import flops
from prefilltui.model.summary import analyze
from prefilltui.model.roofline import lookup_model
from prefilltui.model.fit import RunningFit
from prefilltui.model.spec import AnalysisOptions, RooflineSpec, read_model_config
from prefilltui.model.types import ProbeResult, ServerInfo
from prefilltui.render.text import format_summary

LENGTHS = [128, 256, 512, 1024, 2048, 4096, 8192]


def run(n=40, a=0.03, b=1 / 25000, c=0.0, seed=0, lengths=LENGTHS, model=None):
    rng = np.random.default_rng(seed)
    out = [ProbeResult(seq=0, requested_tokens=64, prompt_tokens=64, ttft_s=1.0, ok=True, warmup=True)]
    for i in range(n):
        x = lengths[i % len(lengths)]
        y = (a + b * x + c * x * x) * (1 + 0.03 * rng.standard_normal())
        out.append(ProbeResult(seq=i + 1, requested_tokens=x, prompt_tokens=x, ttft_s=float(y),
                               ok=True, model=model))
    out.append(ProbeResult(seq=n + 1, requested_tokens=100, ok=False, error_kind="timeout"))
    out.append(ProbeResult(seq=n + 2, requested_tokens=100, prompt_tokens=100, cached_tokens=90,
                           ttft_s=0.001, ok=True))
    return out


def test_too_few_points_gives_null_fit():
    d = analyze(run(n=2), None, None)
    j = d.to_json()
    json.dumps(j, allow_nan=False)
    assert d.fit is None and j["fit"] is None  # one shape: no fit is null, not a dict of nulls
    assert d.verdict.level == "insufficient"
    assert "Too few" in format_summary(d)


def test_all_failed():
    d = analyze([ProbeResult(ok=False, error_kind="connect")] * 3, None, None)
    assert d.verdict.level == "failed"
    assert d.probes.errors == {"connect": 3}


def test_gpu_run_with_mfu_and_verdict():
    opts = AnalysisOptions(fit="robust", window=20, roofline=RooflineSpec(
        gpu="h100-sxm", model="llama-3-8b", efficiency=0.5, dtype="bf16"))
    d = analyze(run(b=1 / 40000), ServerInfo(model="x"), opts)
    json.dumps(d.to_json(), allow_nan=False)
    p = d.probes
    assert (p.total, p.failed, p.warmup, p.cache_hits, p.fit_eligible) == (43, 1, 1, 1, 40)
    f = d.fit
    assert f.method == "robust" and f.n <= 40
    assert f.prefill_tokens_per_s == pytest.approx(40000, rel=0.03)
    lo, hi = f.prefill_tokens_per_s_ci
    assert lo < f.prefill_tokens_per_s < hi
    assert d.ols.method == "ols" and d.robust.method == "robust"
    assert d.window.size == 20 and d.window.n == 20
    r = d.roofline
    assert r.estimate is True
    # the matmul FLOPs one more token costs over the fitted 128-8192 tokens, not 2·P
    f_tok = flops.marginal_flops(lookup_model("llama-3-8b"), 128, 8192)
    assert r.flops_per_token == pytest.approx(f_tok) and r.flop_basis == "shape"
    assert r.mfu == pytest.approx(f_tok * 40000 / 989.4e12, rel=0.03)
    assert r.mfu_label == "MFU (matmul FLOPs)" and r.attention_convention == "causal"
    assert r.mfu_ci[0] < r.mfu < r.mfu_ci[1]
    assert d.verdict.level == "healthy"  # 66 % of dense peak
    text = format_summary(d)
    assert "estimate" in text and "MFU (matmul FLOPs)" in text and "ms" in text and "95%" in text
    assert "2·P" not in text  # the quick figure is only in `estimate`


def test_cpu_run_says_peak_unknown():
    si = ServerInfo(model="/x/SmolLM2-135M-Instruct.Q4_1.gguf", params=134515008, hidden=576, layers=30)
    d = analyze(run(b=1 / 3000), si, None)
    assert d.verdict.level == "unknown-peak"
    assert "--peak-tflops" in d.verdict.text
    # the server's count matches the catalog shape: the shape is counted term by term
    f_tok = flops.marginal_flops(lookup_model("smollm2-135m"), 128, 8192)
    assert d.roofline.flop_basis == "shape"
    assert d.roofline.achieved_flops == pytest.approx(f_tok * 3000, rel=0.05)
    assert d.roofline.mfu is None
    d2 = analyze(run(b=1 / 3000), si, AnalysisOptions(roofline=RooflineSpec(peak_tflops=2.0)))
    assert d2.roofline.mfu == pytest.approx(f_tok * 3000 / 2e12, rel=0.05)
    # a parameter count the shape does not match (another model): P less embeddings
    si3 = ServerInfo(model="/x/SmolLM2-135M-Instruct.Q4_1.gguf", params=200e6, hidden=576, layers=30)
    r3 = analyze(run(b=1 / 3000), si3, None).roofline
    assert r3.flop_basis == "params"
    lin = 2 * (200e6 - 49152 * 576)
    assert r3.flops_per_token == pytest.approx(lin + 2 * 30 * 576 * (1 + 128 + 8192))


def test_unknown_model_still_gives_throughput():
    d = analyze(run(), ServerInfo(model="mystery-model"), None)
    assert d.roofline is None
    assert d.verdict.level == "unknown-model" and "--params" in d.verdict.text


def test_quadratic_compared_with_attention_expectation():
    smol = lookup_model("smollm2-135m")
    b = 1 / 4000
    # attention at the same achieved FLOP/s as the linear term (matmul count)
    c = flops.quadratic_coefficient(smol) / (flops.linear_coefficient(smol) / b)
    lengths = [64, 128, 256, 512, 1024, 2048, 4096, 8192]
    d = analyze(run(n=64, a=0.01, b=b, c=c, lengths=lengths), ServerInfo(model="SmolLM2-135M"), None)
    assert d.quadratic.applies
    assert d.roofline.slope_source.startswith("quadratic")
    assert d.roofline.c_ratio == pytest.approx(1.0, rel=0.15)
    assert "attention expects" in format_summary(d)


def test_verdict_pairs_the_flops_with_the_throughput_of_their_own_slope():
    """TTFT curves up: FLOP/s and MFU come from the quadratic's linear term (docs/flops.md:
    F' its n¹ coefficient over that slope), so the verdict's throughput beside them is
    that slope's (4,042 tok/s here), named, never the straight line's (2,990 tok/s)."""
    smol = lookup_model("smollm2-135m")
    b = 1 / 4000
    c = flops.quadratic_coefficient(smol) / (flops.linear_coefficient(smol) / b)
    lengths = [64, 128, 256, 512, 1024, 2048, 4096, 8192]
    probes = run(n=64, a=0.01, b=b, c=c, lengths=lengths)
    for spec in (RooflineSpec(), RooflineSpec(peak_tflops=2.0)):
        d = analyze(probes, ServerInfo(model="SmolLM2-135M"), AnalysisOptions(roofline=spec))
        r, q = d.roofline, d.quadratic.fit
        assert d.quadratic.applies and r.slope_source.startswith("quadratic")
        paired = r.achieved_flops / r.flops_per_token  # tokens/s of the FLOP/s' slope
        assert paired == pytest.approx(q.prefill_tokens_per_s)
        assert paired > 1.2 * d.fit.prefill_tokens_per_s  # the line averages in attention
        text = d.verdict.text
        assert (f"{paired:,.0f} prompt tok/s (the quadratic fit's linear term), "
                f"{units.flops(r.achieved_flops)} achieved") in text
        assert f"{d.fit.prefill_tokens_per_s:,.0f} prompt tok/s" not in text
    # a straight line: the line's own throughput, no source named
    d = analyze(run(b=1 / 3000), ServerInfo(model="SmolLM2-135M"), None)
    assert not (d.quadratic and d.quadratic.applies)
    assert (f"{d.fit.prefill_tokens_per_s:,.0f} prompt tok/s, "
            f"{units.flops(d.roofline.achieved_flops)} achieved") in d.verdict.text


def test_curvature_line_one_format_with_units():
    """A CPU's curvature (c = 1.5e-6 s/token²): c, its interval and attention's
    expectation in one grouped format, each with its unit (was 'c = 1.52e+03 ms per
    (1k tokens)² (95% [1.45e+03 to 1.58e+03]); attention expects 477')."""
    lengths = [4, 9, 19, 40, 87, 188, 406, 878, 1896, 4007]
    d = analyze(run(n=40, a=0.05, b=1 / 340, c=1.5e-6, lengths=lengths),
                ServerInfo(model="SmolLM2-135M"), None)
    q = d.quadratic.fit
    assert d.quadratic.applies
    lines = format_summary(d).splitlines()
    (curv,) = [x for x in lines if "curvature" in x]
    lo, hi = q.c_ci
    assert curv == (f"  curvature: c = {q.c_s_per_token2 * 1e9:,.0f} ms per (1k tokens)²   "
                    f"95% [{lo * 1e9:,.0f} to {hi * 1e9:,.0f}] ms per (1k tokens)²")
    assert q.c_s_per_token2 * 1e9 > 1000 and "e+" not in curv
    (att,) = [x for x in lines if "attention expects" in x]
    assert att == (f"    attention expects c = {d.roofline.c_expected_s_per_token2 * 1e9:,.0f} "
                   f"ms per (1k tokens)² (ratio {d.roofline.c_ratio:.2f}, estimate)")
    (lin,) = [x for x in lines if "linear term alone" in x]
    assert lin.endswith("] tok/s")


def test_reuses_a_running_fit_and_bad_model_config():
    rs = run()
    rf = RunningFit(window=10)
    for r in rs:
        rf.add(r)
    spec = read_model_config(RooflineSpec(model_config="/nonexistent/config.json"))
    d = analyze(rs, None, AnalysisOptions(roofline=spec), running_fit=rf)
    assert d.fit is not None
    assert any("model-config" in n for n in d.notes)
    d = analyze(rs, None, AnalysisOptions(fit="ols"))
    assert d.fit.method == "ols"


def _noisy(seed=0):
    """A loaded CPU's early probes: TTFT ~ 0.2 s + noise that swamps 17 µs a token
    (R² 0.05, the slope's 95% interval -1,282 to 2,673 µs/token)."""
    rng = np.random.default_rng(seed)
    lengths = [4, 9, 19, 40, 87]
    return [ProbeResult(seq=i + 1, requested_tokens=x, prompt_tokens=x, ok=True,
                        ttft_s=float(0.2 + x * 1.7e-5 + abs(rng.normal(0, 0.15))))
            for i, x in enumerate(lengths[i % 5] for i in range(15))]


def test_a_noisy_fit_states_no_throughput_anywhere():
    """The slope's 95% interval includes 0 (LinearFit.unresolved, "too noisy yet"): 1/b
    (here 1,438 tok/s) is no throughput, yet the verdict said "Peak unknown (CPU or
    unlisted GPU): 1,438 prompt tok/s, 0.31 TFLOP/s achieved" two lines after "the
    throughput is not measured yet", and the sweep's fit line "prefill 1,438 tokens/s".
    Every statement of it now says too noisy yet instead (fit.throughput_text)."""
    from prefilltui.render.text import format_sweep

    si = ServerInfo(model="/x/SmolLM2-135M-Instruct.Q4_1.gguf", params=134515008, hidden=576,
                    layers=30)
    d = analyze(_noisy(), si, None)
    f = d.fit
    assert f.unresolved and f.prefill_tokens_per_s == pytest.approx(1438, rel=0.01)
    bare = f"{f.prefill_tokens_per_s:,.0f}"
    assert d.verdict.level == "unknown-peak" and d.verdict.text == (
        "Peak unknown (CPU or unlisted GPU): throughput too noisy yet, the slope's 95% "
        "interval includes 0. MFU needs --peak-tflops (and --gpu / --params if not detected).")
    text = format_summary(d)
    assert f"Verdict: {d.verdict.text}" in text
    assert "  throughput   too noisy yet   95% [374 to inf] tok/s" in text.splitlines()
    sweep = format_sweep(d, fit_line=True)
    assert "prefill too noisy yet   R2 0.053" in sweep
    assert bare not in text + sweep
    # report: the figure's legend and subtitle, the page (html_page holds the summary)
    from prefilltui.render.figure import html_page, svg_figure
    svg = svg_figure(_noisy(), d)
    assert "probes in the fit · fit too noisy yet" in svg and "prefill too noisy yet" in svg
    assert bare not in svg + html_page(_noisy(), d, text)
    # a GPU: the verdict's throughput (and FLOP/s, that throughput's) is said the same way
    gpu = analyze(_noisy(), si, AnalysisOptions(roofline=RooflineSpec(peak_tflops=0.5)))
    assert gpu.roofline.mfu is not None
    assert gpu.verdict.level != "unknown-peak" and bare not in gpu.verdict.text
    # a model of unknown shape: the verdict's first words
    mystery = analyze(_noisy(), ServerInfo(model="mystery-model"), None)
    assert mystery.verdict.text.startswith("Throughput too noisy yet, the slope's 95% interval "
                                           "includes 0. Model shape unknown")
    # one rule for every renderer; a resolved fit still states its number
    from prefilltui.model.fit import throughput_text
    assert throughput_text(f) == "too noisy yet"
    clean = analyze(run(b=1 / 3000), si, None)
    assert f"{clean.fit.prefill_tokens_per_s:,.0f} prompt tok/s, " in clean.verdict.text
    assert throughput_text(clean.fit, "tok/s") == f"{clean.fit.prefill_tokens_per_s:,.0f} tok/s"


def test_achieved_flops_one_spelling_in_the_text_summary_and_the_verdict():
    """The text summary and the verdict said "0.75 TFLOP/s" (".3g" drops a zero; the
    TUI's headline switched to GFLOP/s only below 0.1): units.flops in every place,
    3 significant digits, GFLOP/s below 1 TFLOP/s."""
    from prefilltui.render.text import format_summary

    d = analyze(run(b=1 / 1500), ServerInfo(model="SmolLM2-135M"), None)
    ach = d.roofline.achieved_flops
    assert 1e11 < ach < 1e12
    shown = units.flops(ach)
    assert shown.endswith(" GFLOP/s") and len(shown.split()[0].replace(".", "")) == 3
    assert f"  achieved {shown} (from the " in format_summary(d)
    assert f"{shown} achieved" in d.verdict.text
    assert "TFLOP/s achieved" not in d.verdict.text


def test_ok_probes_left_out_of_the_fit_counted_by_why():
    """The counts behind "n 14 of 16 ok": every ok probe is in the fit or left out for
    one reason, the same in a run's summary and the live one."""
    from dataclasses import replace

    from prefilltui.model.summary import LiveSummary
    from prefilltui.model.summary.analysis import probe_counts

    rs = run(n=12)  # a warm-up, 12 in the fit, a failure, a cache hit
    rs.append(replace(rs[3], seq=50, load_level=2))  # a probe under a background load
    rs.append(replace(rs[4], seq=51, ttft_s=None))  # ok, but no first token time
    c = probe_counts(rs)
    assert c.left_out == {"warm-up": 1, "cache hit": 1, "under load": 1, "no TTFT or length": 1}
    assert c.ok == c.fit_eligible + sum(c.left_out.values()) == 16
    assert c.to_json()["left_out"] == c.left_out
    live = LiveSummary()
    for r in rs:
        live.add(r)
    assert live.counts.left_out == c.left_out
    assert [r.left_out for r in rs[:2]] == ["warm-up", None] and rs[-4].left_out is None  # failed
