"""``prefilltui sweep URL``: a headless sweep with text progress and a summary.

Runs the same SweepRunner the TUI uses (warm-up, randomized order, one probe in
flight), appends every probe to the run file, and prints the run's ``RunSummary``
(``model.summary.analysis.analyze``): the per-length table and the fit TTFT = a + b*n with the
analysis (``render/text.py``).  ``--format json`` prints the summary's JSON
(docs/schema.md; the same as ``report --format json`` of the run file, plus ``live``);
progress then goes to stderr.  Exit: 0 the sweep ran (even with failed probes), 2 usage error,
3 server unreachable or every probe failed, 1 other failure (run file not writable).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from typing import Callable
from dataclasses import replace

from prefilltui.commands.argtypes import server_url
from prefilltui.commands.common import (add_analysis_args, add_depth_arg, add_hardware_args,
                                        add_load_args, add_otlp_args, add_output_args,
                                        add_path_args, add_server_args, otlp_options,
                                        path_options,
                                        add_sweep_args, add_telemetry_args, err, load_options,
                                        say, session_options)
from prefilltui.commands.load_sweep import (LoadFailed, run_probes, session_facts_of_load,
                                            stall_part, with_load)
from prefilltui.model.load import main_results
from prefilltui.model.summary import analyze, plain_summary
from prefilltui.model.redact import display_url
from prefilltui.model.summary import LiveFacts, RunSummary
from prefilltui.model.units import ms
from prefilltui.model.types import ProbeResult
from prefilltui.model.users import UsersEvidence
from prefilltui.exit_codes import ExitCode
from prefilltui.options import SessionOptions, SweepDesign
from prefilltui.render.tables import format_depth, format_diagnosis
from prefilltui.render.load_text import load_block
from prefilltui.render.path import path_lines
from prefilltui.render.text import format_summary, format_sweep, summary_json
from prefilltui.render.users import users_lines
from prefilltui.measure.sweep import SweepRunner
from prefilltui.session import Session, SessionError, build_session


#: How long a finished sweep waits for the server's spans of its last probes (vLLM
#: exports its spans within ~5 s; ``--otlp-listen``).
SPAN_WAIT_S = 10.0


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="run a headless TTFT sweep and print the fit",
        description="Fire one-token streaming probes at an OpenAI-compatible server over a "
                    "range of prompt lengths and fit TTFT = a + b*n. The API key is read "
                    "from the environment variable named by --api-key-env.")
    p.add_argument("url", metavar="URL", type=server_url,
                   help="server base URL, with or without /v1")
    add_server_args(p)
    add_sweep_args(p)
    add_depth_arg(p)
    add_hardware_args(p)
    add_telemetry_args(p)
    add_analysis_args(p)
    add_load_args(p, levels=True)
    add_otlp_args(p)
    add_path_args(p)
    add_output_args(p)
    p.set_defaults(func=run)


def _progress_line(r: ProbeResult, total: int | None, index: int | None = None) -> str:
    """One probe's line; ``index``: which planned probe it is (a retried rate-limited
    attempt repeats its probe's number), never over ``total``; default ``r.seq``."""
    n = r.seq if index is None else index
    if total:
        n = min(n, total)
    tag = " warm-up" if r.warmup else (" burst" if r.burst else "")
    head = f"[{n:>3}/{total or '?':>3}] {r.requested_tokens:>6} tok{tag}"
    if r.ok:
        sp = f"  server {ms(r.server_prefill_s)}" if r.server_prefill_s is not None else ""
        if r.queue_s is not None:
            est = " (est.)" if r.queue_source in ("idle", "estimated") else ""
            sp += f"  queue {ms(r.queue_s)}{est}"
        if r.server_running is not None or r.server_waiting is not None:
            sp += f"  [{r.server_running or 0:g} running, {r.server_waiting or 0:g} waiting]"
        if r.util_peak_pct is not None:
            sp += f"  {r.telemetry_device} peak {r.util_peak_pct:.0f}%"
        if r.power_peak_w is not None:
            sp += f" {r.power_peak_w:.0f} W"
        if r.energy_j is not None:
            sp += f" {r.energy_j:.2f} J"
        cnt = "" if r.prompt_tokens is None else (
            f" ({r.prompt_tokens} estimated)" if r.prompt_tokens_source == "estimate"
            else f" ({r.prompt_tokens} counted)")
        cache = f"  CACHE HIT {r.cached_tokens}" if r.cache_hit else ""
        if not r.cache_hit and r.cached_tokens_source:
            cache = f"  0 cached ({r.cached_tokens_source})"  # the server counted a miss
        if r.server_flops:
            cache += f"  server {r.server_flops / 1e9:.3g} GFLOP"
        return f"{head}{cnt}  TTFT {ms(r.ttft_s)}{sp}{cache}{stall_part(r)}"
    return f"{head}  FAILED {r.error_kind}: {r.error_message}"


