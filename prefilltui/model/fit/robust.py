"""Robust TTFT fits: ``fit_robust`` (the default shown), ``fit_wls``, ``fit_quadratic``, ``detect_knee``.

  ``fit_wls``    weighted least squares, weights 1/yhat^2 (iterated from OLS), no
                 rejection; kept for the fit benchmark, which compares the three.
  ``fit_robust`` (the default shown).  Start: Theil-Sen (median of pairwise slopes,
                 pairs subsampled deterministically above 100 points so it stays
                 O(n)); then iteratively reweighted least squares on *relative*
                 residuals (y - yhat)/(yhat + s0) -- a few Huber steps, then Tukey bisquare
                 (c = 4.685, 95 % efficiency at the normal; Huber 1981, Beaton &
                 Tukey 1974).  Relative residuals because prefill noise scales with
                 TTFT: a 5 % wobble on a 2 s probe must not look like an outlier
                 beside 20 ms probes.  Bisquare rejects queueing spikes outright
                 (x3 is > 30 scale units at 5 % noise) where Huber or Theil-Sen
                 would still lean towards them.  s0 is the noise floor: probe noise
                 is modelled as sd ~ s_rel*(yhat + s0), i.e. a relative part plus an
                 additive jitter (scheduling, network) that dominates the shortest
                 probes; s0 = alpha/beta from a Theil-Sen line |residual| = alpha +
                 beta*yhat of a first pure-relative fit, kept within [0, 2 x the
                 shortest fitted TTFT].  Without s0 the short anchoring probes are
                 over-trusted and the intercept's interval covers too rarely
                 (tests/bench/bench_fit.py).  Its interval is least squares on
                 the inliers (|r| < 4.685 scale), weighted 1/(yhat + s0)^2, with the
                 larger of the classical and the HC3 (heteroscedasticity-
                 consistent) covariance, t with m - p degrees of freedom.
Also: ``fit_quadratic`` (same machinery, 3 columns) and ``detect_knee`` (flat, then
linear), which share the design matrices and weighted least squares below.  The
result type, the OLS estimator and the intervals' construction are in ``fit``.
"""

from __future__ import annotations

import math

from prefilltui.model.fit.linear import LinearFit, clean_xy, fit_ols, make_fit

import numpy as np


HUBER_C = 1.345  # Huber (1981): 95 % efficiency at the normal
BISQUARE_C = 4.685  # Beaton & Tukey (1974): 95 % efficiency at the normal
MAD_TO_SIGMA = 1.4826  # 1 / Phi^-1(0.75)
PAIRS_MAX = 5000  # Theil-Sen start: pairwise slopes sampled above ~100 points
HUBER_STEPS = 5  # Huber IRLS steps (scale re-estimated) before the bisquare steps
#: Largest noise floor s0, as a multiple of the shortest fitted TTFT: beyond it the
#: weights are nearly flat (OLS), whose slope interval covers badly (bench_fit).
NOISE_FLOOR_MAX = 2.0

# ---------------------------------------------------------------- robust


def _design(x, p):
    """Columns 1, x/s, (x/s)^2 with s = max|x| (conditioning); returns (X, scales)."""
    s = float(np.max(np.abs(x))) or 1.0
    cols = [np.ones_like(x), x / s] + ([(x / s) ** 2] if p > 2 else [])
    return np.column_stack(cols), np.array([1.0, s, s * s][:p])


def _wls(X, y, w):
    """Weighted least squares by the normal equations (columns are pre-scaled to
    [0, 1], so X'WX is well conditioned for p <= 3); lstsq as the fallback."""
    Xw = X * w[:, None]
    try:
        return np.linalg.solve(X.T @ Xw, Xw.T @ y)
    except np.linalg.LinAlgError:
        sw = np.sqrt(w)
        return np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)[0]


