"""How much slower than the held line the probes' prefill is, and what healthy groups
of probes do: the statistics behind "prefill is slower" and behind "above" once the
held line has seen enough healthy probes.

``slowdown`` reads the probes whose prefill stands above their scatter (the long ones:
a 64-token probe's excess at 2x is within its own noise, and the median excess over
every length missed a 2x slower prefill); ``group_scatter`` measures, over the held
pool of healthy probes, how far runs of k consecutive probes go above the line with
contention in bursts included, so a group is "above" only past what healthy groups
did.  Pure.  Seconds in data.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from prefilltui.model.diagnosis.expectation import MEDIAN_SE, Z95, finite, line_at, median
from prefilltui.model.fit import LinearFit
from prefilltui.model.types import ProbeResult

#: A probe's prefill stands above its scatter when b n is at least this many times the
#: fit's noise at n: its ratio (TTFT - a) / (b n) then scatters by at most a quarter (a
#: 64-token probe at 15 % noise on a 12-ms fixed cost read 1.34x one time in three).
VISIBLE = 4
#: The newest probes the slowdown is read over, and the fewest of them whose prefill
#: stands above the scatter it needs (of the exporter's six lengths about half do: a
#: median of three read 2.3x when two of them met a user's prompt).
SLOW_GROUP = 12
SLOW_VISIBLE = 5
#: The share of those that must be at least ``SLOW_MIN`` x: a slowdown moves every
#: long probe, contention with a user's prompt one or two.
SLOW_SHARE = 2 / 3
#: The least slowdown named on its own (x the line's per-token time): past the
#: scatter of a line held on hundreds of probes, below the ``SLOW`` a cause names.
SLOW_MIN = 1.2
#: The least slowdown named before the held pool has seen healthy groups (its
#: ``group_scatter`` empty): the ``SLOW`` a cause names (1/0.75), so the first minutes
#: name a 1.5x slower prefill, not contention's 1.2x.
SLOW_UNSEEN = 1 / 0.75
#: The healthy groups' percentile a group must pass (1 % of healthy runs of
#: consecutive probes would, before the other tests), and the fewest runs it is read from.
GROUP_Q = 0.99
GROUP_MIN = 50


def slowdown(group: Sequence[ProbeResult], fit: LinearFit) -> tuple[float, float] | None:
    """(f, its 95 % half-width): how many times the line's per-token time the probes'
    prefill took, f = the median of (TTFT - a) / (b n) over the probes of ``group``
    whose b n is at least ``VISIBLE`` x the centre's scatter at n (``centre_sd``).  The
    half-width: 1.96 x sqrt(pi/2) x the median of sd / (b n) / sqrt(k) (a median's),
    plus the line's own slope interval (relative).  None with fewer than
    ``SLOW_VISIBLE`` such probes, no positive slope, or fewer than ``SLOW_SHARE`` of
    them at least ``SLOW_MIN`` x (one 2k probe behind a user's chunk read 1.3x alone)."""
    return factor([(r.tokens, r.ttft_s) for r in group], fit)


def factor(pairs: Iterable[tuple[float | int | None, float | None]], fit: LinearFit,
           consistent: bool = True) -> tuple[float, float] | None:
    """``slowdown`` over (prompt tokens, TTFT s) pairs; ``consistent`` False: without
    the ``SLOW_SHARE`` test (the healthy groups' scatter of f)."""
    b = fit.slope_s_per_token
    if not (finite(b) and b > 0):
        return None
    rows = []
    for n, y in pairs:
        if not n or not finite(y):
            continue
        sd, bn = centre_sd(fit, n), b * n
        if finite(sd) and bn >= VISIBLE * sd:
            rows.append(((y - fit.intercept_s) / bn, sd / bn if sd > 0 else 0.0))
    if len(rows) < SLOW_VISIBLE:
        return None
    f = median(x for x, _ in rows)
    if f is None or (consistent and sum(1 for x, _ in rows if x >= SLOW_MIN)
                     < SLOW_SHARE * len(rows)):
        return None
    slo, shi = fit.slope_ci
    rel = (shi - slo) / 2 / b if finite(slo) and finite(shi) else math.inf
    spread = Z95 * MEDIAN_SE * (median(e for _, e in rows) or 0.0) / math.sqrt(len(rows))
    return f, spread + rel


def centre_sd(fit: LinearFit, n: float) -> float:
    """The s.d. (s) of the centre of one probe's TTFT at ``n``: the robust fit's MAD
    scale x (TTFT(n) + s0) where it has one (the s.d. of every relative residual, which
    a few probes behind a user's prompt make large, hid every length's prefill), else
    the fit's own noise model (``noise_sd_s``)."""
    if fit.rel_scale and fit.noise_floor_s is not None:
        return fit.rel_scale * (max(fit.predict(max(0.0, n)), 0.0) + fit.noise_floor_s)
    return fit.noise_sd_s(n)


def group_scatter(pairs: Sequence[tuple[float, float]], fit: LinearFit,
                  sizes: Sequence[int]) -> tuple[tuple[int, float, float], ...]:
    """``LinearFit.group_scatter`` of time-ordered healthy (tokens, TTFT s) ``pairs``
    around ``fit``: for each group size k, over every run of k consecutive probes, the
    ``GROUP_Q`` percentile of the runs' median relative excess (TTFT - line) / line
    and of their slowdown (``factor`` without its consistency test; NaN with fewer than
    ``GROUP_MIN`` runs that have one).  A size with fewer than ``GROUP_MIN`` runs is
    left out."""
    rel = []
    for n, y in pairs:
        e = line_at(fit, n)
        rel.append((y - e) / e if e > 0 and finite(y) else math.nan)
    out = []
    for k in sizes:
        runs = len(pairs) - k + 1
        if runs < GROUP_MIN:
            continue
        ex, sl = [], []
        for i in range(runs):
            m = median(x for x in rel[i:i + k] if finite(x))
            if m is not None:
                ex.append(m)
            f = factor(pairs[i:i + k], fit, consistent=False)
            if f is not None:
                sl.append(f[0])
        if len(ex) < GROUP_MIN:
            continue
        q_sl = _quantile(sl, GROUP_Q) if len(sl) >= GROUP_MIN else math.nan
        out.append((int(k), _quantile(ex, GROUP_Q), q_sl))
    return tuple(out)


def _quantile(vals: list[float], q: float) -> float:
    v = sorted(vals)
    return float(v[min(len(v) - 1, int(math.ceil(q * len(v))) - 1)])
