"""An objective over a fleet: each replica worst first, and the fleet's attainment
from merged counts (``replicas_worst_first``, ``merged_attainment``,
``merged_buckets``).

The fleet's attainment is the merged counts' (the good and total requests summed over
the replicas, or their histograms' bucket counts summed bound by bound), never an
average of the replicas' shares or percentiles: a quiet replica at 50 % and a busy one
at 99.9 % are not a fleet at 75 %.  Histograms merge only at the bounds every replica
has (a bound missing from one is dropped: the share is then known at coarser bounds,
which ``Attainment.bounds_s`` says).  Pure: no I/O.
"""

from __future__ import annotations

import math
from typing import Sequence

from prefilltui.model.slo.attainment import Attainment, attainment_from_buckets
from prefilltui.model.slo.objective import Objective


def replicas_worst_first(rows: Sequence[tuple[str, Attainment | None]]
                         ) -> list[tuple[str, Attainment | None]]:
    """(replica, attainment) by the budget left, least first; replicas without
    requests last, by name."""
    def key(row):
        label, a = row
        left = a.budget_left if a is not None and a.total else None
        return (left is None, left if left is not None else 0.0, label)
    return sorted(rows, key=key)


def merged_attainment(objective: Objective, parts: Sequence[Attainment | None]
                      ) -> Attainment | None:
    """The fleet's attainment: the replicas' good (at least / at most) and total counts
    summed; None without requests.  Parts of another objective are left out.  The
    source is the parts' when they share one, else "probes" only when every part is
    the probes' (a mix of the users' and the probes' is no attainment of either)."""
    ps = [p for p in parts if p is not None and p.total > 0
          and p.objective.threshold_s == objective.threshold_s
          and p.objective.percentile == objective.percentile]
    if not ps:
        return None
    sources = {p.source for p in ps}
    if len(sources) > 1:
        return None
    window = max((p.window_s for p in ps if p.window_s is not None), default=None)
    bounds = ps[0].bounds_s if all(p.bounds_s == ps[0].bounds_s for p in ps) else None
    return Attainment(objective, sum(p.good_lo for p in ps), sum(p.good_hi for p in ps),
                      sum(p.total for p in ps), ps[0].source, bounds, window)


def merged_buckets(histograms: Sequence[Sequence[tuple[float, float]]]
                   ) -> list[tuple[float, float]]:
    """Cumulative histograms (upper bound s, count <= it; +Inf included) summed at the
    bounds every one of them has; [] when none is given or one has no +Inf bucket."""
    if not histograms:
        return []
    maps = [{float(le): float(c) for le, c in h} for h in histograms]
    if any(math.inf not in m for m in maps):
        return []
    common = set(maps[0]).intersection(*maps[1:])
    return [(le, sum(m[le] for m in maps)) for le in sorted(common)]


def fleet_from_buckets(objective: Objective, histograms: Sequence[Sequence[tuple[float, float]]],
                       window_s: float | None = None) -> Attainment | None:
    """The fleet's attainment from its replicas' TTFT histograms (``merged_buckets``,
    then ``attainment_from_buckets``: the share known at the bucket bounds)."""
    merged = merged_buckets(histograms)
    return attainment_from_buckets(merged, objective, window_s) if merged else None