def _depth_line(r: ProbeResult) -> str:
    """One depth-phase probe's line (``r.depth`` is set by ``measure.depth``)."""
    info = r.depth
    d = info.depth if info is not None else 0
    head = f"[depth {d:,}]"
    if not r.ok:
        return f"{head} FAILED {r.error_kind}: {r.error_message}"
    if info is not None and info.role == "prefix":
        return f"{head} prefix sent ({r.prompt_tokens} counted)  TTFT {ms(r.ttft_s)}"
    new = info.new_tokens if info is not None else None
    ok = "verified" if info is not None and info.verified else \
        f"NOT VERIFIED: {info.flag if info is not None else None}"
    where = "cold" if not d else \
        f"after {r.cached_tokens if r.cached_tokens is not None else '?'} cached"
    return (f"{head} {r.requested_tokens:>6} new tok ({new if new is not None else '?'} counted "
            f"{where}, {ok})  TTFT {ms(r.ttft_s)}")


def _run_depth_phase(design: SweepDesign, session: Session, lengths: list[int], stream,
                     seq0: int) -> tuple[list[ProbeResult], list[str]]:
    """The ``--depth`` probes after the sweep (see ``prefilltui.measure.depth``), with a
    client of the session (prompt seed + 1) and its run file."""
    import asyncio

    from prefilltui.measure.depth import run_depths
    from prefilltui.measure.server import ServerUnreachable
    from prefilltui.measure.sweep import cap_for_context

    out: list[ProbeResult] = []

    def on_result(r: ProbeResult) -> None:
        r.seq = seq0 + len(out) + 1
        out.append(r)
        try:
            session.writer.append(r)
        except (OSError, ValueError) as e:
            err(f"cannot write the run file: {e}")
        say(_depth_line(r), stream)

    async def go() -> list[str]:
        async with session.new_client(seed_offset=1) as c:
            try:
                info = await c.discover()
            except ServerUnreachable as e:
                return [f"depth probes not run: {e}"]
            await c.warm()
            return await run_depths(c, list(design.depths), lengths, repeats=design.repeats,
                                    cap=cap_for_context(info.context_tokens), seed=design.seed,
                                    on_result=on_result)

    return out, asyncio.run(go())


#: Seconds a "connecting" step (discovery, a calibration request) may take before the
#: headless sweep says what it waits for: a quick one stays silent, as before.
SLOW_STEP_S = 2.0


class SlowSteps:
    """Says the runner's "connecting" step (what it waits for, and for how long at most)
    once it has lasted ``after_s`` seconds: a server whose metadata endpoints or tokenize
    hang was ten or more seconds of silence before the sweep's first line.  ``state`` is
    called from the runner's thread; ``close`` cancels what is pending."""

    def __init__(self, say: Callable[[str], None], after_s: float = SLOW_STEP_S) -> None:
        self.say = say
        self.after_s = after_s
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def state(self, state: str, detail: str) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if state == "connecting" and detail:
                self._timer = threading.Timer(self.after_s, self.say, (f"  {detail}",))
                self._timer.daemon = True
                self._timer.start()

    def close(self) -> None:
        self.state("", "")


