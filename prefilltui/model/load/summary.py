"""The background-load part of a run's summary (``RunSummary.load``): what the load
was and did, the decode stall against prompt tokens, and the load-level table.  Pure;
``sweep`` builds it at the end of a run, ``report`` from a run file's lines.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from prefilltui.model.jsontypes import JsonObject
from prefilltui.model.load.levels import LevelTable, level_of, level_table, level_view, levels_in
from prefilltui.model.loadspec import LoadSpec
from prefilltui.model.load.stall import DecodeTrace, StallSummary, stall_summary
from prefilltui.model.types import ProbeResult


@dataclass(frozen=True, slots=True)
class LoadFacts:
    """The load asked for and what it did: ``spec``; ``state`` / ``fault`` (the
    generator's, None from a run file); ``requests`` sent, ``tokens`` received and
    rate-load arrivals ``skipped`` at the in-flight cap (from a run file: its load
    lines)."""

    spec: LoadSpec
    state: str | None = None
    fault: str | None = None
    requests: int = 0
    tokens: int = 0
    skipped: int = 0

    def to_json(self) -> JsonObject:
        return {"spec": self.spec.to_json(), "state": self.state, "fault": self.fault,
                "requests": self.requests, "tokens": self.tokens, "skipped": self.skipped}


@dataclass(frozen=True, slots=True)
class LoadSummary:
    """``facts`` (None when the run file keeps no spec), ``stall`` at ``stall_level``
    (the level with the most probes that measured one), ``levels`` (two or more
    levels), and ``under``: set when the run's main fit is a load level's own (no idle
    probe), saying so."""

    facts: LoadFacts | None
    stall: StallSummary | None = None
    stall_level: float | None = None
    levels: LevelTable | None = None
    under: str | None = None

    def to_json(self) -> JsonObject:
        return {"facts": self.facts.to_json() if self.facts else None,
                "stall": self.stall.to_json() if self.stall else None,
                "stall_level": self.stall_level,
                "levels": self.levels.to_json() if self.levels else None,
                "under": self.under}


def main_results(results: Sequence[ProbeResult]) -> tuple[list[ProbeResult], str | None]:
    """The probes the usual summary and fit describe: the idle ones (no load, or level
    0, warm-ups kept); with none, the lowest load level as its own fit, and the words
    saying so."""
    levels = levels_in(results)
    if not levels or levels[0] == 0.0:
        return [r for r in results if level_of(r) == 0.0 or r.warmup], None
    lv = levels[0]
    kind = next((r.load_kind for r in results if r.load_kind), "decode")
    unit = f"{lv:g} req/s" if kind == "rate" else f"{lv:g} decode streams"
    return (level_view(results, lv) + [replace(r, load_level=None) for r in results
                                       if r.warmup and level_of(r) != lv],
            f"under background load ({unit}): the fit of that level")


def load_summary(results: Iterable[ProbeResult], traces: Sequence[DecodeTrace] = (), *,
                 facts: LoadFacts | None = None, chunk_tokens: int | None = None,
                 under: str | None = None) -> LoadSummary | None:
    """The load part of a run's summary; None for a run with no load at all.
    ``chunk_tokens``: the server's chunk budget when it says it."""
    results = list(results)
    if facts is None and not any(r.load_kind for r in results):
        return None
    counts = Counter(level_of(r) for r in results if r.decode_stall_s is not None)
    at = max(counts, key=lambda lv: (counts[lv], lv)) if counts else None
    stall = stall_summary([r for r in results if level_of(r) == at], chunk_tokens=chunk_tokens)
    t = level_table(results, traces)
    return LoadSummary(facts=facts, stall=stall, stall_level=at if stall else None,
                       levels=t if t is not None and len(t.rows) > 1 else None, under=under)


def facts_of_run(spec: LoadSpec | None, traces: Sequence[DecodeTrace]) -> LoadFacts | None:
    """LoadFacts of a run file: its session line's spec and its load lines."""
    if spec is None:
        return None
    return LoadFacts(spec=spec, requests=len(traces), tokens=sum(len(t.arrivals) for t in traces))