def _median(a: np.ndarray) -> float:
    """Median of a 1-D float array via one partition (np.median's overhead dominates
    the small arrays of the window fit)."""
    n = len(a)
    k = n // 2
    if n % 2:
        return float(np.partition(a, k)[k])
    part = np.partition(a, (k - 1, k))
    return 0.5 * float(part[k - 1] + part[k])


def _theil_sen_start(x, y, seed: int):
    m = len(x)
    if m <= 100:
        i, j = np.triu_indices(m, 1)
    else:
        rng = np.random.default_rng(seed)
        i = rng.integers(0, m, PAIRS_MAX)
        j = rng.integers(0, m, PAIRS_MAX)
    dx = x[j] - x[i]
    keep = dx != 0
    if not keep.any():
        return float(_median(y)), 0.0
    b = float(_median((y[j] - y[i])[keep] / dx[keep]))
    return float(_median(y - b * x)), b


def _robust_core(x, y, beta0, p, seed=0, s0=0.0):
    """IRLS on relative residuals (y - yhat)/(yhat + s0).  Returns (beta (unscaled),
    yhat + s0 (each point's noise scale, seconds), scale, inlier mask)."""
    X, sc = _design(x, p)
    floor = max(1e-3 * float(_median(np.abs(y))), 1e-12)
    beta = np.asarray(beta0, dtype=float) * sc  # to scaled coordinates
    scale = None
    for it in range(60):
        yhat = np.maximum(X @ beta, floor)
        r = (y - yhat) / (yhat + s0)
        if it < HUBER_STEPS or scale is None:
            scale = MAD_TO_SIGMA * float(_median(np.abs(r - _median(r))))
            if scale <= 1e-12:  # exact data: plain relative least squares
                scale = max(float(np.std(r)), 1e-12)
        u = r / scale
        if it < HUBER_STEPS:
            w = np.minimum(1.0, HUBER_C / np.maximum(np.abs(u), 1e-12))
        else:
            w = np.where(np.abs(u) < BISQUARE_C, (1 - (u / BISQUARE_C) ** 2) ** 2, 0.0)
        if np.count_nonzero(w) < p + 1:
            break
        new = _wls(X, y, w / (yhat + s0) ** 2)
        done = np.all(np.abs(new - beta) <= 1e-6 * (np.abs(beta) + 1e-12)) and it > HUBER_STEPS
        beta = new
        if done:
            break
    yhat = np.maximum(X @ beta, floor)
    r = (y - yhat) / (yhat + s0)
    inl = np.abs(r) < BISQUARE_C * scale
    return beta / sc, yhat + s0, scale, inl


def _noise_floor(x, y, beta0, p, seed) -> float:
    """s0 (seconds) of the variance model sd ~ s_rel*(yhat + s0): a pure-relative fit,
    then a Theil-Sen line through (yhat, |residual|) of its inliers; s0 = its
    intercept / slope, within [0, NOISE_FLOOR_MAX x the shortest fitted TTFT]
    (the cap also when the residuals do not grow with TTFT)."""
    _beta, yhat, _scale, inl = _robust_core(x, y, beta0, p, seed, 0.0)
    cap = NOISE_FLOOR_MAX * float(np.min(yhat))
    if np.count_nonzero(inl) < 4:
        return 0.0
    e = np.abs(y - yhat)[inl]
    alpha, beta = _theil_sen_start(yhat[inl], e, seed)
    if beta <= 0:
        return cap
    return float(min(max(alpha / beta, 0.0), cap))


def _inlier_wls(x, y, yhat, inl, p):
    """Weighted LS on inliers, weights 1/yhat^2 (``yhat`` = each point's noise scale);
    cov = max(classical, HC3) (scalar inflation)."""
    xs, ys, v = x[inl], y[inl], yhat[inl]
    X, sc = _design(xs, p)
    w = 1.0 / v**2
    Xw = X * np.sqrt(w)[:, None]
    beta = _wls(X, ys, w)
    m = len(xs)
    rw = (ys - X @ beta) * np.sqrt(w)
    xtx_inv = np.linalg.pinv(Xw.T @ Xw)
    cov = (rw @ rw) / max(m - p, 1) * xtx_inv
    h = np.einsum("ij,jk,ik->i", Xw, xtx_inv, Xw)
    e = rw / np.maximum(1.0 - h, 1e-6)
    hc3 = xtx_inv @ (Xw.T * e**2) @ Xw @ xtx_inv
    d_cls, d_hc3 = np.diag(cov), np.diag(hc3)
    ratio = np.max(np.where(d_cls > 0, d_hc3 / np.where(d_cls > 0, d_cls, 1), 1.0))
    cov = cov * max(1.0, float(ratio))
    return beta / sc, cov / np.outer(sc, sc), m


