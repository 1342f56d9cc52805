"""What TTFT should be: the expectation the verdict holds TTFT against, and its
uncertainty.

``Expectation``: the line TTFT = a + b*n of the server at its best and where it comes
from; ``margin_s``: how far the median of k probes may stray from the line by chance;
``throughput_expectation``: a line for an expected throughput alone;
``expected_words``: one length's expectation on screen.  How the expectation is held
over time (an incident cannot move it) is ``held.HeldExpectation``.  Pure.  Seconds in
data, ms only on screen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable

from prefilltui.model.fit import LinearFit
from prefilltui.model.fit import finite_median
from prefilltui.model.units import ms

#: Least absolute size of a cause (s): below it a share is noise on a fast server; TTFT
#: this close to its expectation is never above it (the floor of ``margin_s``).
MIN_QUEUE_S = 0.005
#: 95 % two-sided normal quantile, and the standard error of a median of k normal
#: values in units of sigma/sqrt(k) (sqrt(pi/2)): the spread of the probes' median.
Z95 = 1.96
MEDIAN_SE = math.sqrt(math.pi / 2)


@dataclass(frozen=True, slots=True)
class Expectation:
    """What TTFT should be, to hold the recent probes against.

    fit: TTFT = a + b*n of the server at its best (the idle fit held before any change,
    ``--baseline`` or the exporter's ``baseline_run`` / ``expected_throughput``);
    source: where it comes from ("idle fit", "baseline run ..."); mfu / mfu_level: the
    current MFU and its roofline verdict level (``analysis.assess``), when known.
    """

    fit: LinearFit | None = None
    source: str = ""
    mfu: float | None = None
    mfu_level: str | None = None


def median(vals: Iterable[float | int | None]) -> float | None:
    """``finite_median`` as a float."""
    m = finite_median(vals)
    return None if m is None else float(m)


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def line_at(fit: LinearFit, x: float) -> float:
    """``fit``'s TTFT (s) at ``x`` prompt tokens."""
    return fit.intercept_s + fit.slope_s_per_token * x


def expected_ttft(e: Expectation | None, n: int | float | None) -> float | None:
    """The expected TTFT (s) at ``n`` prompt tokens; None without a line or a length."""
    if e is None or e.fit is None or n is None:
        return None
    return e.fit.intercept_s + e.fit.slope_s_per_token * n


def margin_s(fit: LinearFit | None, n: float, k: int = 1) -> float:
    """The uncertainty (s) of the median TTFT of ``k`` probes at ``n`` prompt tokens
    around ``fit``'s line: the line's 95 % interval there (the intercept's and the
    slope's half-widths added: no covariance is kept, so this is the wider, safe
    bound) plus 1.96 x sqrt(pi/2) x the probes' scatter at ``n`` / sqrt(k) (the 95 %
    spread of a median of k probes); at least ``MIN_QUEUE_S``.  The scatter at ``n`` is
    the fit's own noise model (``LinearFit.noise_sd_s``): for the robust fit, the
    relative scatter of every probe (those that met another request ahead, which normal
    traffic brings, included) x (the expected TTFT + the noise floor s0), so a short
    length is not held to the long probes' milliseconds; for OLS, the residual s.d.
    ``inf`` without a usable interval (a fit of 3 probes at start-up: nothing is named
    on it)."""
    if fit is None:
        return math.inf
    lo, hi = fit.intercept_ci
    slo, shi = fit.slope_ci
    half = (hi - lo) / 2 + max(0.0, n) * (shi - slo) / 2
    spread = Z95 * MEDIAN_SE * fit.noise_sd_s(n) / math.sqrt(max(1, k))
    m = half + spread
    return max(m, MIN_QUEUE_S) if math.isfinite(m) else math.inf


def throughput_expectation(tokens_per_s: float, intercept: LinearFit | None, source: str
                           ) -> LinearFit | None:
    """A line for an expected throughput alone (the exporter's ``expected_throughput``:
    slope 1/``tokens_per_s``, taken as exact) with ``intercept``'s fixed cost and its
    interval and scatter (the held idle fit's); None without an intercept or a positive
    throughput.  ``source`` names it in the method field."""
    if intercept is None or not tokens_per_s or not math.isfinite(tokens_per_s) or tokens_per_s <= 0:
        return None
    b = 1.0 / tokens_per_s
    return replace(intercept, slope_s_per_token=b, slope_ci=(b, b), prefill_tokens_per_s=tokens_per_s,
                   prefill_tokens_per_s_ci=(tokens_per_s, tokens_per_s), method=source,
                   c_s_per_token2=None, c_ci=None, knee_tokens=None, slope_se=0.0)


def expected_words(tokens: int, expected_s: float, margin_s: float) -> str:
    """One length's expectation on screen: "128 tok 70 ± 4 ms"; when the uncertainty is
    as large as the expected TTFT itself the fit does not pin it there, and it says so
    ("4 tok not pinned (± 12,639 ms)") instead of a value that means nothing.  ms only
    here, seconds in."""
    if not (margin_s < expected_s):  # NaN / inf included
        return f"{tokens:,} tok not pinned (± {ms(margin_s, 0)})"
    return f"{tokens:,} tok {ms(expected_s, 0, unit=False)} ± {ms(margin_s, 0)}"
