"""Drift: is the live fit worse than a baseline run's fit beyond the uncertainty?

One computation for every command: ``report --baseline``, ``sweep --baseline`` and the
TUI's ``--baseline`` all fit a run with ``run_fit`` (the knee-aware all-time
``RunningFit`` snapshot, the fit the screen shows) and compare with ``drift``.

The test is Welch's: a rise of the slope (or intercept) counts when it exceeds
t(0.975, ν) · √(se₀² + se₁²), with each fit's own standard error and degrees of
freedom and ν from the Welch-Satterthwaite equation (Welch 1947).  With 6 points per
run (4 degrees of freedom each) ν = 8 and t = 2.306.  Imports no textual; the only
No I/O: ``prefilltui.measure.runfile.reader.load_baseline`` reads a baseline run file.
"""

from __future__ import annotations

import math
from typing import Iterable

from prefilltui.model.fit import CONFIDENCE, LinearFit
from prefilltui.model.fit import t_ppf
from prefilltui.model.fit import RunningFit
from prefilltui.model.types import FitMethod, ProbeResult
from prefilltui.model.units import duration

#: Changes smaller than these never warn, however tight the intervals (practical floor).
MIN_THROUGHPUT_CHANGE = 0.05  # 5 %
MIN_INTERCEPT_CHANGE_S = 0.005  # 5 ms


def run_fit(results: Iterable[ProbeResult], method: FitMethod = "robust") -> LinearFit | None:
    """The all-time fit of a run's fit-eligible probes, as the TUI and ``report`` show
    it (``RunningFit`` snapshot: knee-aware, robust or OLS); None below 3 points."""
    rf = RunningFit()
    for r in results:
        rf.add(r)
    snap = rf.snapshot("all", method)
    return snap.fit if snap is not None else None


def welch_df(se0: float, df0: float, se1: float, df1: float) -> float:
    """Welch-Satterthwaite degrees of freedom of the difference of two estimates."""
    num = (se0 * se0 + se1 * se1) ** 2
    den = se0 ** 4 / df0 + se1 ** 4 / df1
    return num / den if den > 0 else max(df0, df1)


def threshold(se0: float, df0: float, se1: float, df1: float) -> float:
    """The smallest rise that is significant at 95 % (two-sided): t(ν) · √(se₀² + se₁²)."""
    nu = welch_df(se0, df0, se1, df1)
    tq = t_ppf(0.5 + CONFIDENCE / 2, max(1, math.floor(nu + 1e-9)))  # df rounded down
    return tq * math.hypot(se0, se1)


def _df(fit: LinearFit) -> int:
    if fit.df is not None:
        return fit.df
    return max(1, fit.n - (3 if fit.c_s_per_token2 is not None else 2))




def drift(baseline_fit: LinearFit | None, live_fit: LinearFit | None) -> str | None:
    """A warning when the live fit is worse than the baseline beyond the uncertainty.

    Throughput: warns when the slope rose by more than ``threshold`` of the two slope
    standard errors and throughput fell >= 5 %.  Intercept: the same test on the
    intercept, and >= 5 ms.  Returns e.g. "prefill throughput −31 % vs baseline
    (1,200 → 830 tok/s)", both findings joined by "; ", or None (no fit, no
    significant worsening).
    """
    if baseline_fit is None or live_fit is None:
        return None
    msgs = []
    df0, df1 = _df(baseline_fit), _df(live_fit)
    b0, b1 = baseline_fit.slope_s_per_token, live_fit.slope_s_per_token
    se0, se1 = baseline_fit.slope_se, live_fit.slope_se
    if b0 and b0 > 0 and b1 and b1 > 0 and se0 is not None and se1 is not None:
        tp0, tp1 = 1 / b0, 1 / b1
        change = tp1 / tp0 - 1
        if b1 - b0 > threshold(se0, df0, se1, df1) and -change >= MIN_THROUGHPUT_CHANGE:
            msgs.append(f"prefill throughput {change * 100:+.0f} % vs baseline "
                        f"({tp0:,.0f} → {tp1:,.0f} tok/s)".replace("-", "−"))
    a0, a1 = baseline_fit.intercept_s, live_fit.intercept_s
    sa0, sa1 = baseline_fit.intercept_se_s, live_fit.intercept_se_s
    if sa0 is not None and sa1 is not None:
        if a1 - a0 > threshold(sa0, df0, sa1, df1) and a1 - a0 >= MIN_INTERCEPT_CHANGE_S:
            msgs.append(f"intercept +{duration(a1 - a0)} vs baseline ({duration(a0)} → {duration(a1)})")
    return "; ".join(msgs) or None