def run(args) -> int:
    """Entry point of ``prefilltui sweep``; returns the exit code (see the module doc)."""
    try:
        path = path_options(args)
    except ValueError as e:
        err(str(e))
        return ExitCode.USAGE
    return run_sweep(session_options(args, depths=args.depth,
                                     load=load_options(args, levels=True),
                                     otlp=otlp_options(args), path=path),
                     args.url, as_json=args.format == "json")


def _rate_search(options: SessionOptions, session, stream, as_json: bool) -> int:
    """``--rate-search``: the highest offered rate holding the first objective
    (``commands.rate_search``) instead of the sweep; returns the exit code."""
    from prefilltui.commands.rate_search import answer_lines, run_rate_search
    from prefilltui.model.slo import resolve

    gen, spec = session.load, options.load.spec
    objectives, notes = resolve(options.analysis.slo, options.probe.model)
    try:
        if gen is None or spec is None or spec.kind != "rate":
            err("--rate-search needs a rate load: --load rate:R,tokens:L")
            return ExitCode.USAGE
        if not objectives:
            err("--rate-search needs an objective: --slo ttft=2s@p99"
                + "".join(f" ({n})" for n in notes))
            return ExitCode.USAGE
        objective = objectives[0]
        lo, hi = options.load.search
        say(f"rate search on {display_url(session.base_url)}: {objective.label}, "
            f"{lo:g}..{hi:g} req/s of {spec.prompt_tokens}-token prompts, "
            f"{options.load.search_dwell_s:g} s a step", stream)
        if not session.start_load(wait_s=30.0):
            err(f"the load did not start: {gen.describe()}")
            return ExitCode.FAILURE
        res = run_rate_search(gen, objective, lo, hi, options.load.search_dwell_s,
                              lambda text: say(text, stream))
    except KeyboardInterrupt:
        err("interrupted")
        return ExitCode.INTERRUPTED
    finally:
        session.close()
    if as_json:
        print(json.dumps(res.to_json(), indent=2))
    else:
        for line in answer_lines(res):
            say(line, stream)
    return ExitCode.OK if res.steps else ExitCode.FAILURE


