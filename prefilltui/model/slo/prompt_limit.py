"""The longest prompt that meets an objective now: ``PromptLimit``, ``longest_prompt``.

From the fitted line TTFT = a + b·n, the percentile's offset above it and the queueing
the line's probes did not see, the longest prompt n_max whose TTFT at the objective's
percentile stays within its threshold S:

    a + b·n + z_q·sd(n) + queue = S        (n_max = (S - a - queue - z_q·sd) / b
                                            when sd does not depend on n)

- ``z_q·sd(n)``: the percentile's offset, an *estimate*: the fit's own noise model
  (``LinearFit.noise_sd_s``: relative scatter times (TTFT + s0) for the robust fit,
  the residual s.d. for OLS) times the normal quantile z_q (2.326 at p99, 1.282 at
  p90).  Normal scatter is an assumption: a heavier tail makes n_max too long.
- ``queue``: waiting the probes did not see (the users' queue time, when known);
  the probes' own queueing is already in a.
- The 95 % interval: the line drawn through the ends of the intercept's and the
  slope's 95 % intervals together (a_hi with b_hi gives the shortest n, a_lo with b_lo
  the longest).  The fit keeps no covariance, so this takes them at their worst
  together: it is wider than the line's own 95 % band (it covers at least as often),
  and it covers the line only, not the scatter's estimate or the queue.
Solved by bisection on n, so a quadratic fit's c·n² is honoured too.  Pure: no I/O.
Seconds and tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist

from prefilltui.model.fit import LinearFit
from prefilltui.model.slo.objective import Objective

#: The longest prompt searched (tokens): beyond any model's context today; a line that
#: meets the objective there is "no limit in reach" (``unbounded``).
N_SEARCH_MAX = 10_000_000
#: Bisection steps: 2^-60 of the range, far below one token.
_STEPS = 60


@dataclass(frozen=True, slots=True)
class PromptLimit:
    """The longest prompt meeting ``objective`` by one fit.

    tokens -- n_max (prompt tokens; 0: not even an empty prompt meets it; None with
      ``unbounded``: every prompt up to ``N_SEARCH_MAX`` meets it);
    ci -- (shortest, longest) n_max of the 95 % interval (None: unbounded that way);
    offset_s -- the percentile's estimated offset above the line at n_max (s);
    queue_s -- the queueing added (s); line -- which line ("idle" / "now");
    extrapolated -- n_max lies beyond the longest probe the fit saw (``fit.x_max``):
      the line is trusted where it was not measured.
    """

    objective: Objective
    tokens: int | None
    ci: tuple[int | None, int | None]
    offset_s: float
    queue_s: float
    line: str
    extrapolated: bool
    unbounded: bool = False

    def to_json(self) -> dict:
        return {"objective": self.objective.key, "tokens": self.tokens,
                "ci": list(self.ci), "offset_s": self.offset_s, "queue_s": self.queue_s,
                "line": self.line, "extrapolated": self.extrapolated,
                "unbounded": self.unbounded}


def z_of(percentile: float) -> float:
    """The standard normal quantile at ``percentile`` % (2.326 at 99)."""
    return NormalDist().inv_cdf(percentile / 100.0)


def _solve(fit: LinearFit, z: float, budget_s: float) -> int | None:
    """The largest n in [0, N_SEARCH_MAX] with predict(n) + z·sd(n) <= budget_s, as
    an int; 0 when even n = 0 misses it, None when n = N_SEARCH_MAX meets it.
    The left side grows with n for a positive slope (and a non-negative c)."""
    g = lambda n: fit.predict(n) + z * fit.noise_sd_s(n)  # noqa: E731
    if g(0.0) > budget_s:
        return 0
    if g(float(N_SEARCH_MAX)) <= budget_s:
        return None
    lo, hi = 0.0, float(N_SEARCH_MAX)
    for _ in range(_STEPS):
        mid = 0.5 * (lo + hi)
        if g(mid) <= budget_s:
            lo = mid
        else:
            hi = mid
        if hi - lo < 0.5:
            break
    return int(math.floor(lo))


def longest_prompt(fit: LinearFit | None, objective: Objective, *, queue_s: float = 0.0,
                   line: str = "now") -> PromptLimit | None:
    """n_max for ``objective`` by ``fit`` (see the module docstring), ``queue_s``
    (seconds, >= 0; a bad value counts as 0) added to every TTFT.  None without a
    fit, with a slope that is not positive or whose 95 % interval reaches 0
    (``LinearFit.unresolved``: the probes do not yet say how TTFT grows), or with
    non-finite coefficients."""
    if fit is None or fit.unresolved or not (fit.slope_s_per_token > 0):
        return None
    if not all(math.isfinite(v) for v in (fit.intercept_s, fit.slope_s_per_token)):
        return None
    q = queue_s if queue_s is not None and math.isfinite(queue_s) and queue_s > 0 else 0.0
    z = z_of(objective.percentile)
    room = objective.threshold_s - q
    n = _solve(fit, z, room)
    (a_lo, a_hi), (b_lo, b_hi) = fit.intercept_ci, fit.slope_ci
    worst = replace(fit, intercept_s=a_hi, slope_s_per_token=b_hi)
    best = replace(fit, intercept_s=a_lo, slope_s_per_token=b_lo)
    short = _solve(worst, z, room)
    long_ = _solve(best, z, room) if b_lo > 0 else None
    at = float(n) if n is not None else float(N_SEARCH_MAX)
    return PromptLimit(objective=objective, tokens=n, ci=(short, long_),
                       offset_s=z * fit.noise_sd_s(at), queue_s=q, line=line,
                       extrapolated=n is not None and n > fit.x_max,
                       unbounded=n is None)