def fit_robust(x, y, *, max_points: int | None = 20000, seed: int = 0,
               noise_floor_s: float | None = None) -> LinearFit | None:
    """Robust TTFT = a + b*n (see the module docstring); None with < 3 points or constant x.

    Above ``max_points`` points a deterministic (``seed``) uniform subsample is fitted
    and ``sampled`` is set.  Residuals are for the points fitted.  ``noise_floor_s``:
    None estimates s0 from the data; 0.0 gives the pure relative-residual fit.
    """
    return _robust(x, y, p=2, max_points=max_points, seed=seed, s0=noise_floor_s)


def fit_wls(x, y, *, steps: int = 3) -> LinearFit | None:
    """Weighted least squares with weights 1/yhat^2 (yhat from OLS, re-estimated
    ``steps`` times), no rejection; cov = max(classical, HC3).  None as fit_ols."""
    x, y = clean_xy(x, y)
    f = fit_ols(x, y)
    if f is None:
        return None
    floor = max(1e-3 * float(_median(np.abs(y))), 1e-12)
    for _ in range(steps):
        yhat = np.maximum(f.predict(x), floor)
        beta, cov, m = _inlier_wls(x, y, yhat, np.ones(len(x), bool), 2)
        resid = y - (beta[0] + beta[1] * x)
        syy = float(((y - y.mean()) ** 2).sum())
        r2 = 1.0 - float(resid @ resid) / syy if syy > 0 else 1.0
        f = make_fit(beta, cov, m - 2, r2=r2, n=m, method="wls", n_offered=m, x=x, resid=resid)
    return f


def fit_quadratic(x, y, *, max_points: int | None = 20000, seed: int = 0,
                  robust: bool = True) -> LinearFit | None:
    """TTFT = a + b*n + c*n^2 (robust by default, else OLS); None with < 6 points or
    fewer than 4 distinct lengths.  ``c_s_per_token2`` and ``c_ci`` are set."""
    x, y = clean_xy(x, y)
    if len(x) < 6 or len(np.unique(x)) < 4:
        return None
    if not robust:
        X, sc = _design(x, 3)
        beta = _wls(X, y, np.ones_like(x))
        resid = y - X @ beta
        xtx_inv = np.linalg.pinv(X.T @ X)
        cov = (resid @ resid) / (len(x) - 3) * xtx_inv / np.outer(sc, sc)
        syy = float(((y - y.mean()) ** 2).sum())
        r2 = 1 - float(resid @ resid) / syy if syy > 0 else 1.0
        return make_fit(beta / sc, cov, len(x) - 3, r2=r2, n=len(x), method="ols-quadratic",
                        n_offered=len(x), x=x, resid=resid)
    return _robust(x, y, p=3, max_points=max_points, seed=seed, s0=None)