def run_sweep(options: SessionOptions, base_url: str, *, as_json: bool = False) -> int:
    """Run the headless sweep against ``base_url`` and print its summary (text, or one
    JSON object with ``as_json``); returns the exit code.  ``prefilltui demo --headless``
    runs it against its own server."""
    try:
        session = build_session(options, base_url)
    except SessionError as e:
        err(str(e))
        return e.code
    design = options.design
    stream = sys.stderr if as_json else sys.stdout
    if options.load.search is not None:
        return _rate_search(options, session, stream, as_json)
    budget_probes, budget_s = design.budget_probes, design.budget_s
    until = design.until_ci_pct
    depths = [x for x in design.depths if x > 0]
    planned_said = False  # the header is printed once
    said: list[str] = []  # the plan's notes already printed (each runner's, in order)

    def on_result(r: ProbeResult) -> None:
        runner = session.runner  # the level now running (one runner per load level)
        assert runner is not None
        total = None if until else design.warmup + len(runner.lengths) * design.repeats
        if total is not None and budget_probes:
            total = min(total, budget_probes)
        line = _progress_line(r, total, runner.finished + 1)
        prog = runner.progress
        if until and prog is not None and not r.warmup:
            line += f"  [{prog.line()}]"
        say(line, stream)

    def on_plan(planned: list[int], notes: list[str]) -> None:
        """The header, once the server's context is known: the lengths that will run;
        then each of the plan's notes once, as it comes (a cap: which lengths, to what,
        why), never again in the summary."""
        nonlocal planned_said
        if not planned_said:
            planned_said = True
            if not as_json:
                if until:
                    how = f"until throughput +-{until:g} %"
                else:
                    how = f"= {design.warmup + len(planned) * design.repeats} probes"
                cap_s = session.config.time_cap_s
                if cap_s is not None:  # the default lengths (not --lengths)
                    how += f"; a length whose probe is expected over {cap_s:g} s is capped"
                budget = ", ".join(x for x in (f"{budget_probes} probes" if budget_probes else "",
                                               f"{budget_s:g} s" if budget_s else "") if x)
                say(f"sweeping {display_url(base_url)}: lengths {','.join(map(str, planned))} x "
                      f"{design.repeats} + {design.warmup} warm-up ({how}"
                      + (f"; budget {budget}" if budget else "") + ")"
                      + (f"; then at depths {','.join(map(str, depths))} (cached prefix)"
                         if depths else ""), stream)
        for n in notes:
            if n not in said:
                said.append(n)
                say(f"  note: {n}", stream)

    slow = SlowSteps(lambda text: say(text, stream))

    def on_state(state: str, detail: str) -> None:
        slow.state(state, detail)
        if state in ("retrying",) or (state == "probing" and detail.startswith("context")):
            say(f"  {detail}", stream)

    depth_results: list[ProbeResult] = []
    depth_notes: list[str] = []
    try:
        results, runner, level_notes = run_probes(
            session, options.load.levels,
            lambda: session.new_runner(on_result, on_state, on_plan=on_plan), stream)
        if session.load is not None:
            session.load.stop(timeout=5.0)  # the load never outlives the probes
        if depths and runner.state == "done":
            depth_results, depth_notes = _run_depth_phase(
                design, session, runner.lengths, stream, max((r.seq for r in results), default=0))
        if session.trace is not None:  # the last probes' spans come seconds later
            waiting = session.trace.stats().probes_waiting
            if waiting:
                say(f"waiting up to {SPAN_WAIT_S:g} s for the server's spans of {waiting} "
                    "probe(s)", stream)
                session.trace.wait_settled(SPAN_WAIT_S)
    except KeyboardInterrupt:
        err("interrupted")
        return ExitCode.INTERRUPTED
    except LoadFailed as e:
        err(f"no probe sent: the background load did not run ({e})")
        return ExitCode.FAILURE
    finally:
        slow.close()
        session.close()
    all_results = results
    results, under = main_results(results)
    if runner.state == "failed" and not any(r.ok for r in results):
        err(runner.state_detail or "the sweep failed")
        return ExitCode.UNREACHABLE
    if not results or not any(r.ok for r in results):
        kinds = Counter(r.error_kind for r in results)
        last = next((r for r in reversed(results) if r.error_message), None)
        err(f"every probe failed ({', '.join(f'{k} {v}' for k, v in kinds.items()) or 'none ran'})"
            + (f"\nlast: {last.error_kind}: {last.error_message}" if last else "")
            + "".join(f"\nnote: {n}" for n in runner.notices.values()))
        return ExitCode.UNREACHABLE
    gpu_names = None
    telemetry = reason = None
    if session.sampler is not None:
        snap = session.sampler.snapshot()
        if snap.kind == "gpu":
            gpu_names = [dev.name for dev in snap.devices if dev.name]
        telemetry, reason = snap.kind, snap.reason
    info = runner.server_info
    live = LiveFacts(base_url=display_url(info.base_url if info else base_url),
                     proxy=info.proxy if info else None, rate_limited=runner.rate_limited,
                     until_ci=runner.progress, telemetry=telemetry, telemetry_reason=reason,
                     stopped_early=runner.state_detail if runner.state == "failed" else None,
                     # what discovery noticed (a model list over its cap, ...), then
                     # the plan's, the load levels' and the session's notes, each once
                     notes=tuple(dict.fromkeys((*(info.notes if info else ()), *runner.notes,
                                                *level_notes, *runner.notices.values()))))
    summary, analysed = _summarize(options, session, results, depth_results, runner, live,
                                   gpu_names)
    if session.users is not None and summary.live is not None:
        started, now = session.started_s, time.time()
        users = session.users.window(now, fit=summary.fit, window_s=max(now - started, 1.0))
        summary = replace(summary, live=replace(
            summary.live, spans=session.trace.stats() if session.trace is not None else None,
            users=users if users.source != "none" else None))
    info = runner.server_info
    summary = with_load(summary, all_results, session.load.traces() if session.load else (),
                        facts=session_facts_of_load(session), under=under,
                        chunk_tokens=(info.n_batch or info.n_ubatch) if info else None,
                        baseline=session.baseline)
    if depths:
        if summary.depth is not None:
            summary = replace(summary, depth=replace(
                summary.depth, notes=tuple(depth_notes) + summary.depth.notes))
        elif runner.state == "done":
            summary = replace(summary, live=replace(live, notes=live.notes + tuple(
                depth_notes or ["depth probes: none completed"])))
    path = session.path_summary(results, info)
    if as_json:
        if path is None:
            print(summary_json(summary))
        else:  # the path's object beside the summary's keys (docs/disaggregated.md)
            print(json.dumps({**summary.to_json(), "path": path.to_json()}, indent=2,
                             allow_nan=False, default=str))
    else:
        blocks = [format_sweep(summary, fit_line=not analysed, said=said),
                  # the table above has the percentiles per length
                  format_summary(summary, percentile_table=False) if analysed else "",
                  "\n".join(format_depth(summary.depth)),
                  format_diagnosis(summary.diagnosis) if summary.diagnosis is not None else "",
                  load_block(summary.load, summary.ttft_verdict),
                  "\n".join(users_lines(summary.live.users if summary.live else None,
                                        matched=_matched(summary.live))),
                  "\n".join(path_lines(path)) if path is not None else ""]
        if runner.state == "failed":
            blocks.append(f"stopped early: {runner.state_detail}")
        say("\n" + "\n\n".join(b for b in blocks if b), stream)
    if session.load is not None and session.load.fault:
        err(f"the background load stopped on a fault: {session.load.fault}")
        return ExitCode.FAILURE
    return ExitCode.OK


