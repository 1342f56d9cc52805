"""On-call diagnosis: where a TTFT goes (``breakdown.py``), whether the prefix cache
was hit by accident, chunked prefill, and drift against a baseline run.

``detect_chunking(...)`` reads the server's chunk size or finds TTFT steps at
multiples of one.  ``summarize_diagnosis`` puts the breakdown, the chunking, the
cache warning and the drift against a baseline run (``drift.py``) together as a
``Diagnosis``.  The prefix-cache check is ``measure/prefix_cache.py``.  No I/O.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from prefilltui.model import fit as _fit
from prefilltui.model.breakdown import Breakdown, breakdown
from prefilltui.model.drift import drift, run_fit
from prefilltui.model.types import FitMethod, JsonObject, ProbeResult, ServerInfo
from prefilltui.model.units import duration

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

    def to_json(self) -> JsonObject:
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


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """What diagnosis adds to a run summary: the TTFT ``breakdown``, the ``chunking``,
    a ``cache_warning`` (sweep probes the prefix cache served by accident), the
    ``drift`` sentence against the ``baseline`` run file (``baseline_used``: a drift was
    computed) and ``notes`` (metrics not available, baseline unreadable)."""

    breakdown: Breakdown
    chunking: ChunkInfo
    cache_warning: str | None = None
    drift: str | None = None
    baseline: str | None = None
    baseline_used: bool = False
    notes: tuple[str, ...] = ()

    def to_json(self) -> JsonObject:
        return {"breakdown": self.breakdown.to_json(), "chunking": self.chunking.to_json(),
                "cache_warning": self.cache_warning, "drift": self.drift,
                "baseline": self.baseline, "baseline_used": self.baseline_used,
                "notes": list(self.notes)}


def summarize_diagnosis(results: Sequence[ProbeResult], server_info: ServerInfo | None = None,
                        *, fit: _fit.LinearFit | None = None, baseline: str | None = None,
                        baseline_fit: _fit.LinearFit | None = None,
                        baseline_problem: str | None = None,
                        metrics_problem: str | None = None, method: FitMethod = "robust"
                        ) -> Diagnosis:
    """The ``Diagnosis`` of a run.  The live fit is ``fit`` when given, else
    ``drift.run_fit`` of ``results``; the baseline's is ``baseline_fit`` (loaded by the
    caller from the run file ``baseline``, ``measure.runfile.load_baseline``), or
    ``baseline_problem`` says why there is none."""
    notes = [metrics_problem] if metrics_problem else []
    drift_text, used = None, False
    if baseline:
        if baseline_fit is None:
            notes.append(f"baseline not used: {baseline_problem or 'it was not loaded'}")
        else:
            live = fit if fit is not None else run_fit(results, method)
            drift_text = drift(baseline_fit, live)
            used = live is not None
            if live is None:
                notes.append("drift not computed: this run has no fit yet")
    return Diagnosis(breakdown=breakdown(results, fit),
                     chunking=detect_chunking(results, server_info=server_info),
                     cache_warning=flag_cache_hits(results), drift=drift_text,
                     baseline=baseline, baseline_used=used, notes=tuple(notes))
