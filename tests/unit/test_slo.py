"""Unit tests of prefilltui.model.slo: the objective's parser and presets, the longest
prompt that meets it, attainment (exact and from histogram buckets), the burn rate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prefilltui.model.fit import fit_robust, fit_ols
from prefilltui.model.slo import (
    BURN_RULES, Objective, SloPreset, attainment_from_buckets, attainment_of, burn_state,
    longest_prompt, parse_objective, resolve, wilson, z_of,
)


# ------------------------------------------------------------------ the objective

@pytest.mark.parametrize("text,threshold,pct,key", [
    ("ttft=2s@p99", 2.0, 99.0, "ttft=2s@p99"),
    ("ttft=500ms@p90", 0.5, 90.0, "ttft=500ms@p90"),
    (" TTFT = 1.5s @ p99.9 ", 1.5, 99.9, "ttft=1.5s@p99.9"),
    ("ttft=250ms@p50", 0.25, 50.0, "ttft=250ms@p50"),
])
def test_objective_parses(text, threshold, pct, key):
    o = parse_objective(text)
    assert isinstance(o, Objective)
    assert o.threshold_s == pytest.approx(threshold)
    assert o.percentile == pct
    assert o.key == key
    assert o.target == pytest.approx(pct / 100)
    assert o.budget == pytest.approx(1 - pct / 100)


def test_objective_labels_for_people():
    assert parse_objective("ttft=2s@p99").label == "2 s p99"
    assert parse_objective("ttft=500ms@p90").label == "500 ms p90"


@pytest.mark.parametrize("text,says", [
    ("ttft=2@p99", "not an objective"),
    ("ttft=2min@p99", "not an objective"),
    ("itl=2s@p99", "not an objective"),
    ("ttft=0s@p99", "above 0"),
    ("ttft=2s@p49", "p50 .. p99.9"),
    ("ttft=2s@p99.99", "p50 .. p99.9"),
    ("ttft=2s@p100", "p50 .. p99.9"),
    ("ttft=7200s@p99", "no objective"),
    ("", "not an objective"),
])
def test_bad_objectives_say_why(text, says):
    with pytest.raises(ValueError) as e:
        parse_objective(text)
    assert says in str(e.value)


def test_presets_parse_and_resolve_by_the_catalog():
    assert parse_objective("mlperf-server") == SloPreset("mlperf-server")
    items = [SloPreset("mlperf-server"), SloPreset("mlperf-interactive")]
    objs, notes = resolve(items, "meta-llama/Llama-3.1-8B-Instruct")
    assert [(o.threshold_s, o.percentile) for o in objs] == [(2.0, 99.0), (0.5, 99.0)]
    assert "llama3_1-8b.Server.ttft_latency = 2000" in objs[0].source
    assert "llama3_1-8b-interactive.Server.ttft_latency = 500" in objs[1].source
    assert notes == ()
    objs, _ = resolve(items, "meta-llama/Llama-2-70b-chat-hf")
    assert [o.threshold_s for o in objs] == [2.0, 0.45]
    objs, _ = resolve(items, "meta-llama/Llama-3.1-405B-Instruct")
    assert [o.threshold_s for o in objs] == [6.0, 4.5]


def test_a_preset_for_a_model_mlperf_does_not_run_resolves_to_a_note():
    objs, notes = resolve([SloPreset("mlperf-server"), parse_objective("ttft=1s@p90")],
                          "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert [o.key for o in objs] == ["ttft=1s@p90"]
    assert len(notes) == 1 and "no TTFT limit" in notes[0]
    objs, notes = resolve([SloPreset("mlperf-interactive")], "mistralai/Mixtral-8x7B-v0.1")
    assert objs == () and "no interactive" in notes[0]


def test_duplicate_objectives_once():
    o = parse_objective("ttft=2s@p99")
    objs, _ = resolve([o, parse_objective("ttft=2000ms@p99")], None)
    assert objs == (o,)


# ------------------------------------------------------------------ n_max

def _probes(seed=0, a=0.05, b=2e-4, noise=0.03, n=60):
    rng = np.random.default_rng(seed)
    x = np.resize(np.array([64, 128, 256, 512, 1024, 2048, 4096.0]), n)
    y = (a + b * x) * (1 + noise * rng.standard_normal(n))
    return x, y


def test_n_max_of_an_exact_ols_line_is_the_algebra():
    x = np.array([100, 200, 400, 800, 1600.0])
    fit = fit_ols(x, 0.05 + 2e-4 * x + np.array([1e-4, -1e-4, 1e-4, -1e-4, 0]))
    o = Objective(1.0, 50.0)  # z = 0 at the median: the line alone
    lim = longest_prompt(fit, o)
    assert lim.tokens == pytest.approx((1.0 - fit.intercept_s) / fit.slope_s_per_token, abs=1)
    lo, hi = lim.ci
    assert lo <= lim.tokens <= hi
    with_queue = longest_prompt(fit, o, queue_s=0.2)
    assert with_queue.tokens == pytest.approx((0.8 - fit.intercept_s) / fit.slope_s_per_token, abs=1)


def test_the_percentile_offset_shortens_n_max_by_the_noise_model():
    x, y = _probes()
    fit = fit_robust(x, y)
    p50 = longest_prompt(fit, Objective(1.0, 50.0))
    p99 = longest_prompt(fit, Objective(1.0, 99.0))
    assert p99.tokens < p50.tokens
    # at n_max, the line plus z·sd is the threshold
    n = p99.tokens
    assert fit.predict(n) + z_of(99) * fit.noise_sd_s(n) == pytest.approx(1.0, abs=1e-3)
    assert p99.offset_s == pytest.approx(z_of(99) * fit.noise_sd_s(n), rel=1e-3)
    lo, hi = p99.ci
    assert lo < p99.tokens < hi
    assert p99.extrapolated is (p99.tokens > 4096)


def test_n_max_holds_against_simulated_requests_at_plus_minus_20_percent():
    """The p90 at 0.8 n_max is within the threshold, at 1.2 n_max beyond it (fresh
    draws from the process the fit saw)."""
    a, b, noise = 0.05, 2e-4, 0.05
    x, y = _probes(1, a, b, noise, n=200)
    fit = fit_robust(x, y)
    o = Objective(0.7, 90.0)
    lim = longest_prompt(fit, o)
    rng = np.random.default_rng(7)
    for k, within in ((0.8, True), (1.2, False)):
        n = k * lim.tokens
        draws = (a + b * n) * (1 + noise * rng.standard_normal(4000))
        assert bool(np.quantile(draws, 0.9) <= o.threshold_s) is within


def test_no_n_max_without_a_resolved_slope_and_zero_when_nothing_meets_it():
    assert longest_prompt(None, Objective(1.0, 99.0)) is None
    x = np.array([100, 200, 300, 400.0])
    flat = fit_ols(x, np.array([0.5, 0.2, 0.6, 0.3]))
    assert flat.unresolved
    assert longest_prompt(flat, Objective(1.0, 99.0)) is None
    x, y = _probes()
    lim = longest_prompt(fit_robust(x, y), Objective(0.01, 99.0))
    assert lim.tokens == 0


def test_bad_queue_counts_as_none():
    x, y = _probes()
    fit = fit_robust(x, y)
    base = longest_prompt(fit, Objective(1.0, 99.0)).tokens
    for q in (float("nan"), -1.0, float("inf")):
        assert longest_prompt(fit, Objective(1.0, 99.0), queue_s=q).tokens == base


# ------------------------------------------------------------------ attainment

def test_exact_attainment_and_budget():
    o = Objective(1.0, 90.0)
    ttfts = [0.5] * 95 + [1.5] * 5 + [None, float("nan"), -1.0]
    at = attainment_of(ttfts, o)
    assert (at.good_lo, at.good_hi, at.total) == (95, 95, 100)
    assert at.share == pytest.approx(0.95)
    assert at.budget_left == pytest.approx(0.5)  # 5 bad of a 10-request budget
    assert at.burn_rate == pytest.approx(0.5)
    lo, hi = at.ci
    assert lo < 0.95 < hi
    assert at.meets is None or at.meets is True
    assert attainment_of([1.0], o).good_lo == 1  # on the threshold is within


def test_wilson_matches_a_textbook_value():
    # 81 of 263 (Wilson 1927 / Newcombe 1998 example 1): 0.2553 .. 0.3662
    lo, hi = wilson(81, 263)
    assert lo == pytest.approx(0.2553, abs=5e-4) and hi == pytest.approx(0.3662, abs=5e-4)


def test_histogram_attainment_is_known_only_at_bucket_bounds():
    o = Objective(1.0, 99.0)
    buckets = [(0.5, 80), (0.75, 90), (1.5, 98), (2.0, 99), (math.inf, 100)]
    at = attainment_from_buckets(buckets, o)
    assert at.source == "histogram"
    assert at.bounds_s == (0.75, 1.5)
    assert (at.good_lo, at.good_hi) == (90, 98)
    assert at.share_bounds == (0.90, 0.98)
    assert at.ci[0] < 0.90 and at.ci[1] > 0.98
    on_bound = attainment_from_buckets(buckets, Objective(2.0, 99.0))
    assert on_bound.exact and on_bound.good_lo == 99
    above = attainment_from_buckets(buckets, Objective(5.0, 99.0))
    assert above.bounds_s == (2.0, None) and (above.good_lo, above.good_hi) == (99, 100)


@pytest.mark.parametrize("buckets", [
    [], [(1.0, 5)], [(1.0, 5), (math.inf, 3)], [(1.0, float("nan")), (math.inf, 3)],
    [(1.0, 0), (math.inf, 0)],
])
def test_bad_histograms_give_nothing(buckets):
    assert attainment_from_buckets(buckets, Objective(1.0, 99.0)) is None


# ------------------------------------------------------------------ burn rate

def test_burn_rules_are_the_workbooks():
    assert [(r.long_s, r.short_s, r.rate) for r in BURN_RULES] == [
        (3600, 300, 14.4), (21600, 1800, 6.0)]


def test_fast_burn_fires_when_long_and_short_windows_both_burn():
    o = Objective(1.0, 99.0)  # budget 1 %: 14.4x is 14.4 % bad
    now = 100_000.0
    good = [(now - 3600 + i * 3.0, 0.5) for i in range(1200)]  # one every 3 s over the hour
    quiet = burn_state(good, o, now)
    assert quiet.burning is None and quiet.rate(3600) == 0.0
    # the last 10 minutes: every request slow
    bad = [(t, 2.0 if t > now - 600 else v) for t, v in good]
    st = burn_state(bad, o, now)
    assert st.rate(300) == pytest.approx(100.0)
    assert st.rate(3600) == pytest.approx(100 * 200 / 1200, rel=0.02)
    assert st.burning == "fast"
    # the burning stopped 6 minutes ago: the 5-min window resets the page; the 6-h
    # rule (its 30-min window still holds the burst) goes on
    stopped = [(t, 2.0 if now - 900 < t < now - 360 else 0.5) for t, _ in good]
    assert burn_state(stopped, o, now).firing == ("slow",)


def test_slow_burn_alone():
    o = Objective(1.0, 90.0)  # budget 10 %: 6x is 60 % bad, 14.4x is beyond reach
    now = 50_000.0
    ev = [(now - i * 10.0, 2.0 if i % 10 < 7 else 0.1) for i in range(2160)]
    st = burn_state(ev, o, now)
    assert st.rate(21600) == pytest.approx(7.0, rel=0.02)
    assert st.burning == "slow"
    assert all(w.full for w in st.windows if w.window_s <= 21590)


def test_burn_without_requests_fires_nothing():
    st = burn_state([(1.0, None), (2.0, float("nan"))], Objective(1.0, 99.0), 10.0)
    assert st.firing == () and all(w.rate is None for w in st.windows)


# ------------------------------------------------------------------ the rate search

from prefilltui.model.slo import next_rate, saturated, search_result, step_of  # noqa: E402


def _queue_ttfts(rate: float, cap: float = 10.0, base: float = 0.2, n: int = 400, seed: int = 0):
    """An M/M/1-like server: mean TTFT base / (1 - rate/cap), exponential scatter;
    above capacity the queue grows through the step."""
    rng = np.random.default_rng(seed + int(rate * 1000))
    if rate >= cap:
        return list(base + np.linspace(0, 30, n) * (rate / cap - 1) + rng.exponential(base, n))
    return list(rng.exponential(base / (1 - rate / cap), n))


def _search(o, lo, hi, cap=10.0):
    steps = []
    while (r := next_rate(steps, lo, hi)) is not None:
        steps.append(step_of(r, _queue_ttfts(r, cap), o))
        assert len(steps) < 20
    return search_result(o, steps)


def test_bisection_finds_the_rate_the_queue_holds():
    # P(TTFT <= 1 s) = 1 - exp(-1/m) >= 0.9  <=>  m <= 0.434 s  <=>  rate <= 5.39 req/s
    o = Objective(1.0, 90.0)
    res = _search(o, 0.5, 40.0)
    assert res.rate is not None and 4.3 <= res.rate <= 5.9, [(s.rate, s.attainment.share) for s in res.steps]
    assert res.above is not None and res.above / res.rate <= 1.1
    assert res.steps[0].rate == 0.5 and res.steps[1].rate == 40.0
    assert res.steps[1].saturated and "grew" in res.steps[1].why
    a = res.answer_step.attainment
    assert a.ci[0] <= a.share <= a.ci[1] and a.share >= 0.9


def test_nothing_holds_and_everything_holds():
    o = Objective(0.05, 99.0)
    res = _search(o, 0.5, 4.0)
    assert res.rate is None and len(res.steps) == 1
    res = _search(Objective(60.0, 50.0), 0.5, 4.0)
    assert res.rate == 4.0 and res.above is None and len(res.steps) == 2


def test_saturation_by_refusals_and_unanswered_requests_miss():
    assert saturated([0.1] * 10, 1.0, refused=2)[0]
    assert not saturated([0.1, 0.12] * 10, 1.0)[0]
    st = step_of(1.0, [0.1, None, 0.2], Objective(1.0, 90.0), unanswered=2)
    assert st.attainment.total == 5 and st.attainment.good_lo == 2 and not st.meets


# ------------------------------------------------------------------ the fleet

from prefilltui.model.slo import (fleet_from_buckets, merged_attainment,  # noqa: E402
                                  replicas_worst_first)


def test_fleet_attainment_is_the_merged_counts_not_an_average():
    o = Objective(1.0, 99.0)
    quiet = attainment_of([0.5, 2.0], o)  # 50 % of 2
    busy = attainment_of([0.5] * 999 + [2.0], o)  # 99.9 % of 1,000
    fleet = merged_attainment(o, [quiet, busy, None])
    assert (fleet.good_lo, fleet.total) == (1000, 1002)
    assert fleet.share == pytest.approx(1000 / 1002)  # not (0.5 + 0.999) / 2
    order = replicas_worst_first([("busy", busy), ("none", None), ("quiet", quiet)])
    assert [name for name, _ in order] == ["quiet", "busy", "none"]
    probes = attainment_of([0.5], o, source="probes")
    assert merged_attainment(o, [quiet, probes]) is None  # users' and probes' do not mix


def test_fleet_from_histograms_merges_at_the_common_bounds():
    o = Objective(1.0, 90.0)
    a = [(0.5, 10), (1.0, 18), (2.0, 20), (math.inf, 20)]
    b = [(0.5, 70), (2.0, 78), (math.inf, 80)]  # no 1.0 bucket: the fleet's bounds coarsen
    f = fleet_from_buckets(o, [a, b])
    assert f.bounds_s == (0.5, 2.0)
    assert (f.good_lo, f.good_hi, f.total) == (80, 98, 100)
    same = fleet_from_buckets(o, [a, a])
    assert same.exact and same.good_lo == 36 and same.total == 40
    assert fleet_from_buckets(o, [a, [(1.0, 3)]]) is None


def test_status_reads_the_histogram_when_no_span_is_there():
    from prefilltui.model.slo import slo_status
    from prefilltui.render.slo import slo_line_forms

    x, y = _probes()
    fit = fit_robust(x, y)
    o = Objective(1.0, 99.0)
    buckets = [(0.5, 80), (0.75, 90), (1.5, 98), (math.inf, 100)]
    st = slo_status(o, idle_fit=fit, now_fit=fit, users_buckets=buckets, buckets_window_s=60.0)
    assert st.users.source == "histogram" and st.users.share_bounds == (0.90, 0.98)
    assert st.burn is None and st.users_ttft_s is None  # no single requests
    long, short, _ = slo_line_forms(st)
    assert "server's TTFT histogram 90.0–98.0 % within (at the buckets 750 ms / 1.5 s)" in long
    assert "hist 90.0–98.0 % in" in short