def _robust(x, y, *, p, max_points, seed, s0=None) -> LinearFit | None:
    x, y = clean_xy(x, y)
    n_all = len(x)
    if n_all < p + 1 or np.ptp(x) == 0:
        return None
    sampled = False
    if max_points is not None and n_all > max_points:
        idx = np.sort(np.random.default_rng(seed).choice(n_all, max_points, replace=False))
        x, y, sampled = x[idx], y[idx], True
    a0, b0 = _theil_sen_start(x, y, seed)
    beta0 = [a0, b0] + ([0.0] if p > 2 else [])
    if s0 is None:
        s0 = _noise_floor(x, y, beta0, p, seed)
    beta, yhat, scale, inl = _robust_core(x, y, beta0, p, seed, s0)
    if np.count_nonzero(inl) < p + 1:
        inl = np.ones_like(inl)
    beta, cov, m = _inlier_wls(x, y, yhat, inl, p)
    fitted = beta[0] + beta[1] * x + (beta[2] * x * x if p > 2 else 0.0)
    resid = y - fitted
    ri, yi = resid[inl], y[inl]
    syy = float(((yi - yi.mean()) ** 2).sum())
    r2 = 1.0 - float(ri @ ri) / syy if syy > 0 else 1.0
    return make_fit(beta, cov, m - p, r2=r2, n=m, method="robust" if p == 2 else "robust-quadratic",
                    n_offered=len(x), x=x, resid=resid, rel_scale=float(scale), sampled=sampled,
                    noise_floor=float(s0))


# ---------------------------------------------------------------- knee


def detect_knee(x, y, *, min_side: int = 3, candidates: int = 40, f_min: float = 20.0,
                seed: int = 0, fit: LinearFit | None = None) -> int | None:
    """Prompt length (tokens) below which TTFT is flat and above which it is linear.

    Model y = a + b*max(0, n - k), fitted on the robust fit's inliers with 1/(yhat + s0)^2
    weights for up to ``candidates`` k between the distinct lengths (>= ``min_side``
    distinct lengths each side).  Accepted when it beats the straight line by
    F = (SSE_lin - SSE_k) / (SSE_k / (m - 3)) > ``f_min`` (conservative: k is searched),
    cuts SSE by >= 30 %, and also beats a quadratic (a convex curve is attention, not
    a knee).  Returns None when there is no knee or too little data.
    """
    x, y = clean_xy(x, y)
    ux = np.unique(x)
    if len(ux) < 2 * min_side + 1:
        return None
    if fit is None or fit.sampled:
        fit = fit_robust(x, y, max_points=None, seed=seed)
    if fit is None:
        return None
    yhat = np.maximum(fit.predict(x), 1e-12)
    noise = yhat + (fit.noise_floor_s or 0.0)  # the robust fit's noise model
    inl = np.abs((y - yhat) / noise) < BISQUARE_C * (fit.rel_scale or 0) if fit.rel_scale else np.ones(len(x), bool)
    xs, ys, w = x[inl], y[inl], 1.0 / noise[inl] ** 2
    m = len(xs)
    if m < 7:
        return None
    ks = ux[min_side - 1: len(ux) - min_side]
    if len(ks) > candidates:
        ks = ks[np.linspace(0, len(ks) - 1, candidates).round().astype(int)]
    H = np.maximum(0.0, xs[None, :] - ks[:, None])  # (K, m)
    sw, swy, swyy = w.sum(), w @ ys, w @ (ys * ys)
    swh, swhh, swhy = H @ w, (H * H) @ w, H @ (w * ys)
    den = sw * swhh - swh**2
    good = den > 0
    b = np.where(good, (sw * swhy - swh * swy) / np.where(good, den, 1), 0)
    a = (swy - b * swh) / sw
    sse_k = swyy - a * swy - b * swhy
    sse_k = np.where(good, np.maximum(sse_k, 0), np.inf)
    i = int(np.argmin(sse_k))
    X = np.column_stack([np.ones(m), xs])
    beta = _wls(X, ys, w)
    sse_lin = float(w @ (ys - X @ beta) ** 2)
    best = float(sse_k[i])
    if not math.isfinite(best) or b[i] <= 0 or best >= 0.7 * sse_lin:
        return None
    if (sse_lin - best) / max(best / (m - 3), 1e-300) < f_min:
        return None
    Xq, _ = _design(xs, 3)
    bq = _wls(Xq, ys, w)
    if float(w @ (ys - Xq @ bq) ** 2) <= best:
        return None
    return int(round(float(ks[i])))
