"""The headless sweep under background load (``sweep --load``, ``--load-levels``).

``run_probes`` runs the sweep once (no load, or one load level), or once per level
of ``--load-levels``: for each, the load is set to the level and left to reach it
(every decode stream streaming), then the sweep's lengths are probed; warm-up probes
only in the first level.  ``with_load`` adds the load part to the run's summary (the
load's facts, the decode stall table, the level table: ``model.load.summary``) and the
verdict over the latest level (``model.diagnosis.verdict``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from prefilltui.model.units import ms
from prefilltui.commands.common import err, say
from prefilltui.measure.sweep import SweepRunner
from prefilltui.model.diagnosis import run_fit
from prefilltui.model.fit import LinearFit
from prefilltui.model.load import level_of, levels_in
from prefilltui.model.load import LoadFacts, load_summary
from prefilltui.model.load import DecodeTrace
from prefilltui.model.summary import RunSummary
from prefilltui.model.types import ProbeResult
from prefilltui.model.diagnosis import Expectation, ttft_verdict
from prefilltui.session import Session

#: Longest wait for the load to reach a level (s): the first vLLM stream on a busy
#: 2-core machine takes a few seconds; a server that cannot stream in this long is
#: a fault worth stopping for.
LOAD_START_S = 120.0


#: Tokens every decode stream brings before a level's first probe (a baseline of
#: quiet gaps, ``model.load.stall.MIN_QUIET_GAPS``, from the start).
STEADY_TOKENS = 8
#: How long a level waits for every decode stream to stream before it runs with the
#: ones that do (s).
SETTLE_S = 30.0


class LoadFailed(Exception):
    """The background load asked for could not run: nothing was measured under it."""


def run_probes(session: Session, levels: Sequence[float],
               new_runner: Callable[[], SweepRunner], stream
               ) -> tuple[list[ProbeResult], SweepRunner, list[str]]:
    """Run the sweep (once per load level with ``--load-levels``); returns (every
    result, the last runner, notes: levels not run and why, and the first level's plan
    notes when its time cap, ``SweepConfig.time_cap_s``, holds for the levels after it).

    Raises:
        LoadFailed: ``--load`` without levels, and the load did not reach its level
            (no probe was sent).
        KeyboardInterrupt: passed through (the caller stops the session).
    """
    levels = list(levels)
    gen = session.load
    if gen is None or not levels:
        if gen is not None and not _start(session, stream):
            raise LoadFailed(gen.describe())
        runner = new_runner()
        _run(runner)
        return list(runner.results), runner, []
    results: list[ProbeResult] = []
    notes: list[str] = []
    runner: SweepRunner | None = None
    for i, level in enumerate(levels):
        if gen.state in ("fault", "done"):
            notes.append(f"load levels from {level:g} not run: {gen.describe()}")
            break
        gen.set_level(level)
        say(f"load level {level:g}: {gen.current_spec().describe()}", stream)
        if level > 0 and not _start(session, stream):
            notes.append(f"load level {level:g} not run: {gen.describe()}")
            break
        if i > 0:
            session.config.warmup = 0  # warm-up probes only before the first level
        runner = new_runner()
        _run(runner)
        results += list(runner.results)
        if i == 0 and session.config.time_cap_s is not None:
            # the first level's time cap holds for the rest: every level probes the
            # same lengths (a load level's probes take longer, not other lengths)
            session.config.lengths = list(runner.lengths)
            session.config.time_cap_s = None
            notes += runner.notes
        if runner.state == "failed":
            break
    gen.set_level(0)
    if runner is None:
        raise LoadFailed(notes[0] if notes else gen.describe())
    return results, runner, notes


def _start(session: Session, stream) -> bool:
    """Start the load (or move it to its new level) and wait until every decode stream
    streams; a server with fewer slots than streams queues the others (llama.cpp
    ``--parallel``): after ``SETTLE_S`` the level runs with those that stream, and the
    line says so.  False when the load failed or nothing streams at all."""
    gen = session.load
    assert gen is not None
    if session.start_load(wait_s=SETTLE_S, min_tokens=STEADY_TOKENS):
        say(f"  {gen.describe()} running ({gen.requests} requests so far)", stream)
        return True
    if gen.alive and gen.wait_streaming(LOAD_START_S - SETTLE_S, STEADY_TOKENS):
        n = gen.streaming(STEADY_TOKENS)
        say(f"  {gen.describe()}: {n} of {gen.spec.at(gen.level).streams} streaming after "
            f"{SETTLE_S:g} s, the server queues the others (its slots are full)", stream)
        return True
    err(f"background load did not reach its level: {gen.describe()}")
    return False


def _run(runner: SweepRunner) -> None:
    runner.start()
    try:
        while runner.alive:
            runner.join(0.2)
    except KeyboardInterrupt:
        runner.stop(10)
        raise


def with_load(summary: RunSummary, results: Sequence[ProbeResult], traces: Sequence[DecodeTrace],
              *, facts: LoadFacts | None, chunk_tokens: int | None, under: str | None,
              baseline: LinearFit | None = None) -> RunSummary:
    """``summary`` with its load part (``model.load.summary``) and, for a run under
    load, the verdict over the last level's probes held against the idle fit (or the
    baseline): "right now" is the latest level.  A run with no load is returned as is."""
    load = load_summary(results, traces, facts=facts, chunk_tokens=chunk_tokens, under=under)
    if load is None:
        return summary
    last = max(levels_in(results), default=0.0)
    recent = [r for r in results if level_of(r) == last]
    idle = run_fit([r for r in results if r.fit_eligible], "robust")
    base = baseline if baseline is not None else idle
    roof = summary.roofline
    expect = Expectation(base, "baseline run" if baseline is not None else "idle fit",
                         roof.mfu if roof is not None else None, summary.verdict.level)
    return replace(summary, load=load, ttft_verdict=ttft_verdict(recent, expect))


def session_facts_of_load(session: Session) -> LoadFacts | None:
    """What the session's load was and did (None without one)."""
    gen = session.load
    if gen is None:
        return None
    return LoadFacts(spec=gen.spec, state=gen.state, fault=gen.fault, requests=gen.requests,
                     tokens=gen.tokens, skipped=gen.skipped)


def stall_part(r: ProbeResult) -> str:
    """"  [load 2] stall 430.1 ms excess 2,512.0 ms (9 decode tokens)" for a probe
    under background load ("" without)."""
    if not r.load_level:
        return ""
    out = f"  [load {r.load_level:g}]"
    if r.decode_stall_s is not None:
        out += (f" stall {ms(r.decode_stall_s)} excess {ms(r.decode_excess_s)}"
                f" ({r.decode_tokens} decode tokens)")
    if r.server_itl_max_s is not None:
        out += f" server ITL <= {ms(r.server_itl_max_s, 0)}"
    return out
