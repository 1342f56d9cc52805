"""TTFT percentiles (p50 / p90 / p99) per prompt length and overall, with counts.

Over fit-eligible probes (ok, not warm-up, no prefix-cache hit), grouped by the
length the sweep asked for (``requested_tokens``; the server's count of the same
request varies by +-2 %).  Quantiles interpolate linearly between order statistics
(numpy's default), so with few probes p99 is close to the maximum: the count ``n``
beside each row says how much a tail figure rests on.  Seconds; no I/O.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from prefilltui.model.types import JsonObject, ProbeResult

QUANTILES = (0.50, 0.90, 0.99)


@dataclass(frozen=True, slots=True)
class Quantiles:
    """p50 / p90 / p99 of ``n`` TTFTs in seconds (None when ``n`` is 0)."""

    n: int = 0
    p50_s: float | None = None
    p90_s: float | None = None
    p99_s: float | None = None

    def to_json(self) -> JsonObject:
        return {"n": self.n, "p50_s": self.p50_s, "p90_s": self.p90_s, "p99_s": self.p99_s}


@dataclass(frozen=True, slots=True)
class LengthRow:
    """One requested prompt length over the probes in the fit (fit-eligible: ok, not
    warm-up, no cache hit): the server's count (median, None when it gave none), the
    TTFT quantiles and minimum, the server's own prefill time (median, when reported),
    and how many ok probes at this length the prefix cache served (kept out of the rest).
    Seconds."""

    requested_tokens: int
    prompt_tokens: int | None
    ttft: Quantiles
    ttft_min_s: float | None
    server_prefill_median_s: float | None
    cache_hits: int = 0

    @property
    def n(self) -> int:
        return self.ttft.n

    def to_json(self) -> JsonObject:
        return {"requested_tokens": self.requested_tokens, "prompt_tokens": self.prompt_tokens,
                **self.ttft.to_json(), "ttft_min_s": self.ttft_min_s,
                "server_prefill_median_s": self.server_prefill_median_s,
                "cache_hits": self.cache_hits}


@dataclass(frozen=True, slots=True)
class TtftPercentiles:
    """TTFT quantiles over every probe in the fit (``overall``) and per requested
    length (``by_length``, sorted by length): the run's one per-length table."""

    overall: Quantiles = Quantiles()
    by_length: tuple[LengthRow, ...] = ()

    def to_json(self) -> JsonObject:
        return {"overall": self.overall.to_json(),
                "by_length": [r.to_json() for r in self.by_length]}


def quantiles(values: Sequence[float]) -> Quantiles:
    """The quantiles of TTFTs in seconds (None values with n = 0)."""
    if len(values) == 0:
        return Quantiles()
    q = np.quantile(np.asarray(values, dtype=float), QUANTILES)
    return Quantiles(len(values), *(float(v) for v in q))


def ttft_percentiles(results: Iterable[ProbeResult]) -> TtftPercentiles:
    """The per-length table and overall quantiles of a run (see ``TtftPercentiles``)."""
    groups: dict[int, list[ProbeResult]] = {}
    hits: dict[int, int] = {}
    for r in results:
        n = int(r.requested_tokens or r.tokens or 0)
        if r.fit_eligible:
            groups.setdefault(n, []).append(r)
        elif r.ok and not r.warmup and r.cache_hit:
            hits[n] = hits.get(n, 0) + 1
    rows = []
    every: list[float] = []
    for n in sorted(set(groups) | set(hits)):
        rs = groups.get(n, [])
        t = [r.ttft_s for r in rs]
        every += t
        counted = [r.prompt_tokens for r in rs if r.prompt_tokens is not None]
        sp = [r.server_prefill_s for r in rs if r.server_prefill_s is not None]
        rows.append(LengthRow(
            requested_tokens=n,
            prompt_tokens=int(statistics.median(counted)) if counted else None,
            ttft=quantiles(t), ttft_min_s=min(t) if t else None,
            server_prefill_median_s=statistics.median(sp) if sp else None,
            cache_hits=hits.get(n, 0)))
    return TtftPercentiles(quantiles(every), tuple(rows))


def finite_median(vals: Iterable[float | int | None]) -> float | None:
    """Median of the finite values of ``vals`` (None, NaN and inf left out); None when
    none is left.  Same unit as the values; ints stay ints where the median is one."""
    v = [x for x in vals if x is not None and math.isfinite(x)]
    return statistics.median(v) if v else None


def median_overhead_s(results: Iterable[ProbeResult]) -> float | None:
    """Median of TTFT - server prefill over ok, non-warm-up probes with both (seconds):
    the client, network, HTTP and first-token part of TTFT."""
    return finite_median(r.ttft_s - r.server_prefill_s for r in results
                         if r.ok and not r.warmup and r.ttft_s is not None
                         and r.server_prefill_s is not None)
