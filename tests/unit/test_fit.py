"""Unit tests of prefilltui.model.fit.linear and running_fit (OLS, robust, quadratic, knee, RunningFit)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from prefilltui.model.fit import LinearFit, fit_ols
from prefilltui.model.fit.robust import detect_knee, fit_quadratic, fit_wls
from prefilltui.model.fit import fit_robust
from prefilltui.model.fit import t_ppf
from prefilltui.model.fit import FitSnapshot, RunningFit
from prefilltui.model.fit.running import analyze_points
from prefilltui.model.types import ProbeResult

LENGTHS = np.array([128, 256, 512, 1024, 2048, 4096, 8192], dtype=float)


def synth(seed, n, a=0.03, b=1 / 25000, c=0.0, noise=0.05, out_p=0.0, lengths=LENGTHS):
    rng = np.random.default_rng(seed)
    x = np.resize(lengths, n).astype(float)
    rng.shuffle(x)
    y = (a + b * x + c * x * x) * (1 + noise * rng.standard_normal(n))
    y = np.where(rng.random(n) < out_p, 3 * y, y)
    return x, y


@pytest.mark.parametrize("df,expected", [(1, 12.706), (2, 4.303), (5, 2.571), (10, 2.228),
                                         (30, 2.042), (120, 1.980), (100000, 1.960)])
def test_t_quantiles_match_tables(df, expected):
    assert t_ppf(0.975, df) == pytest.approx(expected, abs=1e-3)


def test_ols_exact_line():
    x = np.array([100, 200, 400, 800.0])
    f = fit_ols(x, 0.02 + 1e-4 * x)
    assert f.intercept_s == pytest.approx(0.02)
    assert f.slope_s_per_token == pytest.approx(1e-4)
    assert f.prefill_tokens_per_s == pytest.approx(1e4)
    assert f.r2 == pytest.approx(1.0)
    assert f.n == 4 and f.method == "ols"
    assert f.slope_ci[1] - f.slope_ci[0] == pytest.approx(0, abs=1e-12)
    assert np.allclose(f.residuals, 0, atol=1e-12)


def test_ols_standard_errors_match_textbook():
    x, y = synth(1, 40)
    f = fit_ols(x, y)
    X = np.column_stack([np.ones_like(x), x])
    beta, res, *_ = np.linalg.lstsq(X, y, rcond=None)
    s2 = float(res[0]) / (len(x) - 2)
    se = np.sqrt(np.diag(s2 * np.linalg.inv(X.T @ X)))
    t = t_ppf(0.975, len(x) - 2)
    assert f.intercept_s == pytest.approx(beta[0])
    assert f.slope_s_per_token == pytest.approx(beta[1])
    assert f.slope_ci == pytest.approx((beta[1] - t * se[1], beta[1] + t * se[1]))
    assert f.intercept_ci == pytest.approx((beta[0] - t * se[0], beta[0] + t * se[0]))
    assert (f.intercept_se_s, f.slope_se) == pytest.approx((se[0], se[1]))
    # 1/b interval = b's interval inverted
    assert f.prefill_tokens_per_s_ci == pytest.approx((1 / f.slope_ci[1], 1 / f.slope_ci[0]))
    assert len(f.residuals) == 40
    assert f.r2 == pytest.approx(1 - res[0] / np.sum((y - y.mean()) ** 2))


def test_too_few_points_or_constant_x():
    assert fit_ols([1, 2], [1, 2]) is None
    assert fit_robust([1, 2], [1, 2]) is None
    assert fit_ols([5, 5, 5], [1, 2, 3]) is None
    assert fit_robust([5, 5, 5, 5], [1, 2, 3, 4]) is None
    assert fit_quadratic([1, 2, 3], [1, 2, 3]) is None
    with pytest.raises(ValueError):
        fit_ols([1, 2, 3], [1, 2])


def test_nan_points_are_dropped():
    f = fit_ols([100, 200, np.nan, 400, 800], [0.03, 0.04, 0.05, np.inf, 0.1])
    assert f is not None and f.n == 3


def test_unbounded_throughput_interval_when_slope_interval_reaches_zero():
    rng = np.random.default_rng(0)
    x = np.array([100, 110, 120, 130.0])
    y = 0.05 + 1e-6 * x + 0.01 * rng.standard_normal(4)
    f = fit_ols(x, y)
    assert f.slope_ci[0] < 0
    lo, hi = f.prefill_tokens_per_s_ci
    assert hi is None
    if f.slope_ci[1] > 0:
        assert lo == pytest.approx(1 / f.slope_ci[1])
    json.dumps(f.to_json())


def test_robust_rejects_queueing_outliers():
    x, y = synth(3, 60, out_p=0.1)
    r, o = fit_robust(x, y), fit_ols(x, y)
    assert r.method == "robust"
    assert abs(r.prefill_tokens_per_s / 25000 - 1) < 0.03
    assert r.prefill_tokens_per_s_ci[0] <= 25000 <= r.prefill_tokens_per_s_ci[1]
    assert r.outliers >= 3
    assert abs(o.prefill_tokens_per_s / 25000 - 1) > abs(r.prefill_tokens_per_s / 25000 - 1)


def test_robust_exact_data_and_subsample_flag():
    x = np.repeat(LENGTHS, 5)
    f = fit_robust(x, 0.03 + x / 25000)
    assert f.prefill_tokens_per_s == pytest.approx(25000, rel=1e-6)
    x, y = synth(4, 3000)
    g = fit_robust(x, y, max_points=500)
    assert g.sampled and g.n_offered == 500
    assert abs(g.prefill_tokens_per_s / 25000 - 1) < 0.02
    assert fit_robust(x, y, max_points=500) == g  # deterministic


def test_quadratic_recovers_attention_term():
    c = 0.5 * (1 / 4000) / 4096
    x, y = synth(5, 80, a=0.015, b=1 / 4000, c=c, lengths=np.geomspace(64, 4096, 8).round())
    q = fit_quadratic(x, y)
    assert q.method == "robust-quadratic"
    assert q.c_ci[0] <= c <= q.c_ci[1] and q.c_ci[0] > 0
    assert abs(q.prefill_tokens_per_s / 4000 - 1) < 0.05
    assert q.predict(1000) == pytest.approx(q.intercept_s + q.slope_s_per_token * 1000
                                            + q.c_s_per_token2 * 1e6)
    snap = analyze_points(x, y)
    assert snap.quadratic_applies
    ql = fit_quadratic(x, y, robust=False)
    assert ql.method == "ols-quadratic"


def test_no_quadratic_on_a_line():
    x, y = synth(6, 60)
    snap = analyze_points(x, y)
    assert not snap.quadratic_applies and snap.knee_tokens is None


def test_knee_found_and_line_fitted_above():
    x = np.resize(np.geomspace(32, 8192, 12).round(), 72)
    rng = np.random.default_rng(7)
    y = np.maximum(0.08, 0.02 + x / 20000) * (1 + 0.03 * rng.standard_normal(len(x)))
    k = detect_knee(x, y)
    assert k is not None and 600 <= k <= 2000  # true knee at 1200 tokens
    snap = analyze_points(x, y)
    assert snap.knee_tokens == k and snap.fit.knee_tokens == k
    assert abs(snap.fit.prefill_tokens_per_s / 20000 - 1) < 0.05
    assert detect_knee(*synth(8, 60)) is None


def _probe(n, y, **kw):
    return ProbeResult(seq=0, requested_tokens=n, prompt_tokens=n, ttft_s=y, ok=True, **kw)


def test_running_fit_excludes_ineligible():
    rf = RunningFit(window=10)
    assert not rf.add(_probe(100, 0.1, warmup=True))
    assert not rf.add(_probe(100, 0.1, cached_tokens=50))
    assert not rf.add(ProbeResult(requested_tokens=100, ok=False, error_kind="timeout"))
    assert rf.add(_probe(100, 0.1))
    assert len(rf) == 1 and rf.snapshot() is None


def test_running_fit_matches_batch_and_window():
    x, y = synth(9, 120)
    rf = RunningFit(window=30, sample_size=64)
    for xi, yi in zip(x, y):
        rf.add(_probe(int(xi), float(yi)))
    s = rf.snapshot("all", "ols")
    ref = fit_ols(x, y)
    assert s.sampled and s.n_points == 120
    assert s.fit.method == "ols"
    assert s.fit.slope_s_per_token == pytest.approx(ref.slope_s_per_token, rel=1e-9)
    assert s.fit.slope_ci == pytest.approx(ref.slope_ci, rel=1e-9)
    assert s.fit.r2 == pytest.approx(ref.r2, rel=1e-9)
    assert rf.snapshot("all", "ols") is s  # cached until the next add
    r = rf.snapshot("all", "robust")
    assert r.fit.method == "robust" and r.fit.sampled
    assert abs(r.fit.prefill_tokens_per_s / 25000 - 1) < 0.05
    w = rf.snapshot("window", "ols")
    wref = fit_ols(x[-30:], y[-30:])
    assert w.n_points == 30 and w.fit.slope_s_per_token == pytest.approx(wref.slope_s_per_token)
    px, py = rf.points()
    assert np.array_equal(px, x) and np.array_equal(py, y)
    assert np.allclose(rf.residuals(s.fit), y - (s.fit.intercept_s + s.fit.slope_s_per_token * x))
    json.dumps(r.to_json())
    rf.reset()
    assert len(rf) == 0 and rf.snapshot() is None
    with pytest.raises(ValueError):
        rf.snapshot("bogus")
    with pytest.raises(ValueError):
        rf.snapshot("all", "bogus")


def test_running_fit_time_window():
    rf = RunningFit(window=100, window_s=60)
    for i in range(50):
        rf.add_point(float(LENGTHS[i % 7]), 0.03 + LENGTHS[i % 7] / 25000, started_at=10.0 * i)
    x, _ = rf.window_points()
    assert len(x) == 7  # started within the last 60 s of the newest (t = 430..490)


def test_linearfit_json_is_finite_and_complete():
    f = fit_robust(*synth(10, 30))
    d = f.to_json()
    for k in ("intercept_s", "slope_s_per_token", "prefill_tokens_per_s", "r2", "n",
              "intercept_ci", "slope_ci", "prefill_tokens_per_s_ci", "method"):
        assert k in d
    assert all(v is None or not isinstance(v, float) or math.isfinite(v) for v in d.values())
    assert isinstance(f, LinearFit) and isinstance(analyze_points(*synth(1, 10)), FitSnapshot)


ANCHORED = np.unique(np.round(np.geomspace(4, 8192, 10)))


def _jittered(seed, n, a=0.005, b=1 / 50000, jitter=0.002):
    rng = np.random.default_rng(seed)
    x = np.resize(ANCHORED, n)
    rng.shuffle(x)
    y = (a + b * x) * (1 + 0.05 * rng.standard_normal(n)) + jitter * rng.standard_normal(n)
    return x, y


def test_noise_floor_is_estimated_and_recorded():
    """Additive jitter (2 ms at a 5 ms fixed cost) gives a noise floor s0 > 0; pure
    multiplicative noise a small one; 0.0 forces the pure relative fit."""
    x, y = _jittered(1, 100)
    f = fit_robust(x, y)
    assert f.noise_floor_s is not None and f.noise_floor_s > 0.005
    assert f.to_json()["noise_floor_s"] == pytest.approx(f.noise_floor_s)
    assert fit_robust(x, y, noise_floor_s=0.0).noise_floor_s == 0.0
    xm, ym = synth(2, 100, lengths=ANCHORED)
    assert fit_robust(xm, ym).noise_floor_s < 0.03  # well under the 2x cap (60 ms)
    assert fit_ols(x, y).noise_floor_s is None


def test_noise_floor_keeps_intercept_coverage_under_jitter():
    """Over 60 seeds the 95 % interval of the intercept covers the true 5 ms in >= 85 %
    of runs with the noise floor (the pure relative fit trusts the jittery 4-token
    probes too much and covers less)."""
    new = old = 0
    for seed in range(60):
        x, y = _jittered(100 + seed, 60)
        lo, hi = fit_robust(x, y).intercept_ci
        new += lo <= 0.005 <= hi
        lo, hi = fit_robust(x, y, noise_floor_s=0.0).intercept_ci
        old += lo <= 0.005 <= hi
    assert new >= 51 and new >= old


def test_wls_is_weighted_without_rejection():
    x, y = synth(3, 40, out_p=0.0)
    f = fit_wls(x, y)
    assert f.method == "wls" and f.n == 40 and f.outliers == 0
    assert f.prefill_tokens_per_s == pytest.approx(25000, rel=0.05)
