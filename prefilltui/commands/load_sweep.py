"""The headless sweep under background load (``sweep --load``, ``--load-levels``).

``run_probes`` runs the sweep once (no load, or one load level), or once per level
of ``--load-levels``: for each, the load is set to the level and left to reach it
(every decode stream streaming), then the sweep's lengths are probed; warm-up probes
only in the first level.  ``attach_load`` adds to the summary: the load (spec,
state, requests), the per-length decode stall table with its sentence
(``model.stall``), the level table and its knee (``model.levels``) and the verdict
(``model.verdict``), as JSON and text.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from prefilltui.commands.common import err, say
from prefilltui.model.levels import format_levels, level_of, level_table, level_view, levels_in
from prefilltui.model.stall import format_stall, stall_summary
from prefilltui.model.types import ProbeResult
from prefilltui.model.verdict import Expectation, format_verdict, ttft_verdict
from prefilltui.session import Session

#: Longest wait for the load to reach a level (s): the first vLLM stream on a busy
#: 2-core machine takes a few seconds; a server that cannot stream in this long is
#: a fault worth stopping for.
LOAD_START_S = 120.0


#: Tokens every decode stream brings before a level's first probe (a baseline of
#: quiet gaps, ``model.stall.MIN_QUIET_GAPS``, from the start).
STEADY_TOKENS = 8
#: How long a level waits for every decode stream to stream before it runs with the
#: ones that do (s).
SETTLE_S = 30.0


class LoadFailed(Exception):
    """The background load asked for could not run: nothing was measured under it."""


def run_probes(session: Session, args: Any, new_runner: Callable[[], Any], stream
               ) -> tuple[list[ProbeResult], Any, list[str]]:
    """Run the sweep (once per load level with ``--load-levels``); returns (every
    result, the last runner, notes: levels not run and why).

    Raises:
        LoadFailed: ``--load`` without levels, and the load did not reach its level
            (no probe was sent).
        KeyboardInterrupt: passed through (the caller stops the session).
    """
    levels = list(getattr(args, "load_levels", None) or ())
    gen = session.load
    if gen is None or not levels:
        if gen is not None and not _start(session, stream):
            raise LoadFailed(gen.describe())
        runner = new_runner()
        _run(runner)
        return list(runner.results), runner, []
    results: list[ProbeResult] = []
    notes: list[str] = []
    runner = None
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
        if runner.state == "failed":
            break
    gen.set_level(0)
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


def _run(runner) -> None:
    runner.start()
    try:
        while runner.alive:
            runner.join(0.2)
    except KeyboardInterrupt:
        runner.stop(10)
        raise


def main_results(results: list[ProbeResult]) -> tuple[list[ProbeResult], str | None]:
    """The probes the usual summary and fit describe: the idle ones (no load, or level
    0); with none, the lowest load level as its own fit, and the words saying so."""
    levels = levels_in(results)
    if not levels or levels[0] == 0.0:
        return [r for r in results if level_of(r) == 0.0 or r.warmup], None
    lv = levels[0]
    kind = next((r.load_kind for r in results if r.load_kind), "decode")
    unit = f"{lv:g} req/s" if kind == "rate" else f"{lv:g} decode streams"
    return level_view(results, lv), f"under background load ({unit}): the fit of that level"


def expectation(results: list[ProbeResult], d: dict[str, Any], baseline=None
                ) -> Expectation | None:
    """What TTFT should be: the ``--baseline`` run's fit, else the idle level's fit
    (with the MFU verdict of the summary ``d`` when it has one)."""
    from prefilltui.model.drift import run_fit

    if baseline is not None:
        return Expectation(baseline, "baseline run")
    idle = [r for r in results if r.fit_eligible]
    f = run_fit(idle, "robust") if idle else None
    roof = (d.get("analysis") or d).get("roofline") or {}
    level = ((d.get("analysis") or d).get("verdict") or {}).get("level")
    if f is None:
        return Expectation(None, "", roof.get("mfu"), level) if level else None
    return Expectation(f, "idle fit", roof.get("mfu"), level)


def summarize_load(d: dict[str, Any], results: list[ProbeResult], traces, *,
                   chunk: int | None = None, expect: Expectation | None = None) -> list[str]:
    """Add ``stall``, ``levels`` and ``ttft_verdict`` to the summary ``d`` from a run's
    probes and load traces (``sweep`` at its end, ``report`` from a run file); returns
    their text lines."""
    lines: list[str] = []
    # stall against prompt tokens at one level: the one with the most measured probes
    counts = Counter(level_of(r) for r in results if r.decode_stall_s is not None)
    at = max(counts, key=lambda lv: (counts[lv], lv)) if counts else None
    s = stall_summary([r for r in results if level_of(r) == at], chunk_tokens=chunk)
    if s is not None:
        d["stall"] = {**s.to_json(), "level": at}
        lines += format_stall(s, at)
    t = level_table(results, traces)
    if t is not None and len(t.rows) > 1:
        d["levels"] = t.to_json()
        lines += [""] + format_levels(t)
    last_level = max(levels_in(results), default=0.0)
    recent = [r for r in results if level_of(r) == last_level]
    v = ttft_verdict(recent, expect)
    d["ttft_verdict"] = v.to_json()
    lines += [""] + format_verdict(v)
    return lines


def attach_load(d: dict[str, Any], results: list[ProbeResult], session: Session) -> list[str]:
    """Add ``load`` (spec, state, requests), ``stall``, ``levels`` and ``ttft_verdict`` to
    the summary ``d`` of a finished sweep; returns their text lines."""
    lines: list[str] = []
    gen = session.load
    if gen is not None:
        d["load"] = {"spec": gen.spec.to_json(), "state": gen.state, "fault": gen.fault,
                     "requests": gen.requests, "tokens": gen.tokens, "skipped": gen.skipped}
        lines.append(f"background load: {gen.spec.label()} ({gen.requests} requests, "
                     f"{gen.tokens:,} tokens; {gen.state}"
                     + (f": {gen.fault}" if gen.fault else "") + ")")
    info = session.runner.server_info if session.runner is not None else None
    chunk = (info.n_batch or info.n_ubatch) if info is not None else None
    traces = gen.traces() if gen is not None else []
    return lines + summarize_load(d, results, traces, chunk=chunk,
                                  expect=expectation(results, d, session.baseline))


def stall_part(r: ProbeResult) -> str:
    """"  [load 2] stall 430.1 ms excess 2,512.0 ms (9 decode tokens)" for a probe
    under background load ("" without)."""
    if not r.load_level:
        return ""
    out = f"  [load {r.load_level:g}]"
    if r.decode_stall_s is not None:
        out += (f" stall {r.decode_stall_s * 1e3:,.1f} ms excess {r.decode_excess_s * 1e3:,.1f} ms"
                f" ({r.decode_tokens} decode tokens)")
    if r.server_itl_max_s is not None:
        out += f" server ITL <= {r.server_itl_max_s * 1e3:,.0f} ms"
    return out
