"""Where a TTFT goes: client/network overhead + queueing + server prefill (+ the first
token), per probe and for the fit's intercept.

``breakdown(results, fit)`` splits each probe (``ProbeParts``) and the intercept
(``InterceptSplit``) into those parts and names the largest one in plain words
(``cause_line``).  Seconds throughout; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from prefilltui.model.fit import LinearFit
from prefilltui.model.fit import finite_median
from prefilltui.model.probe_notes import QueueSource
from prefilltui.model.fit import fit_robust
from prefilltui.model.types import JsonObject, ProbeResult
from prefilltui.model.units import duration, ms

_PARTS = ("overhead_s", "queue_s", "prefill_s")


@dataclass(frozen=True, slots=True)
class ProbeParts:
    """One probe's TTFT split (seconds; None where the server gave nothing).

    ``sum_error_s`` = ttft - (overhead + queue + prefill) when all are known (should be
    ~0: overhead is defined as the remainder, so this checks the bookkeeping);
    ``complete``: overhead, queue and prefill are all known.
    """

    seq: int
    tokens: int | None
    ttft_s: float | None
    overhead_s: float | None
    queue_s: float | None
    prefill_s: float | None
    server_ttft_s: float | None
    queue_source: QueueSource | None
    running: float | None
    waiting: float | None
    cached_tokens: int | None
    sum_error_s: float | None
    complete: bool


def probe_parts(r: ProbeResult) -> ProbeParts:
    """The TTFT split of one probe (see ``ProbeParts``)."""
    server_ttft = r.server_ttft_s
    prefill = r.server_prefill_s
    queue = r.queue_s
    overhead = r.overhead_s
    if server_ttft is not None and prefill is None and queue is not None:
        prefill = max(0.0, server_ttft - queue)  # server TTFT = queue + prefill (+ 1st token)
    err = None
    if r.ttft_s is not None and overhead is not None and prefill is not None:
        err = r.ttft_s - (overhead + (queue or 0.0) + prefill)
    return ProbeParts(seq=r.seq, tokens=r.tokens, ttft_s=r.ttft_s, overhead_s=overhead,
                      queue_s=queue, prefill_s=prefill, server_ttft_s=server_ttft,
                      queue_source=r.queue_source, running=r.server_running,
                      waiting=r.server_waiting, cached_tokens=r.cached_tokens, sum_error_s=err,
                      complete=all(p is not None for p in (overhead, queue, prefill)))


@dataclass(frozen=True, slots=True)
class PartMedians:
    """Medians over recent probes (seconds; running/waiting: the server's load gauges)."""

    ttft_s: float | None = None
    overhead_s: float | None = None
    queue_s: float | None = None
    prefill_s: float | None = None
    running: float | None = None
    waiting: float | None = None

    def to_json(self) -> JsonObject:
        return {"ttft_s": self.ttft_s, "overhead_s": self.overhead_s, "queue_s": self.queue_s,
                "prefill_s": self.prefill_s, "running": self.running, "waiting": self.waiting}


@dataclass(frozen=True, slots=True)
class InterceptSplit:
    """The fit's intercept split into server prefill at n = 0, queue and the rest
    (overhead), each >= 0 (a negative part is set to 0 and ``notes`` says so; the raw
    prefill intercept stays in ``prefill_raw_s``).  Not split (overhead None) when the
    intercept is not pinned."""

    intercept_s: float
    pinned: bool
    prefill_s: float | None
    prefill_raw_s: float | None
    queue_s: float | None
    overhead_s: float | None
    notes: tuple[str, ...]

    def to_json(self) -> JsonObject:
        return {"intercept_s": self.intercept_s, "pinned": self.pinned,
                "prefill_s": self.prefill_s, "prefill_raw_s": self.prefill_raw_s,
                "queue_s": self.queue_s, "overhead_s": self.overhead_s,
                "notes": list(self.notes)}


@dataclass(frozen=True, slots=True)
class Breakdown:
    """A run's TTFT breakdown: ``available`` when the server reported any prefill or
    queue time; ``median`` parts over the last probes; the ``intercept`` split;
    ``max_sum_error_s`` (bookkeeping check); ``cause`` in plain words; ``missing``: what
    the server did not report.  ``probes``: the per-probe splits (the last ``last``)."""

    available: bool
    median: PartMedians | None
    intercept: InterceptSplit | None
    max_sum_error_s: float | None
    cause: str
    missing: str | None = None
    probes: tuple[ProbeParts, ...] = ()

    def to_json(self) -> JsonObject:
        """Without the per-probe rows (the run file has them)."""
        return {"available": self.available,
                "median": self.median.to_json() if self.median else {},
                "intercept": self.intercept.to_json() if self.intercept else None,
                "max_sum_error_s": self.max_sum_error_s, "cause": self.cause,
                "missing": self.missing}


def breakdown(results: Sequence[ProbeResult], fit: LinearFit | None = None, *,
              last: int = 50) -> Breakdown:
    """TTFT breakdown for a run (see ``Breakdown``).  Only ok, non-warm-up probes count.
    ``fit`` is the run's LinearFit (its intercept is split with a fit of the server
    prefill times and the median queue); when None one is fitted here."""
    rows = [probe_parts(r) for r in results if r.ok and not r.warmup and r.ttft_s is not None]
    have = [p for p in rows if p.prefill_s is not None or p.queue_s is not None]
    if not rows:
        return Breakdown(False, None, None, None, "no successful probes yet")
    recent = rows[-last:]
    med = PartMedians(*(finite_median(getattr(p, k) for p in recent) for k in ("ttft_s", *_PARTS)),
                      running=finite_median(p.running for p in recent),
                      waiting=finite_median(p.waiting for p in recent))
    errs = [abs(p.sum_error_s) for p in rows if p.sum_error_s is not None]
    max_err = max(errs) if errs else None
    if not have:
        return Breakdown(False, med, None, max_err,
                         "no server-side timings: TTFT cannot be split",
                         missing=("the server reported no prefill or queue time (llama.cpp: "
                                  "timings; vLLM/SGLang/TGI: /metrics)"),
                         probes=tuple(recent))
    return Breakdown(True, med, _intercept_split(results, fit, med), max_err,
                     cause_line(recent), probes=tuple(recent))


def _intercept_split(results: Sequence[ProbeResult], fit: LinearFit | None,
                     med: PartMedians) -> InterceptSplit | None:
    """See ``InterceptSplit``; None without lengths spanning 2x or a fit."""
    from prefilltui.model.fit import fixed_cost, server_fixed_cost

    pts = [r for r in results if r.fit_eligible]
    xs = [r.tokens for r in pts]
    # an intercept is an extrapolation to n = 0: only from lengths spanning >= 2x
    if len(pts) < 3 or min(xs) <= 0 or max(xs) < 2 * min(xs):
        return None
    if fit is None:
        fit = fit_robust(xs, [r.ttft_s for r in pts])
    if fit is None:
        return None
    fixed = fixed_cost(fit)
    server = server_fixed_cost(pts)
    a_p = server.prefill_intercept_s if server else None
    raw = server.prefill_intercept_raw_s if server else None
    notes: list[str] = []
    if not fixed.pinned:
        notes.append(fixed.note)
        return InterceptSplit(fit.intercept_s, fixed.pinned, a_p, raw, med.queue_s, None,
                              tuple(notes))
    if raw is not None and raw < 0:
        notes.append(f"server prefill at n=0 shown as 0 (its fit gives {ms(raw)})")
    intercept_s = fit.intercept_s
    if fixed.clamped:
        intercept_s = 0.0
        notes.append(fixed.note)
    overhead = None
    if a_p is not None:
        over = intercept_s - a_p - (med.queue_s or 0.0)
        if over < 0:
            notes.append(f"overhead at n=0 shown as 0 (intercept - prefill - queue = "
                         f"{ms(over)}: within the intercept's uncertainty)")
        overhead = max(over, 0.0)
    return InterceptSplit(intercept_s, fixed.pinned, a_p, raw, med.queue_s, overhead,
                          tuple(notes))


def cause_line(rows: Sequence[ProbeParts]) -> str:
    """Plain words naming the largest part of the median TTFT, with the load."""
    med = {k: finite_median(getattr(p, k) for p in rows) for k in ("ttft_s", *_PARTS)}
    parts = {k: v for k, v in med.items() if k != "ttft_s" and v is not None}
    if not parts or not med["ttft_s"]:
        return "TTFT cannot be split (no server timings)"
    k, v = max(parts.items(), key=lambda kv: kv[1])
    share = v / med["ttft_s"] if med["ttft_s"] else 0.0
    words = {"overhead_s": "client/network overhead", "queue_s": "queueing",
             "prefill_s": "prefill"}[k]
    run = finite_median(p.running for p in rows)
    wait = finite_median(p.waiting for p in rows)
    load = ""
    if run is not None or wait is not None:
        load = f"; server load {run or 0:g} running, {wait or 0:g} waiting"
    short = {"overhead_s": "overhead", "queue_s": "queue", "prefill_s": "prefill"}
    bits = ", ".join(f"{short[n]} {duration(parts[n])}" for n in _PARTS if n in parts)
    return (f"TTFT {duration(med['ttft_s'])} is mostly {words} ({share:.0%}): {bits}{load}")
