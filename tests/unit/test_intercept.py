"""The fixed cost (pinned or not, clamped, server-side), the intercept breakdown's
non-negative parts, and TTFT percentiles (core.intercept, core.percentiles)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from prefilltui.model.fit import intercept, percentiles
from prefilltui.model.summary import analyze
from prefilltui.model.diagnosis.ttft_breakdown import breakdown
from prefilltui.model.fit import LinearFit
from prefilltui.model.fit import fit_robust
from prefilltui.model.types import ProbeResult
from prefilltui.render.tables import format_breakdown
from prefilltui.render.text import format_fixed_cost, format_percentiles, format_summary


def _r(seq, n, ttft, prefill=None, **kw) -> ProbeResult:
    return ProbeResult(seq=seq, ok=True, requested_tokens=n, prompt_tokens=n, ttft_s=ttft,
                       server_prefill_s=prefill, **kw)


def _run(lengths, a, b, noise, seed=0, reps=3, prefill_a=0.002):
    """Server prefill = prefill_a + b*n (noisy); TTFT = prefill + (a - prefill_a)."""
    rng = np.random.default_rng(seed)
    out, seq = [], 0
    for _ in range(reps):
        for n in lengths:
            seq += 1
            pre = (prefill_a + b * n) * (1 + noise * rng.standard_normal())
            out.append(_r(seq, n, pre + a - prefill_a, prefill=pre))
    return out


def test_pin_bound_floor_and_relative():
    assert intercept.pin_bound_s(0.004) == pytest.approx(0.010)
    assert intercept.pin_bound_s(0.300) == pytest.approx(0.075)
    assert intercept.pin_bound_s(-0.05) == pytest.approx(0.010)


def test_anchored_run_is_pinned_and_matches_server_side():
    rs = _run([4, 9, 19, 40, 87, 188, 406, 878], a=0.010, b=1 / 170, noise=0.03)
    fit = fit_robust([r.tokens for r in rs], [r.ttft_s for r in rs])
    fc = intercept.fixed_cost(fit, intercept.server_fixed_cost(rs))
    assert fc.pinned and fc.note is None and fc.shown_s == pytest.approx(0.010, abs=0.005)
    assert fc.server.fixed_cost_s == pytest.approx(0.010, abs=0.004) and fc.server.pinned
    assert fc.server.outside_prefill_s == pytest.approx(0.008, abs=1e-9)
    text = "\n".join(format_fixed_cost(fc))
    assert "fixed cost" in text and "server-side" in text and "pinned" in text


def test_long_prompts_only_on_a_noisy_run_say_not_pinned():
    """128-1,024 tokens at 15 % noise on a CPU-like 6 ms/token: a is a long
    extrapolation; the summary says so instead of a confident (negative) number."""
    rs = _run([128, 256, 512, 1024], a=0.010, b=1 / 170, noise=0.15, seed=4, reps=1)
    d = analyze(rs)
    fc = d.fixed_cost
    assert fc.pinned is False and fc.shown_s is None
    assert intercept.NOT_PINNED in fc.note and fc.note in d.notes
    text = format_summary(d)
    assert intercept.NOT_PINNED in text and "a (not pinned)" in text
    assert text.count(intercept.NOT_PINNED) == 1  # not repeated as a note


def test_pinned_negative_intercept_is_clamped_with_a_note():
    x = np.array([4, 8, 16, 32, 64, 128, 256] * 3, dtype=float)
    y = -0.002 + 1e-4 * x + 1e-5 * np.random.default_rng(1).standard_normal(len(x))
    fc = intercept.fixed_cost(fit_robust(x, np.maximum(y, 1e-4)))
    assert fc.pinned and fc.clamped and fc.shown_s == 0.0 and "shown as 0" in fc.note


def test_breakdown_never_shows_a_negative_part():
    """The server's prefill times fit a negative intercept (-60 ms): it is shown as 0
    with a note, and the overhead stays >= 0."""
    rng = np.random.default_rng(2)
    rs = []
    for i, n in enumerate([4, 9, 19, 40, 87, 188, 406, 878] * 3):
        pre = max(1e-3, -0.060 + n / 170 * (1 + 0.01 * rng.standard_normal()))
        rs.append(_r(i + 1, n, pre + 0.010, prefill=pre, overhead_s=0.010))
    b = breakdown(rs)
    ic = b.intercept
    assert ic.prefill_s >= 0 and (ic.overhead_s is None or ic.overhead_s >= 0)
    assert ic.intercept_s >= 0 or not ic.pinned
    assert ic.notes
    text = format_breakdown(b)
    assert "-" not in text.split("intercept", 1)[-1].split("\n")[0].replace("- ", "")


def test_percentiles_per_length_and_overall_with_counts():
    rs = [_r(i + 1, n, t) for i, (n, t) in enumerate(
        [(4, 0.01), (4, 0.02), (4, 0.03), (100, 0.5), (100, 0.7)])]
    rs.append(_r(9, 4, 9.0, warmup=True))  # warm-up: not counted
    rs.append(ProbeResult(seq=10, ok=False, requested_tokens=4, error_kind="timeout"))
    p = percentiles.ttft_percentiles(rs)
    assert p.overall.n == 5
    by = {r.requested_tokens: r for r in p.by_length}
    assert by[4].n == 3 and by[4].ttft.p50_s == pytest.approx(0.02)
    assert by[4].ttft.p90_s == pytest.approx(0.028) and by[4].ttft.p99_s == pytest.approx(0.0298)
    assert by[4].ttft_min_s == 0.01
    assert by[100].n == 2 and by[100].prompt_tokens == 100
    lines = format_percentiles(p)
    assert lines[0].startswith("TTFT percentiles") and lines[-1].split()[0] == "all"
    assert len(format_percentiles(p, by_length=False)) == 3
    assert percentiles.quantiles([]).p50_s is None


def test_analyze_json_carries_percentiles_and_fixed_cost():
    rs = _run([4, 9, 19, 40, 87, 188, 406, 878], a=0.010, b=1 / 170, noise=0.03)
    d = analyze(rs)
    assert d.percentiles.overall.n == len(rs)
    assert len(d.percentiles.by_length) == 8
    assert d.fixed_cost.server.n == len(rs)
    j = d.to_json()
    assert j["percentiles"]["overall"]["n"] == len(rs) and j["fixed_cost"]["server"]["n"] == len(rs)
    text = format_summary(d)
    assert "TTFT percentiles" in text and "p99" in text and "server-side" in text


def test_shown_intervals_of_a_fixed_cost_never_go_below_zero():
    from prefilltui.model.fit import physical_ci

    assert physical_ci((-0.02178, 0.11446)) == (0.0, 0.11446)
    assert physical_ci((0.01, 0.02)) == (0.01, 0.02)
    assert physical_ci((-0.03, -0.01)) == (0.0, 0.0)
    assert physical_ci((None, 0.1)) == (None, 0.1) and physical_ci(None) is None


def test_figure_says_not_pinned_as_the_summary_does():
    from prefilltui.render.figure import svg_figure
    from prefilltui.model.types import ProbeResult

    results = [ProbeResult(seq=i, requested_tokens=n, prompt_tokens=n, ok=True, ttft_s=t)
               for i, (n, t) in enumerate([(4, 0.4), (64, 0.2), (256, 2.0), (1024, 7.5)])]
    fit = LinearFit(intercept_s=0.0463, slope_s_per_token=7.5023e-3,
                    intercept_ci=(-0.02178, 0.11446), slope_ci=(5e-3, 1e-2),
                    prefill_tokens_per_s=133.3, prefill_tokens_per_s_ci=(100.0, 200.0),
                    r2=0.822, n=4, method="robust")
    d = replace(analyze(results), fit=fit, fixed_cost=intercept.fixed_cost(fit))
    assert not d.fixed_cost.pinned
    svg = svg_figure(results, d)
    assert "TTFT = a (not pinned) + 7,502.3 µs × n" in svg and "46.3 ms" not in svg
