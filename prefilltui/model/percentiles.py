"""TTFT percentiles (p50 / p90 / p99) per prompt length and overall, with counts.

Over fit-eligible probes (ok, not warm-up, no prefix-cache hit), grouped by the
length the sweep asked for (``requested_tokens``; the server's count of the same
request varies by +-2 %).  Quantiles interpolate linearly between order statistics
(numpy's default), so with few probes p99 is close to the maximum: the count ``n``
beside each row says how much a tail figure rests on.  Seconds; no I/O.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable, Sequence

import numpy as np

from prefilltui.model.types import ProbeResult

QUANTILES = (0.50, 0.90, 0.99)
KEYS = ("p50_s", "p90_s", "p99_s")


def quantiles(values: Sequence[float]) -> dict[str, Any]:
    """``{"n", "p50_s", "p90_s", "p99_s"}`` of TTFTs in seconds (None values with n = 0)."""
    if len(values) == 0:
        return {"n": 0, **dict.fromkeys(KEYS)}
    q = np.quantile(np.asarray(values, dtype=float), QUANTILES)
    return {"n": len(values), **{k: float(v) for k, v in zip(KEYS, q)}}


def ttft_percentiles(results: Iterable[ProbeResult]) -> dict[str, Any]:
    """``{"overall": quantiles, "by_length": [{"requested_tokens", "prompt_tokens"
    (median counted, or None), **quantiles}, ...]}`` sorted by length."""
    groups: dict[int, list[ProbeResult]] = {}
    for r in results:
        if r.fit_eligible:
            groups.setdefault(int(r.requested_tokens or r.tokens or 0), []).append(r)
    rows = []
    every: list[float] = []
    for n in sorted(groups):
        rs = groups[n]
        t = [r.ttft_s for r in rs]
        every += t
        counted = [r.prompt_tokens for r in rs if r.prompt_tokens is not None]
        rows.append({"requested_tokens": n,
                     "prompt_tokens": int(statistics.median(counted)) if counted else None,
                     **quantiles(t)})
    return {"overall": quantiles(every), "by_length": rows}


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    ms = v * 1e3
    return f"{ms:,.1f}" if ms < 100 else f"{ms:,.0f}"


def format_lines(p: dict[str, Any] | None, *, by_length: bool = True) -> list[str]:
    """Text lines (ms on screen): a table per length (when ``by_length``) and overall."""
    if not p or not p["overall"]["n"]:
        return []
    row = lambda label, q: (f"  {label:>9} {q['n']:>5} {_ms(q['p50_s']):>9} "  # noqa: E731
                            f"{_ms(q['p90_s']):>9} {_ms(q['p99_s']):>9}")
    out = ["TTFT percentiles (ms, fit-eligible probes):",
           f"  {'tokens':>9} {'n':>5} {'p50':>9} {'p90':>9} {'p99':>9}"]
    if by_length:
        out += [row(str(r["requested_tokens"]), r) for r in p["by_length"]]
    out.append(row("all", p["overall"]))
    return out
