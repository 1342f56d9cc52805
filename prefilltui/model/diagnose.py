"""On-call diagnosis: where a TTFT goes, whether the prefix cache works, chunked
prefill, and drift against a baseline run.

TTFT ~= client/network overhead + queueing + server prefill (+ the first token).
``breakdown(results)`` splits each probe and the fit's intercept into those parts
(seconds); ``cause_line`` names the largest one in plain words.
``detect_chunking(...)`` reads the server's chunk size or finds TTFT steps at
multiples of one.  ``summarize_diagnosis`` adds the drift against a baseline run
(``drift.py``).  The prefix-cache check is ``prefix_cache.py``.
Imports no textual; no I/O except reading a baseline run file.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from prefilltui.model import fit as _fit
from prefilltui.model.drift import drift, run_fit
from prefilltui.model.types import FitMethod, ProbeResult, ServerInfo
from prefilltui.model.units import MISSING, duration

# --------------------------------------------------------------- breakdown

_PARTS = ("overhead_s", "queue_s", "prefill_s")


def _med(vals: Iterable[float | None]) -> float | None:
    v = [x for x in vals if x is not None and math.isfinite(x)]
    return statistics.median(v) if v else None


def probe_parts(r: ProbeResult) -> dict[str, Any]:
    """One probe's TTFT split (seconds; None where the server gave nothing).

    ``sum_error_s`` = ttft − (overhead + queue + prefill) when all are known (should be
    ~0: overhead is defined as the remainder, so this checks the bookkeeping).
    """
    server_ttft = r.extra.get("server_ttft_s") if r.extra else None
    prefill = r.server_prefill_s
    queue = r.queue_s
    overhead = r.overhead_s
    if server_ttft is not None and prefill is None and queue is not None:
        prefill = max(0.0, server_ttft - queue)  # server TTFT = queue + prefill (+ 1st token)
    parts = [overhead, queue, prefill]
    err = None
    if r.ttft_s is not None and overhead is not None and prefill is not None:
        err = r.ttft_s - (overhead + (queue or 0.0) + prefill)
    return {
        "seq": r.seq, "tokens": r.tokens, "ttft_s": r.ttft_s, "overhead_s": overhead,
        "queue_s": queue, "prefill_s": prefill, "server_ttft_s": server_ttft,
        "queue_source": (r.extra or {}).get("queue_source"),
        "running": r.server_running, "waiting": r.server_waiting,
        "cached_tokens": r.cached_tokens, "sum_error_s": err,
        "complete": all(p is not None for p in parts),
    }


def breakdown(results: Sequence[ProbeResult], fit: Any = None, *, last: int = 50
              ) -> dict[str, Any]:
    """TTFT breakdown for a run (JSON-ready; seconds).

    Returns ``{"available", "probes": [per-probe dicts, last ``last``], "median":
    {ttft_s, overhead_s, queue_s, prefill_s, running, waiting}, "intercept":
    {intercept_s, prefill_s, queue_s, overhead_s} | None, "max_sum_error_s",
    "cause": str, "missing": str | None}``.  Only ok, non-warm-up probes count.
    ``fit`` is the run's LinearFit (its intercept is split with a fit of the
    server prefill times and the median queue); when None one is fitted here.
    """
    rows = [probe_parts(r) for r in results if r.ok and not r.warmup and r.ttft_s is not None]
    have = [p for p in rows if p["prefill_s"] is not None or p["queue_s"] is not None]
    out: dict[str, Any] = {"available": bool(have), "probes": rows[-last:], "median": {},
                           "intercept": None, "max_sum_error_s": None, "cause": "",
                           "missing": None}
    if not rows:
        out["cause"] = "no successful probes yet"
        return out
    recent = rows[-last:]
    med = {k: _med(p[k] for p in recent) for k in ("ttft_s", *_PARTS)}
    med["running"] = _med(p["running"] for p in recent)
    med["waiting"] = _med(p["waiting"] for p in recent)
    out["median"] = med
    errs = [abs(p["sum_error_s"]) for p in rows if p["sum_error_s"] is not None]
    out["max_sum_error_s"] = max(errs) if errs else None
    if not have:
        out["missing"] = ("the server reported no prefill or queue time (llama.cpp: "
                          "timings; vLLM/SGLang/TGI: /metrics)")
        out["cause"] = "no server-side timings: TTFT cannot be split"
        return out
    out["intercept"] = _intercept_split(results, fit, med)
    out["cause"] = cause_line(recent)
    return out


def _intercept_split(results, fit, med) -> dict[str, Any] | None:
    """The fit's intercept split into server prefill at n = 0, queue and the rest
    (overhead).  Every part is physically >= 0 and is never given below 0: a negative
    one is set to 0 and ``notes`` says so (the raw prefill intercept stays in
    ``prefill_raw_s``); an intercept that is not pinned (core.intercept) is not split."""
    from prefilltui.model import intercept as _ic

    pts = [r for r in results if r.fit_eligible]
    xs = [r.tokens for r in pts]
    # an intercept is an extrapolation to n = 0: only from lengths spanning >= 2x
    if len(pts) < 3 or min(xs) <= 0 or max(xs) < 2 * min(xs):
        return None
    if fit is None:
        fit = _fit.fit_robust(xs, [r.ttft_s for r in pts])
    if fit is None:
        return None
    fixed = _ic.fixed_cost(fit)
    server = _ic.server_fixed_cost(pts)
    a_p = server["prefill_intercept_s"] if server else None
    notes: list[str] = []
    out = {"intercept_s": fit.intercept_s, "pinned": fixed.pinned, "prefill_s": a_p,
           "prefill_raw_s": server["prefill_intercept_raw_s"] if server else None,
           "queue_s": med.get("queue_s"), "overhead_s": None, "notes": notes}
    if not fixed.pinned:
        notes.append(fixed.note)
        return out
    if server and server["prefill_intercept_raw_s"] is not None and server["prefill_intercept_raw_s"] < 0:
        notes.append(f"server prefill at n=0 shown as 0 (its fit gives "
                     f"{server['prefill_intercept_raw_s'] * 1e3:.1f} ms)")
    if fixed.clamped:
        out["intercept_s"] = 0.0
        notes.append(fixed.note)
    if a_p is not None:
        over = out["intercept_s"] - a_p - (med.get("queue_s") or 0.0)
        if over < 0:
            notes.append(f"overhead at n=0 shown as 0 (intercept - prefill - queue = "
                         f"{over * 1e3:.1f} ms: within the intercept's uncertainty)")
        out["overhead_s"] = max(over, 0.0)
    return out



def cause_line(rows: Sequence[dict[str, Any]]) -> str:
    """Plain words naming the largest part of the median TTFT, with the load."""
    med = {k: _med(p[k] for p in rows) for k in ("ttft_s", *_PARTS)}
    parts = {k: v for k, v in med.items() if k != "ttft_s" and v is not None}
    if not parts or not med["ttft_s"]:
        return "TTFT cannot be split (no server timings)"
    k, v = max(parts.items(), key=lambda kv: kv[1])
    share = v / med["ttft_s"] if med["ttft_s"] else 0.0
    words = {"overhead_s": "client/network overhead", "queue_s": "queueing",
             "prefill_s": "prefill"}[k]
    run = _med(p["running"] for p in rows)
    wait = _med(p["waiting"] for p in rows)
    load = ""
    if run is not None or wait is not None:
        load = f"; server load {run or 0:g} running, {wait or 0:g} waiting"
    short = {"overhead_s": "overhead", "queue_s": "queue", "prefill_s": "prefill"}
    bits = ", ".join(f"{short[n]} {duration(parts[n])}" for n in _PARTS if n in parts)
    return (f"TTFT {duration(med['ttft_s'])} is mostly {words} ({share:.0%}): {bits}{load}")


def format_breakdown(b: dict[str, Any]) -> str:
    """Text lines for a ``breakdown`` dict (ms on screen), for the sweep summary."""
    if not b.get("available"):
        return "TTFT breakdown: " + (b.get("cause") or MISSING)
    m = b["median"]
    lines = [f"TTFT breakdown (median): overhead {duration(m.get('overhead_s'))}, queue "
             f"{duration(m.get('queue_s'))}, prefill {duration(m.get('prefill_s'))} of "
             f"{duration(m.get('ttft_s'))}"]
    ic = b.get("intercept")
    if ic and ic.get("pinned", True):
        lines.append(f"intercept {duration(ic['intercept_s'])} = server prefill "
                     f"{duration(ic['prefill_s'])} + queue {duration(ic['queue_s'])} + overhead "
                     f"{duration(ic['overhead_s'])}")
    for note in (ic or {}).get("notes") or ():
        lines.append(f"  ({note})")
    lines.append(b["cause"])
    return "\n".join(lines)


def load_line(r: ProbeResult) -> str | None:
    """"2 running, 3 waiting" for the stats beside a TTFT, or None without metrics."""
    if r.server_running is None and r.server_waiting is None:
        return None
    return f"{r.server_running or 0:g} running, {r.server_waiting or 0:g} waiting"


def flag_cache_hits(results: Sequence[ProbeResult]) -> str | None:
    """A warning naming sweep probes served from the prefix cache by accident."""
    hits = [r for r in results if r.ok and not r.warmup and r.cache_hit]
    if not hits:
        return None
    seqs = ", ".join(str(r.seq) for r in hits[:8]) + (" ..." if len(hits) > 8 else "")
    return (f"{len(hits)} probe(s) hit the prefix cache and were kept out of the fit "
            f"(seq {seqs})")


# --------------------------------------------------------------- chunked prefill


@dataclass(frozen=True)
class ChunkInfo:
    """Chunked prefill: ``chunk_tokens`` per step and where the steps fall.

    source: "server" (read from the server: llama.cpp /props n_ubatch), "detected"
    (a step fit of TTFT), or None.  ``step_s`` is the TTFT added per chunk when
    detected.  ``boundaries`` are token counts inside the measured range (for the
    plot).  ``line`` names the effect in one sentence.
    """

    chunk_tokens: int | None
    source: str | None
    boundaries: tuple[int, ...] = ()
    step_s: float | None = None
    f_stat: float | None = None
    line: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _boundaries(c: int, lo: float, hi: float, cap: int = 64) -> tuple[int, ...]:
    k0 = max(1, math.ceil(lo / c))
    out = []
    k = k0
    while k * c <= hi and len(out) < cap:
        out.append(k * c)
        k += 1
    return tuple(out)


def _rss(X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    r = y - X @ beta
    return float(r @ r), beta


def find_steps(x: Sequence[float], y: Sequence[float], *, candidates: Sequence[int] | None = None,
               f_min: float = 25.0, min_steps: int = 2) -> tuple[int, float, float] | None:
    """Find a chunk size C where TTFT = a + b*n + s*ceil(n/C) fits much better than a line.

    Tries C over powers of two and multiples of 64 (64 .. max n / 2); returns
    ``(C, s_seconds, F)`` for the best C when s > 0, the partial F statistic of the
    step column is >= ``f_min`` (high, as many C are tried), and the data span at
    least ``min_steps`` boundaries with points between them; else None.
    """
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    ok = np.isfinite(xa) & np.isfinite(ya)
    xa, ya = xa[ok], ya[ok]
    m = len(xa)
    if m < 8 or np.ptp(xa) <= 0:
        return None
    X0 = np.column_stack([np.ones(m), xa])
    rss0, _ = _rss(X0, ya)
    hi = float(xa.max())
    if candidates is None:
        cands = sorted({*(2 ** k for k in range(6, 16)), *range(64, 4097, 64)})
    else:
        cands = sorted(set(int(c) for c in candidates))
    best = None
    for c in cands:
        if c <= 0 or c > hi / min_steps:
            continue
        steps = np.ceil(xa / c)
        occupied = len(np.unique(steps))
        if occupied < min_steps + 1:
            continue
        X = np.column_stack([X0, steps])
        rss, beta = _rss(X, ya)
        if beta[2] <= 0 or rss <= 0:
            if rss <= 0 < rss0 and beta[2] > 0:
                return c, float(beta[2]), float("inf")
            continue
        f = (rss0 - rss) / (rss / max(1, m - 3))
        if best is None or rss < best[0] * (1 - 1e-9):
            best = (rss, c, float(beta[2]), f)
    if best is None or best[3] < f_min:
        return None
    return best[1], best[2], best[3]


def detect_chunking(results: Sequence[ProbeResult] = (), *, server_info: ServerInfo | None = None,
                    x: Sequence[float] | None = None, y: Sequence[float] | None = None
                    ) -> ChunkInfo:
    """Chunk size of prefill: from the server (llama.cpp ``n_ubatch``/``n_batch`` in
    ServerInfo) and/or detected as TTFT steps in the results (or in ``x``, ``y``).
    Detected steps win over the server value for the boundaries drawn."""
    if x is None or y is None:
        pts = [r for r in results if r.fit_eligible]
        x = [r.tokens for r in pts]
        y = [r.ttft_s for r in pts]
    lo = min(x) if len(x) else 0
    hi = max(x) if len(x) else 0
    server_c = None
    what = ""
    if server_info is not None:
        server_c = server_info.n_ubatch or server_info.n_batch
        if server_info.n_ubatch and server_info.n_batch:
            what = f"n_ubatch {server_info.n_ubatch}, n_batch {server_info.n_batch}"
        elif server_c:
            what = f"batch {server_c}"
    found = find_steps(x, y) if len(x) >= 8 else None
    if found is not None:
        c, s, f = found
        note = f" (server: {what})" if what else ""
        return ChunkInfo(c, "detected", _boundaries(c, lo, hi), s, f,
                         f"chunked prefill: TTFT steps up ~{duration(s)} every {c:,} tokens{note}; "
                         "each chunk is a separate forward pass")
    if not server_c and server_info is not None and server_info.kind == "llama.cpp":
        what = "llama-server does not report n_batch/n_ubatch; set with -b/-ub"
    if server_c:
        b = _boundaries(server_c, lo, hi)
        tail = (" no TTFT step is measurable at those boundaries" if len(x) >= 8 and b
                else " prompts beyond it run as several forward passes")
        return ChunkInfo(server_c, "server", b, None, None,
                         f"the server prefills in chunks of {server_c:,} tokens ({what});{tail}")
    line = "no chunk size exposed and no TTFT steps found" if len(x) >= 8 else ""
    if what and line:
        line += f" ({what})"
    return ChunkInfo(None, None, (), None, None, line)


# --------------------------------------------------------------- one summary


def summarize_diagnosis(results: Sequence[ProbeResult], server_info: ServerInfo | None = None,
                        *, fit: Any = None, baseline: str | None = None,
                        baseline_fit: _fit.LinearFit | None = None,
                        baseline_problem: str | None = None,
                        metrics_problem: str | None = None, method: FitMethod = "robust"
                        ) -> dict[str, Any]:
    """Everything diagnosis adds to a sweep summary (JSON-ready): ``breakdown`` (without
    the per-probe rows), ``chunking``, ``cache_warning``, ``drift`` (with ``baseline``,
    a run-file path) and ``notes`` (metrics not available, baseline unreadable).
    The live fit is ``fit`` when given, else ``drift.run_fit`` of ``results``; the
    baseline's is ``baseline_fit`` (loaded by the session,
    ``prefilltui.measure.runfile.load_baseline``), or ``baseline_problem`` says why
    there is none."""
    b = breakdown(results, fit)
    b.pop("probes", None)
    notes = [metrics_problem] if metrics_problem else []
    d: dict[str, Any] = {"breakdown": b,
                         "chunking": detect_chunking(results, server_info=server_info).to_json(),
                         "cache_warning": flag_cache_hits(results), "drift": None,
                         "baseline": baseline, "notes": notes}
    if baseline:
        if baseline_fit is None:
            notes.append(f"baseline not used: {baseline_problem or 'it was not loaded'}")
        else:
            base = baseline_fit
            live = fit if fit is not None else run_fit(results, method)
            d["drift"] = drift(base, live)
            d["baseline_used"] = live is not None
            if live is None:
                notes.append("drift not computed: this run has no fit yet")
    return d


def format_diagnosis(d: dict[str, Any]) -> str:
    """Text lines for ``summarize_diagnosis`` (ms on screen)."""
    lines = [format_breakdown(d["breakdown"])]
    if d["chunking"].get("line"):
        lines.append(d["chunking"]["line"])
    if d.get("cache_warning"):
        lines.append("warning: " + d["cache_warning"])
    if d.get("baseline") and d.get("baseline_used"):
        lines.append("drift: " + (d["drift"] or "none beyond the uncertainty") + " (baseline "
                     + d["baseline"] + ")")
    lines += [f"note: {n}" for n in d.get("notes", [])]
    return "\n".join(lines)

