"""The exporter's TTFT objectives: the counters Prometheus computes burn rates from
(``SloCounters``) and what a snapshot shows of each objective (``SloFigures``).

Counters, per objective and ``source``: ``users`` (each user's span counted once, as
it arrives: TTFT <= threshold is good) and ``probes`` (each successful probe, the
fit's: prefilltui's own requests, at the configured lengths).  Prometheus takes their
rates over the workbook's windows (deploy/prefilltui-alerts.yml); the gauges beside
them (attainment over the kept spans, n_max, budget left) come from the window's
summary (``model.slo.SloStatus``).  Spans are counted when a probe's result publishes
a snapshot (so at the probe interval).  Not thread-safe: the prober's thread only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prefilltui.model.slo import Objective, SloStatus, resolve
from prefilltui.model.slo import SloItem
from prefilltui.model.users import UserRequest


@dataclass(frozen=True, slots=True)
class SloFigures:
    """One objective on ``/metrics``: its counts (requests, good) by source, and its
    state from the window's summary (None before one)."""

    objective: Objective
    counts: tuple[tuple[str, int, int], ...]  # (source, requests, good)
    status: SloStatus | None = None


class SloCounters:
    """Good and total requests per objective key and source, cumulative."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], list[int]] = {}
        self._last_user: UserRequest | None = None

    def _add(self, objectives: tuple[Objective, ...], source: str, ttft_s: float) -> None:
        for o in objectives:
            c = self._counts.setdefault((o.key, source), [0, 0])
            c[0] += 1
            c[1] += ttft_s <= o.threshold_s

    def probe(self, objectives: tuple[Objective, ...], ttft_s: float | None) -> None:
        """One successful probe's TTFT (s); a missing or non-finite one is not counted."""
        if ttft_s is not None and math.isfinite(ttft_s) and ttft_s >= 0:
            self._add(objectives, "probes", ttft_s)

    def users(self, objectives: tuple[Objective, ...], kept: tuple[UserRequest, ...]) -> None:
        """The users' kept requests (oldest first, ``UsersTrace.recent()``): those after
        the last one counted are counted (all of them when it has left the kept ones,
        which then are all newer)."""
        start = 0
        if self._last_user is not None:
            for i in range(len(kept) - 1, -1, -1):
                if kept[i] is self._last_user:
                    start = i + 1
                    break
        for u in kept[start:]:
            if u.ttft_s is not None and math.isfinite(u.ttft_s) and u.ttft_s >= 0:
                self._add(objectives, "users", u.ttft_s)
        if kept:
            self._last_user = kept[-1]

    def figures(self, objectives: tuple[Objective, ...], statuses: tuple[SloStatus, ...]
                ) -> tuple[SloFigures, ...]:
        """Each objective's counts (zeros included, so rates work from the start) and its
        status from ``statuses`` (matched by key)."""
        by = {st.objective.key: st for st in statuses}
        out = []
        for o in objectives:
            counts = tuple((src, *self._counts.get((o.key, src), [0, 0])) for src in ("users", "probes"))
            out.append(SloFigures(o, counts, by.get(o.key)))  # type: ignore[arg-type]
        return tuple(out)


def objectives_of(items: tuple[SloItem, ...], model: str | None) -> tuple[Objective, ...]:
    """The target's objectives for its server's model (presets resolved)."""
    return resolve(items, model)[0] if items else ()
