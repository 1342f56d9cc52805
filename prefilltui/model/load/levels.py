"""TTFT against offered load: one row per background-load level (``sweep
--load-levels``), and the knee where queueing takes over.  Pure.

Each level gets its own fit: ``level_view`` hands the level's probes to the usual
analysis as if idle (``load_level`` cleared), so they never enter the idle-server fit
(``ProbeResult.fit_eligible``) and every level is fitted the same way.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Sequence

from prefilltui.model.diagnosis import probe_parts
from prefilltui.model.fit import LinearFit, fit_ols
from prefilltui.model.fit import fit_robust
from prefilltui.model.loadspec import LoadKind
from prefilltui.model.fit import finite_median
from prefilltui.model.load.stall import DecodeTrace, itl_quantiles, probe_window
from prefilltui.model.types import ProbeResult
from prefilltui.model.units import ms

#: Queue share of the median TTFT at which queueing has "taken over" (the knee).
KNEE_QUEUE_SHARE = 0.5


def level_of(r: ProbeResult) -> float:
    """The load level a probe ran at (0 when no load ran)."""
    return float(r.load_level or 0.0)


def level_view(results: Iterable[ProbeResult], level: float) -> list[ProbeResult]:
    """The probes of one level, with ``load_level`` cleared so the usual analysis
    (``analysis.analyze``, ``RunningFit``) fits them: the level's own fit."""
    return [replace(r, load_level=None) for r in results if level_of(r) == level]


def levels_in(results: Iterable[ProbeResult]) -> list[float]:
    """The levels present among the probes, ascending."""
    return sorted({level_of(r) for r in results if not r.warmup})


@dataclass(frozen=True, slots=True)
class LevelRow:
    """One load level (seconds; medians over the level's ok probes).

    ttft_p50_s and the split queue / prefill / overhead (where the server reports
    them for the probe itself; ``queue_share`` = queue / TTFT, ``queue_n`` probes had
    it); wait_s: TTFT above the idle fit at the probe's length (queueing and
    interference together; None without an idle level), ``wait_share`` = wait / TTFT;
    throughput_tok_s of the level's fit with
    its 95 % interval; itl_p50_s / itl_p99_s: the decodes' gaps while the level ran
    (client side); stall_s / excess_s at the longest prompt (``stall_tokens``);
    waiting: the server's waiting requests (median).
    """

    level: float
    kind: LoadKind | None
    probes: int
    ttft_p50_s: float | None
    queue_s: float | None
    prefill_s: float | None
    overhead_s: float | None
    queue_share: float | None
    queue_n: int
    wait_s: float | None
    wait_share: float | None
    throughput_tok_s: float | None
    throughput_ci: tuple[float | None, float | None]
    itl_p50_s: float | None
    itl_p99_s: float | None
    itl_n: int
    stall_s: float | None
    excess_s: float | None
    stall_tokens: int | None
    waiting: float | None


@dataclass(frozen=True, slots=True)
class LevelTable:
    """Every level's row, the knee (the first level whose queue share reaches
    ``KNEE_QUEUE_SHARE``; None when none does) and one line saying so."""

    rows: tuple[LevelRow, ...]
    kind: LoadKind | None
    knee: float | None
    knee_line: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _fit(rs: Sequence[ProbeResult]) -> tuple[float | None, tuple[float | None, float | None]]:
    pts = [(float(r.tokens), float(r.ttft_s)) for r in rs if r.level_eligible]
    if len(pts) < 3 or len({x for x, _ in pts}) < 2:
        return None, (None, None)
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    f = fit_robust(xs, ys) or fit_ols(xs, ys)
    if f is None or f.prefill_tokens_per_s is None:
        return None, (None, None)
    lo, hi = f.prefill_tokens_per_s_ci if f.prefill_tokens_per_s_ci else (None, None)
    fin = lambda v: float(v) if v is not None and math.isfinite(v) else None  # noqa: E731
    return f.prefill_tokens_per_s, (fin(lo), fin(hi))


def level_span(rs: Sequence[ProbeResult]) -> tuple[float, float] | None:
    """The time the level's probes ran (first send .. last window end)."""
    ws = [w for w in (probe_window(r) for r in rs) if w is not None]
    return (min(w[0] for w in ws), max(w[1] for w in ws)) if ws else None


