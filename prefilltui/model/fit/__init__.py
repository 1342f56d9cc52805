"""TTFT against prompt tokens, fitted: TTFT = a + b*n (+ c*n^2), with intervals.

``linear`` (``LinearFit``, OLS), ``robust`` (the default fit shown, WLS, quadratic,
knee), ``running`` (all-time and window fits kept probe by probe, ``RunningFit``),
``intercept`` (the fixed cost a, pinned or not, and the server's own), ``until_ci``
(probe until the throughput's interval is narrow), ``percentiles`` (TTFT p50/p90/p99 per
length), ``tdist`` (Student's t without scipy).  Pure: no I/O.  Seconds in data.

The rest of prefilltui imports this package, never its modules (an import-linter
contract); its modules import each other directly.
"""

from __future__ import annotations

from prefilltui.model.fit.intercept import (
    FixedCost, ServerFixedCost, fixed_cost, physical_ci, pin_bound_s, server_fixed_cost,
)
from prefilltui.model.fit.linear import (CONFIDENCE, TOO_NOISY, TOO_NOISY_WHY, LinearFit,
                                         fit_ols, throughput_text)
from prefilltui.model.fit.percentiles import (
    LengthRow, Quantiles, TtftPercentiles, finite_median, median_overhead_s, quantiles,
    ttft_percentiles,
)
from prefilltui.model.fit.robust import fit_robust
from prefilltui.model.fit.running import FitSnapshot, RunningFit
from prefilltui.model.fit.tdist import t_cdf, t_ppf
from prefilltui.model.fit.until_ci import ConfidenceTarget, Progress

__all__ = [
    "CONFIDENCE", "ConfidenceTarget", "FitSnapshot", "FixedCost", "LengthRow", "LinearFit",
    "Progress", "Quantiles", "RunningFit", "ServerFixedCost", "TOO_NOISY", "TOO_NOISY_WHY",
    "TtftPercentiles", "finite_median", "fit_ols", "fit_robust", "fixed_cost",
    "median_overhead_s", "physical_ci", "pin_bound_s", "quantiles", "server_fixed_cost",
    "t_cdf", "t_ppf", "throughput_text", "ttft_percentiles",
]
