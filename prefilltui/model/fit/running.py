"""Per-probe fit state: all-time and sliding-window fits of TTFT on prompt tokens.

Cost per probe (``add``) is O(1): centred running sums for the all-time OLS (Welford
updates, numerically stable), an amortised append to growable arrays, and one step
of reservoir sampling (Vitter's Algorithm R, seeded, so the same run gives the same
sample) that keeps a uniform sample of at most ``sample_size`` points.  A snapshot
then costs O(sample_size) whatever the run length: the robust fit, the knee search
and the quadratic fit run on the sample once more points than that have been seen
(the OLS stays exact from the running sums).  With 2,048 sampled points the robust
fit's statistical error on 1/b is ~0.2 % at 5 % noise -- well below the drift the
window fit is there to show.  Snapshots are cached until the next ``add``; the
sample-based fits are kept until the sample changes (a new point enters it with
probability sample_size/n: 20 % of probes at 10k points, 2 % at 100k), so most
probes of a long run cost O(1) for the all-time view plus the small window fit.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

import numpy as np

from prefilltui.model.fit.linear import LinearFit, fit_ols, fit_ols_moments
from prefilltui.model.fit.robust import detect_knee, fit_quadratic, fit_robust
from prefilltui.model import defaults
from prefilltui.model.types import FitMethod, FitScope, JsonObject, ProbeResult

QUAD_MIN_SHARE = 0.05  # quadratic used when c*n_max^2 is >= 5 % of TTFT at n_max


@dataclass(frozen=True, slots=True)
class FitSnapshot:
    """One view of the fit.  ``fit`` is the one to show: ``method`` ("robust" or
    "ols"), fitted above ``knee_tokens`` when a knee was found.  ``quadratic`` is
    the a + b*n + c*n^2 fit when there is enough data; ``quadratic_applies`` when
    its c is significantly > 0 (95 % interval above 0) and adds >= 5 % of TTFT at the
    longest prompt.  ``n_points`` = eligible points in scope (all-time or window)."""

    which: FitScope
    method: FitMethod
    fit: LinearFit | None
    ols: LinearFit | None
    robust: LinearFit | None
    quadratic: LinearFit | None
    quadratic_applies: bool
    knee_tokens: int | None
    n_points: int
    sampled: bool

    def to_json(self) -> JsonObject:
        j = lambda f: None if f is None else f.to_json()  # noqa: E731
        return {
            "which": self.which, "method": self.method, "n_points": self.n_points,
            "sampled": self.sampled, "knee_tokens": self.knee_tokens,
            "fit": j(self.fit), "ols": j(self.ols), "robust": j(self.robust),
            "quadratic": j(self.quadratic), "quadratic_applies": self.quadratic_applies,
        }


def analyze_points(x, y, *, which: FitScope = "all", method: FitMethod = "robust", seed: int = 0,
                   ols: LinearFit | None = None, sampled: bool = False,
                   n_points: int | None = None, x_full=None, y_full=None,
                   quadratic: bool = True) -> FitSnapshot | None:
    """Fits of one point set (tokens ``x``, seconds ``y``).  None with < 3 points.

    ``ols`` -- a precomputed OLS over the full set (RunningFit's running sums);
    ``x_full``/``y_full`` -- the full set when ``x``/``y`` is a sample (for OLS above a knee);
    ``quadratic`` -- False leaves the quadratic fit out (None; the linear fits are the same).
    Raises ValueError for an unknown ``method``.
    """
    if method not in ("robust", "ols"):
        raise ValueError(f"method must be 'robust' or 'ols', got {method!r}")
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if len(x) < 3:
        return None
    robust = fit_robust(x, y, seed=seed)
    knee = detect_knee(x, y, seed=seed, fit=robust)
    if knee is not None:
        sel = x >= knee
        robust = fit_robust(x[sel], y[sel], seed=seed)
        robust = robust and _with(robust, knee=knee, sampled=sampled or robust.sampled)
        ols = _ols_above(knee, x if x_full is None else x_full, y if y_full is None else y_full)
        quad = fit_quadratic(x[sel], y[sel], seed=seed) if quadratic else None
    else:
        robust = robust and _with(robust, sampled=sampled or robust.sampled)
        if ols is None:
            ols = fit_ols(x if x_full is None else x_full, y if y_full is None else y_full)
        quad = fit_quadratic(x, y, seed=seed) if quadratic else None
    return _assemble(which, method, robust, ols, quad, knee,
                     len(x) if n_points is None else n_points, sampled)


def _ols_above(knee, x, y) -> LinearFit | None:
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    sel = x >= knee
    f = fit_ols(x[sel], y[sel])
    return f and _with(f, knee=knee)


def _quad_applies(quad: LinearFit | None) -> bool:
    if quad is None or quad.c_ci is None or quad.c_ci[0] <= 0:
        return False
    top = quad.x_max
    total = quad.predict(top)
    return bool(total > 0 and quad.c_s_per_token2 * top * top >= QUAD_MIN_SHARE * total
                and quad.slope_s_per_token > 0)


def _assemble(which, method, robust, ols, quad, knee, n_points, sampled) -> FitSnapshot:
    return FitSnapshot(which=which, method=method, fit=robust if method == "robust" else ols,
                       ols=ols, robust=robust, quadratic=quad, quadratic_applies=_quad_applies(quad),
                       knee_tokens=knee, n_points=n_points, sampled=sampled)


def _with(fit: LinearFit, *, knee=None, sampled=None) -> LinearFit:
    kw = {}
    if knee is not None:
        kw["knee_tokens"] = int(knee)
    if sampled is not None:
        kw["sampled"] = bool(sampled)
    return replace(fit, **kw)


class RunningFit:
    """Fits updated probe by probe (see the module docstring for the cost model).

    window: the sliding window holds the last ``window`` eligible probes; with
    ``window_s`` it also drops probes started more than that many seconds before the
    newest.  Not thread-safe: feed it from one thread (the TUI's message handler).
    """

    def __init__(self, window: int = defaults.WINDOW, *, window_s: float | None = None,
                 sample_size: int = 2048, seed: int = 0) -> None:
        if window < 3:
            raise ValueError(f"window must be >= 3 probes, got {window}")
        self.window = int(window)
        self.window_s = window_s
        self.sample_size = int(sample_size)
        self.seed = seed
        self.reset()

    def reset(self) -> None:
        """Forget every point."""
        self._cap = 1024
        self._x = np.empty(self._cap)
        self._y = np.empty(self._cap)
        self._t = np.empty(self._cap)
        self._n = 0
        self._mx = self._my = self._cxx = self._cxy = self._cyy = 0.0
        self._xmin, self._xmax = math.inf, -math.inf
        self._rx = np.empty(self.sample_size)
        self._ry = np.empty(self.sample_size)
        self._rng = random.Random(self.seed)
        self._cache: dict[str, FitSnapshot | None] = {}
        self._res_version = 0  # bumps when the reservoir sample changes
        self._sample_snap: FitSnapshot | None = None
        self._sample_version = -1

    def __len__(self) -> int:
        return self._n

    @property
    def n(self) -> int:
        return self._n

    def add(self, result: ProbeResult) -> bool:
        """Add one probe; ignored (returns False) unless ``result.fit_eligible``."""
        if not result.fit_eligible:
            return False
        self.add_point(float(result.tokens), float(result.ttft_s), float(result.started_at or 0.0))
        return True

    def add_point(self, tokens: float, ttft_s: float, started_at: float = 0.0) -> None:
        """Add one (tokens, seconds) point directly (benchmarks, tests).  O(1) amortised."""
        if not (math.isfinite(tokens) and math.isfinite(ttft_s)):
            return
        i = self._n
        if i == self._cap:
            self._cap *= 2
            for name in ("_x", "_y", "_t"):
                arr = np.empty(self._cap)
                arr[:i] = getattr(self, name)[:i]
                setattr(self, name, arr)
        self._x[i], self._y[i], self._t[i] = tokens, ttft_s, started_at
        n = i + 1
        dx, dy = tokens - self._mx, ttft_s - self._my
        self._mx += dx / n
        self._my += dy / n
        self._cxx += dx * (tokens - self._mx)
        self._cxy += dx * (ttft_s - self._my)
        self._cyy += dy * (ttft_s - self._my)
        self._xmin, self._xmax = min(self._xmin, tokens), max(self._xmax, tokens)
        if i < self.sample_size:
            self._rx[i], self._ry[i] = tokens, ttft_s
        else:
            j = self._rng.randrange(n)
            if j < self.sample_size:
                self._rx[j], self._ry[j] = tokens, ttft_s
                self._res_version += 1
        self._n = n
        self._cache.clear()

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, seconds) of every eligible point, in arrival order (read-only views)."""
        x, y = self._x[: self._n], self._y[: self._n]
        x.flags.writeable = y.flags.writeable = False
        return x, y

    def residuals(self, fit: LinearFit) -> np.ndarray:
        """TTFT - fit(n) in seconds for every eligible point (arrival order); O(n)."""
        x, y = self.points()
        return y - fit.predict(x)

    def window_points(self) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, seconds) of the sliding window."""
        lo = max(0, self._n - self.window)
        if self.window_s is not None and self._n:
            t = self._t[lo: self._n]
            lo += int(np.searchsorted(t, t[-1] - self.window_s, side="left")) if np.all(np.diff(t) >= 0) else 0
        return self._x[lo: self._n].copy(), self._y[lo: self._n].copy()

    def snapshot(self, which: FitScope = "all", method: FitMethod = "robust"
                 ) -> FitSnapshot | None:
        """The fits for ``which`` ("all" | "window"); None with < 3 eligible points.

        Raises ValueError for an unknown ``which`` or ``method``."""
        if which not in ("all", "window"):
            raise ValueError(f"which must be 'all' or 'window', got {which!r}")
        if method not in ("robust", "ols"):
            raise ValueError(f"method must be 'robust' or 'ols', got {method!r}")
        base = self._cache.get(which)
        if base is None:
            base = self._compute(which)
            self._cache[which] = base
        if base is None or base.method == method:
            return base
        key = f"{which}:{method}"
        if key not in self._cache:
            self._cache[key] = _assemble(which, method, base.robust, base.ols, base.quadratic,
                                         base.knee_tokens, base.n_points, base.sampled)
        return self._cache[key]

    def window_fit(self, method: FitMethod = "robust") -> FitSnapshot | None:
        """``snapshot("window", method)`` without its quadratic fit (None, not applying):
        the window's linear fits, knee and ``n_points``, all a summary's window part
        reads (``analysis.window_summary``).  The full window snapshot when it is
        cached; else cached itself until the next ``add``.  The quadratic's robust fit
        was about a fifth of a live summary's cost (cProfile, TUI redraw).

        Raises ValueError for an unknown ``method``."""
        if method not in ("robust", "ols"):
            raise ValueError(f"method must be 'robust' or 'ols', got {method!r}")
        if "window" in self._cache:
            return self.snapshot("window", method)
        key = f"window-linear:{method}"
        if key not in self._cache:
            base = self._cache.get("window-linear")
            if "window-linear" not in self._cache:
                x, y = self.window_points()
                base = analyze_points(x, y, which="window", seed=self.seed, quadratic=False)
                self._cache["window-linear"] = base
            self._cache[key] = base if base is None or base.method == method else _assemble(
                "window", method, base.robust, base.ols, None, base.knee_tokens,
                base.n_points, base.sampled)
        return self._cache[key]

    def _compute(self, which: str) -> FitSnapshot | None:
        if which == "window":
            x, y = self.window_points()
            return analyze_points(x, y, which="window", seed=self.seed)
        if self._n <= self.sample_size:
            return analyze_points(self._x[: self._n], self._y[: self._n], which="all", seed=self.seed)
        ols = fit_ols_moments(self._n, self._mx, self._my, self._cxx, self._cxy,
                              self._cyy, self._xmin, self._xmax)
        prev = self._sample_snap
        if prev is not None and self._sample_version == self._res_version:
            # The reservoir did not change: only the exact all-time OLS moved.
            if prev.knee_tokens is not None:
                ols = _ols_above(prev.knee_tokens, self._x[: self._n], self._y[: self._n])
            return _assemble("all", "robust", prev.robust, ols, prev.quadratic, prev.knee_tokens,
                             self._n, True)
        snap = analyze_points(self._rx, self._ry, which="all", seed=self.seed, ols=ols,
                              sampled=True, n_points=self._n, x_full=self._x[: self._n],
                              y_full=self._y[: self._n])
        self._sample_snap, self._sample_version = snap, self._res_version
        return snap