def level_row(level: float, rs: Sequence[ProbeResult],
              traces: Sequence[DecodeTrace] = (), idle: LinearFit | None = None) -> LevelRow:
    """The row of one level from its probes (``rs``), the load's traces and the idle
    fit (``idle``: TTFT = a + b*n with no load)."""
    ok = [r for r in rs if r.level_eligible]  # no warm-up, no accidental cache hit
    parts = [probe_parts(r) for r in ok]
    ttft = finite_median(r.ttft_s for r in ok)
    queue = finite_median(p.queue_s for p in parts)
    wait = (finite_median(max(0.0, r.ttft_s - idle.predict(r.tokens)) for r in ok)
            if idle is not None and ok else None)
    tp, ci = _fit(ok)
    span = level_span(ok)
    p50, p99, n = itl_quantiles(traces, span) if span and traces else (None, None, 0)
    longest = max((r.requested_tokens for r in ok if r.decode_stall_s is not None), default=None)
    at_top = [r for r in ok if r.requested_tokens == longest]
    top_tokens = finite_median(r.prompt_tokens for r in at_top)
    return LevelRow(
        level=level, kind=next((r.load_kind for r in ok if r.load_kind), None),
        probes=len(ok), ttft_p50_s=ttft, queue_s=queue,
        prefill_s=finite_median(p.prefill_s for p in parts),
        overhead_s=finite_median(p.overhead_s for p in parts),
        queue_share=(queue / ttft) if queue is not None and ttft else None,
        queue_n=sum(1 for p in parts if p.queue_s is not None), wait_s=wait,
        wait_share=(wait / ttft) if wait is not None and ttft else None,
        throughput_tok_s=tp, throughput_ci=ci, itl_p50_s=p50, itl_p99_s=p99, itl_n=n,
        stall_s=finite_median(r.decode_stall_s for r in at_top),
        excess_s=finite_median(r.decode_excess_s for r in at_top),
        stall_tokens=int(top_tokens) if top_tokens is not None else longest,
        waiting=finite_median(r.server_waiting for r in ok))


def level_table(results: Iterable[ProbeResult], traces: Sequence[DecodeTrace] = (),
                idle: LinearFit | None = None) -> LevelTable | None:
    """The load-level table of a run (None with a single level and no load).  ``idle``:
    the idle fit to hold TTFT against (default: the fit of level 0's probes)."""
    results = list(results)
    lv = levels_in(results)
    if not lv or (lv == [0.0] and not any(r.load_kind for r in results)):
        return None
    if idle is None and 0.0 in lv:
        idle = _line([r for r in results if level_of(r) == 0.0])
    rows = tuple(level_row(v, [r for r in results if level_of(r) == v], traces, idle)
                 for v in lv)
    kind = next((r.kind for r in rows if r.kind), None)
    knee = next((r.level for r in rows if share(r) is not None
                 and share(r) >= KNEE_QUEUE_SHARE), None)
    return LevelTable(rows, kind, knee, knee_line(rows, knee, kind))


def _line(rs: Sequence[ProbeResult]) -> LinearFit | None:
    pts = [(float(r.tokens), float(r.ttft_s)) for r in rs if r.level_eligible]
    if len(pts) < 3 or len({x for x, _ in pts}) < 2:
        return None
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    return fit_robust(xs, ys) or fit_ols(xs, ys)


def share(r: LevelRow) -> float | None:
    """The queue share the knee reads: the server's own queue time when at least half
    the level's probes had it, else the wait above the idle fit."""
    if r.queue_share is not None and r.queue_n * 2 >= max(1, r.probes):
        return r.queue_share
    return r.wait_share


def _unit(kind: LoadKind | None, level: float) -> str:
    if kind == "rate":
        return f"{level:g} req/s"
    return f"{level:g} decode stream{'s' if level != 1 else ''}"


def knee_line(rows: Sequence[LevelRow], knee: float | None, kind: LoadKind | None) -> str:
    """"queueing takes over at 4 decode streams: queue 1.2 s of TTFT 2.0 s (60 %)"."""
    known = [r for r in rows if share(r) is not None]
    if not known:
        return ("knee: not enough data (no queue time of the probes' own and no idle level "
                "to hold TTFT against)")
    if knee is None:
        top = max(known, key=lambda r: share(r) or 0.0)
        where = f" (at {_unit(kind, top.level)})" if share(top) else ""
        return f"queueing never takes over: at most {share(top):.0%} of TTFT{where}"
    r = next(r for r in rows if r.level == knee)
    if r.queue_share is not None and share(r) == r.queue_share:
        what = f"queue {_ms(r.queue_s)}"
    else:
        what = f"waiting {_ms(r.wait_s)} above the idle TTFT"
    return (f"queueing takes over at {_unit(kind, knee)}: {what} of TTFT "
            f"{_ms(r.ttft_p50_s)} ({share(r):.0%})")


def _ms(s: float | None) -> str:
    return ms(s, 0)

