"""On-call diagnosis: where a TTFT goes (``breakdown.py``), whether the prefix cache
was hit by accident, chunked prefill, and drift against a baseline run.

``detect_chunking(...)`` reads the server's chunk size or finds TTFT steps at
multiples of one.  ``summarize_diagnosis`` puts the breakdown, the chunking, the
cache warning and the drift against a baseline run (``drift.py``) together as a
``Diagnosis``.  The prefix-cache check is ``measure/prefix_cache.py``.  No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


from prefilltui.model.fit import LinearFit
from prefilltui.model.diagnosis.chunking import ChunkInfo, detect_chunking, find_steps  # noqa: F401
from prefilltui.model.diagnosis.ttft_breakdown import Breakdown, breakdown
from prefilltui.model.diagnosis.baseline import drift, run_fit
from prefilltui.model.types import FitMethod, JsonObject, ProbeResult, ServerInfo

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
# in chunking.py (tested against the n² fit); re-exported for the callers of diagnose

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
                        *, fit: LinearFit | None = None, baseline: str | None = None,
                        baseline_fit: LinearFit | None = None,
                        baseline_problem: str | None = None,
                        metrics_problem: str | None = None, method: FitMethod = "robust"
                        ) -> Diagnosis:
    """The ``Diagnosis`` of a run.  The live fit is ``fit`` when given, else
    ``drift.run_fit`` of ``results``; the baseline's is ``baseline_fit`` (loaded by the
    caller from the run file ``baseline``, ``measure.runfile.reader.load_baseline``), or
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