def _matched(live: LiveFacts | None) -> str | None:
    """How the probes' own spans went, in words ("probes' own spans 9/10, median
    latency 5,012 ms"), when the run had a receiver."""
    st = live.spans if live is not None else None
    if st is None:
        return None
    n = st.probes_matched + st.probes_expired + st.probes_waiting
    return (f"probes' own spans {st.probes_matched}/{n}, span latency median "
            f"{ms(st.latency_p50_s, 0)}")


def _users_evidence(session: Session) -> UsersEvidence | None:
    """The verdict's users' evidence over the sweep (the receiver's spans or the
    /metrics window since the session began, against the users' own expectation, and
    the server's changes of the last 10 minutes); None without either."""
    if session.users is None:
        return None
    started, now = session.started_s, time.time()
    try:
        watch = session.server_watch
        return UsersEvidence(
            users_now=session.users.window(now, window_s=max(now - started, 1.0)),
            user_requests=session.users.recent(),
            server_changes=watch.recent(now) if watch is not None else ())
    except Exception:  # noqa: BLE001 - the users' figures never cost the summary
        return None


def _summarize(options: SessionOptions, session: Session, results: list[ProbeResult],
               depth_results: list[ProbeResult], runner: SweepRunner, live: LiveFacts,
               gpu_names: list[str] | None) -> tuple[RunSummary, bool]:
    """The run's summary and whether the analysis ran: when it fails (a bug), the
    finished sweep is not lost: ``analysis.plain_summary`` (counts, table, plain fit)
    with a note saying why."""
    run_file = str(session.run_path)
    try:
        return analyze(list(results) + depth_results, runner.server_info, options.analysis,
                       gpu_names=gpu_names, baseline_fit=session.baseline,
                       baseline_problem=session.baseline_problem,
                       metrics_problem=session.metrics.problem, run_file=run_file,
                       live=live, users_evidence=_users_evidence(session)), True
    except Exception as e:  # the summary must not lose a finished sweep
        live = replace(live, notes=live.notes + (f"analysis failed: {type(e).__name__}: {e}",))
        return plain_summary(results, runner.server_info, run_file=run_file, live=live), False
