"""The TTFT fit's result and its least-squares form: TTFT = a + b*n (+ c*n^2), with intervals.

a = intercept_s (fixed cost: network, tokenize, scheduling, queueing), b =
slope_s_per_token, 1/b = prefill throughput in prompt tokens/s, c = the n^2 term
(attention over long prompts).  Every fit carries 95 % t-intervals; the interval
for 1/b is b's interval inverted (an upper bound of ``None`` = unbounded, when
b's interval reaches 0).

This module holds the result type ``LinearFit``, ``make_fit`` (a ``LinearFit`` with
its t-intervals from coefficients and their covariance, shared by every estimator),
``clean_xy`` (the estimators' input check) and the ordinary least squares estimator:
  ``fit_ols``          classical standard errors, t(n-2) intervals.
  ``fit_ols_moments``  the same from running centred sums (``RunningFit``'s O(1) path).
The robust default (``fit_robust``), ``fit_wls``, ``fit_quadratic`` and ``detect_knee``
are in ``robust_fit``; Student's t in ``tdist``; per-probe updates are
``running_fit.RunningFit``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from prefilltui.model.fit.tdist import t_ppf
from prefilltui.model.types import JsonObject

import numpy as np


CONFIDENCE = 0.95
#: What stands in for the throughput of a fit whose slope's 95 % interval includes 0
#: (``LinearFit.unresolved``: 1/b is no throughput yet), wherever one is stated
#: (``throughput_text``); ``TOO_NOISY_WHY`` says why, where there is room.
TOO_NOISY = "too noisy yet"
TOO_NOISY_WHY = "the slope's 95% interval includes 0"


def _fnum(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


@dataclass(frozen=True, slots=True)
class LinearFit:
    """TTFT = intercept_s + slope_s_per_token * n (+ c_s_per_token2 * n^2).

    Intervals are 95 % two-sided t-intervals ``(lo, hi)``.  ``prefill_tokens_per_s`` is
    1/slope (prompt tokens/s; None when the slope is <= 0); ``prefill_tokens_per_s_ci`` is the
    slope interval inverted, ``hi`` None when the slope interval reaches 0.
    ``n`` = points the fit used (inliers for a robust fit); ``n_offered`` = points
    given (after any subsample); ``sampled`` = the robust fit saw a subsample.
    ``rel_scale`` = residual scale relative to TTFT (robust) ; ``resid_std_s`` =
    residual standard deviation in seconds; ``intercept_se_s`` / ``slope_se`` =
    standard errors (s, s/token) and ``df`` their degrees of freedom (points used
    minus parameters; the intervals use Student's t with it).  ``noise_floor_s`` =
    the robust fit's additive noise floor s0 (seconds; None for OLS).  ``rel_scatter``
    = the s.d. of every offered point's relative residual (y - yhat)/(yhat + s0), the
    probes that met another request included (``rel_scale``, a robust scale, discounts
    them; None for OLS): with s0 the noise model ``noise_sd_s`` reads.
    ``residuals`` (seconds, y - yhat for the points offered) is kept out of JSON and
    equality.
    """

    intercept_s: float
    slope_s_per_token: float
    intercept_ci: tuple[float, float]
    slope_ci: tuple[float, float]
    prefill_tokens_per_s: float | None
    prefill_tokens_per_s_ci: tuple[float | None, float | None]
    r2: float
    n: int
    method: str
    n_offered: int = 0
    x_min: float = 0.0
    x_max: float = 0.0
    resid_std_s: float = 0.0
    rel_scale: float | None = None
    sampled: bool = False
    c_s_per_token2: float | None = None
    c_ci: tuple[float, float] | None = None
    knee_tokens: int | None = None
    intercept_se_s: float | None = None
    slope_se: float | None = None
    df: int | None = None
    noise_floor_s: float | None = None
    rel_scatter: float | None = None
    residuals: np.ndarray | None = field(default=None, compare=False, repr=False)
    #: the scatter of groups of k consecutive probes seen while the server was healthy:
    #: (k, the 99th percentile of a group's median relative excess (TTFT - line) /
    #: line, the 99th percentile of its prefill slowdown factor or NaN), set on a held
    #: expectation only (``diagnosis.HeldExpectation``): what a group of healthy
    #: probes does, contention in bursts included, against which a group is "above"
    group_scatter: tuple[tuple[int, float, float], ...] = field(default=(), compare=False,
                                                                repr=False)

    def group_scatter_for(self, k: int) -> tuple[float, float] | None:
        """(excess, slowdown) 99th percentiles of the healthy groups of the size nearest
        ``k`` (``group_scatter``), or None when none was seen."""
        if not self.group_scatter:
            return None
        _, ex, sl = min(self.group_scatter, key=lambda g: abs(g[0] - k))
        return ex, sl

    @property
    def outliers(self) -> int:
        return max(0, self.n_offered - self.n)

    @property
    def unresolved(self) -> bool:
        """True when the slope's 95 % interval reaches 0 or below: the probes do not yet
        tell how TTFT grows with the prompt, so 1/b is no prefill throughput yet (a
        noisy early fit; R² near or below 0)."""
        lo = self.slope_ci[0] if self.slope_ci else None
        return lo is not None and math.isfinite(lo) and lo <= 0

    def predict(self, n: Any) -> Any:
        """TTFT in seconds at ``n`` prompt tokens (scalar or ndarray)."""
        y = self.intercept_s + self.slope_s_per_token * np.asarray(n, dtype=float)
        if self.c_s_per_token2 is not None:
            y = y + self.c_s_per_token2 * np.asarray(n, dtype=float) ** 2
        return float(y) if np.ndim(y) == 0 else y

    def noise_sd_s(self, n: float) -> float:
        """The s.d. (s) of one probe's TTFT at ``n`` prompt tokens by this fit's own
        noise model.  A robust fit models it as s_rel x (TTFT(n) + s0) (the module
        docstring of ``robust``): s_rel = ``rel_scatter`` (at least ``rel_scale``),
        s0 = ``noise_floor_s``, so a 20 ms probe's scatter is its own and not a 2 s
        probe's 100 ms.  Any other fit (OLS: the same noise at every length), or a
        robust one without its relative scatter: ``resid_std_s``."""
        rel = self.rel_scatter
        if rel is None or self.noise_floor_s is None:
            return self.resid_std_s or 0.0
        rel = max(rel, self.rel_scale or 0.0)
        return rel * (max(self.predict(max(0.0, n)), 0.0) + self.noise_floor_s)

    def to_json(self) -> JsonObject:
        ci = lambda p: None if p is None else [_fnum(p[0]), _fnum(p[1])]  # noqa: E731
        d = {
            "method": self.method,
            "intercept_s": _fnum(self.intercept_s),
            "intercept_ci": ci(self.intercept_ci),
            "slope_s_per_token": _fnum(self.slope_s_per_token),
            "slope_ci": ci(self.slope_ci),
            "prefill_tokens_per_s": _fnum(self.prefill_tokens_per_s),
            "prefill_tokens_per_s_ci": ci(self.prefill_tokens_per_s_ci),
            "r2": _fnum(self.r2),
            "n": self.n,
            "n_offered": self.n_offered,
            "outliers": self.outliers,
            "sampled": self.sampled,
            "x_min": _fnum(self.x_min),
            "x_max": _fnum(self.x_max),
            "resid_std_s": _fnum(self.resid_std_s),
            "rel_scale": _fnum(self.rel_scale),
            "knee_tokens": self.knee_tokens,
            "intercept_se_s": _fnum(self.intercept_se_s),
            "slope_se": _fnum(self.slope_se),
            "noise_floor_s": _fnum(self.noise_floor_s),
            "rel_scatter": _fnum(self.rel_scatter),
        }
        if self.c_s_per_token2 is not None:
            d["c_s_per_token2"] = _fnum(self.c_s_per_token2)
            d["c_ci"] = ci(self.c_ci)
        return d


def throughput_text(fit: LinearFit | None, unit: str = "prompt tok/s") -> str | None:
    """A fit's throughput as every renderer states it (the verdict, the text summary,
    the TUI, report's plots): "1,234 prompt tok/s" (1/b, grouped, then ``unit``, if any), or
    ``TOO_NOISY`` while the slope's 95 % interval includes 0 (``unresolved``); None
    without a fit or a positive slope."""
    if fit is None:
        return None
    tps = _fnum(fit.prefill_tokens_per_s)
    if tps is None or tps <= 0:
        return None
    if fit.unresolved:
        return TOO_NOISY
    return f"{tps:,.0f} {unit}".rstrip()


def _invert_ci(lo: float, hi: float) -> tuple[float | None, float | None]:
    if hi <= 0:
        return (None, None)
    if lo <= 0:
        return (1.0 / hi, None)
    return (1.0 / hi, 1.0 / lo)


def make_fit(beta, cov, df, *, r2, n, method, n_offered, x, resid, rel_scale=None,
              sampled=False, knee=None, noise_floor=None) -> LinearFit:
    """A ``LinearFit`` from coefficients ``beta`` (a, b[, c]; seconds, s/token, s/token^2)
    and their covariance ``cov`` (p x p): 95 % t-intervals with ``df`` degrees of
    freedom, 1/b and its inverted interval, the residual spread of ``resid`` (s); with a
    ``noise_floor`` s0 (a robust fit), also the s.d. of ``resid`` / (yhat + s0)
    (``rel_scatter``)."""
    tq = t_ppf(0.5 + CONFIDENCE / 2, max(int(df), 1))
    se = [float(v) for v in np.sqrt(np.maximum(np.diag(cov), 0.0))]
    a, b = float(beta[0]), float(beta[1])
    slope_ci = (b - tq * se[1], b + tq * se[1])
    c = c_ci = None
    if len(beta) > 2:
        c = float(beta[2])
        c_ci = (c - tq * se[2], c + tq * se[2])
    return LinearFit(
        intercept_s=a, slope_s_per_token=b,
        intercept_ci=(a - tq * se[0], a + tq * se[0]), slope_ci=slope_ci,
        prefill_tokens_per_s=(1.0 / b) if b > 0 else None,
        prefill_tokens_per_s_ci=_invert_ci(*slope_ci), r2=float(r2), n=int(n), method=method,
        n_offered=int(n_offered), x_min=float(np.min(x)), x_max=float(np.max(x)),
        resid_std_s=float(np.std(resid)) if len(resid) else 0.0, rel_scale=rel_scale,
        sampled=sampled, c_s_per_token2=c, c_ci=c_ci, knee_tokens=knee,
        intercept_se_s=se[0], slope_se=se[1], df=max(int(df), 1), noise_floor_s=noise_floor,
        rel_scatter=_rel_scatter(beta, x, resid, noise_floor), residuals=resid,
    )


def _rel_scatter(beta, x, resid, s0) -> float | None:
    """The s.d. (ddof 1) of ``resid`` / (yhat + ``s0``) over the points ``x``; None
    without s0, with fewer than 3 points or residuals that are not the points'."""
    x = np.asarray(x, dtype=float)
    resid = np.asarray(resid, dtype=float)
    if s0 is None or len(resid) < 3 or resid.shape != x.shape:
        return None
    yhat = sum(float(c) * x**k for k, c in enumerate(beta))
    scale = np.maximum(yhat, 0.0) + s0
    ok = scale > 0
    r = resid[ok] / scale[ok]
    r = r[np.isfinite(r)]
    return float(np.std(r, ddof=1)) if len(r) >= 3 else None


# ---------------------------------------------------------------- OLS


def _ols_moments(n, mx, my, cxx, cxy, cyy, sse=None):
    """(a, b, cov 2x2, sse, r2) from centred sums (``sse`` from residuals when given,
    which is more precise); cxx > 0 and n >= 3 required."""
    b = cxy / cxx
    a = my - b * mx
    if sse is None:
        sse = max(cyy - b * cxy, 0.0)
    s2 = sse / (n - 2)
    var_b = s2 / cxx
    var_a = s2 * (1.0 / n + mx * mx / cxx)
    cov_ab = -mx * var_b
    r2 = 1.0 - sse / cyy if cyy > 0 else 1.0
    return a, b, np.array([[var_a, cov_ab], [cov_ab, var_b]]), sse, r2


def clean_xy(x, y):
    """(x, y) as flat float arrays without the pairs holding a NaN or inf.

    Raises:
        ValueError: when x and y differ in length.
    """
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y differ in length: {x.shape} vs {y.shape}")
    ok = np.isfinite(x) & np.isfinite(y)
    return (x, y) if ok.all() else (x[ok], y[ok])


def fit_ols(x, y) -> LinearFit | None:
    """Ordinary least squares of y (s) on x (tokens); None with < 3 points or constant x.

    Classical standard errors, t(n-2) intervals.  Raises ValueError on length mismatch.
    """
    x, y = clean_xy(x, y)
    n = len(x)
    if n < 3 or np.ptp(x) == 0:
        return None
    mx, my = x.mean(), y.mean()
    dx, dy = x - mx, y - my
    cxx, cxy = dx @ dx, dx @ dy
    resid = dy - (cxy / cxx) * dx
    a, b, cov, _sse, r2 = _ols_moments(n, mx, my, cxx, cxy, dy @ dy, sse=float(resid @ resid))
    return make_fit((a, b), cov, n - 2, r2=r2, n=n, method="ols", n_offered=n, x=x, resid=resid)


def fit_ols_moments(n, mx, my, cxx, cxy, cyy, x_min, x_max) -> LinearFit | None:
    """OLS from running centred sums (RunningFit's O(1) path); residuals not kept."""
    if n < 3 or cxx <= 0:
        return None
    a, b, cov, sse, r2 = _ols_moments(n, mx, my, cxx, cxy, cyy)
    fit = make_fit((a, b), cov, n - 2, r2=r2, n=n, method="ols", n_offered=n,
                   x=np.array([x_min, x_max]), resid=np.empty(0))
    return replace(fit, resid_std_s=math.sqrt(sse / n), residuals=None)

