"""``prefilltui sweep URL``: a headless sweep with text progress and a summary.

Runs the same SweepRunner the TUI uses (warm-up, randomized order, one probe in
flight), appends every probe to the run file, and prints a summary table and the
fit TTFT = a + b*n.  ``--format json`` prints one JSON object at the end (keys
``server``, ``probes``, ``failed``, ``errors``, ``fit``, ...); progress then goes
to stderr.  Exit: 0 the sweep ran (even with failed probes), 2 usage error,
3 server unreachable or every probe failed, 1 other failure (run file not writable).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter
from typing import Any

from prefilltui.commands.common import (add_analysis_args, add_depth_arg, add_hardware_args,
                                        add_output_args, add_server_args, add_sweep_args,
                                        add_telemetry_args, err, server_url)
from prefilltui.model.analysis import analyze, format_summary
from prefilltui.model.redact import display_url
from prefilltui.model.depth import depth_table, format_depth
from prefilltui.model.diagnose import format_diagnosis, summarize_diagnosis
from prefilltui.model.fit import fit_ols, fit_robust
from prefilltui.model.percentiles import quantiles
from prefilltui.model.types import ProbeResult
from prefilltui.exit_codes import ExitCode
from prefilltui.session import Session, SessionError, build_session


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
    add_output_args(p)
    p.set_defaults(func=run)


def compute_fit(results: list[ProbeResult]) -> dict[str, Any] | None:
    """The plain robust fit (OLS when it fails) of TTFT over prompt tokens for the
    fit-eligible probes, as a JSON-ready ``LinearFit.to_json()`` dict; None with fewer
    than 3 points or a single length.  Used only when the analysis fails."""
    pts = [(float(r.tokens), float(r.ttft_s)) for r in results if r.fit_eligible]
    if len(pts) < 3 or len({x for x, _ in pts}) < 2:
        return None
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    f = fit_robust(xs, ys) or fit_ols(xs, ys)
    return f.to_json() if f is not None else None


def label_fit(d: dict[str, Any], results) -> None:
    """Mark ``d["fit"]`` ``lengths: "estimated"`` when a probe in it has an estimated
    prompt length (the server reported no count), as ``analysis.analyze`` does."""
    if d.get("fit") and any(r.fit_eligible and r.prompt_tokens_source == "estimate"
                            for r in results):
        d["fit"]["lengths"] = "estimated"


def summarize(results: list[ProbeResult], info, *, rate_limited: int = 0,
              run_file: str | None = None, notices: dict[str, str] | None = None
              ) -> dict[str, Any]:
    """The JSON summary of a finished sweep.  ``notices``: the session's notes
    (``SweepRunner.notices``), each said once under ``notes``."""
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    overheads = [r.ttft_s - r.server_prefill_s for r in ok
                 if r.ttft_s is not None and r.server_prefill_s is not None and not r.warmup]
    by_len: dict[int, list[ProbeResult]] = {}
    for r in ok:
        if not r.warmup:
            by_len.setdefault(r.requested_tokens, []).append(r)
    rows = []
    for n in sorted(by_len):
        rs = by_len[n]
        counted = [r.prompt_tokens for r in rs if r.prompt_tokens is not None]
        sp = [r.server_prefill_s for r in rs if r.server_prefill_s is not None]
        q = quantiles([r.ttft_s for r in rs])
        rows.append({"requested_tokens": n, "prompt_tokens": int(statistics.median(counted))
                     if counted else None, "n": len(rs),
                     "ttft_median_s": statistics.median(r.ttft_s for r in rs),
                     "ttft_p50_s": q["p50_s"], "ttft_p90_s": q["p90_s"], "ttft_p99_s": q["p99_s"],
                     "ttft_min_s": min(r.ttft_s for r in rs),
                     "server_prefill_median_s": statistics.median(sp) if sp else None,
                     "cache_hits": sum(1 for r in rs if r.cache_hit)})
    d: dict[str, Any] = {
        "server": {"kind": info.kind if info else None, "model": info.model if info else None,
                   "context_tokens": info.context_tokens if info else None,
                   "base_url": display_url(info.base_url) if info else None},
        "probes": len(ok),
        "failed": len(failed),
        "warmup": sum(1 for r in results if r.warmup),
        "errors": dict(Counter(r.error_kind for r in failed)),
        "rate_limited": rate_limited,
        "cache_hits": sum(1 for r in ok if r.cache_hit),
        "fit": None,  # set by _attach_analysis
        "overhead_median_s": statistics.median(overheads) if overheads else None,
        "lengths": rows,
        "run_file": run_file,
    }
    # what discovery noticed (a model list over its cap, a context from n_ctx_train),
    # then the session's notices
    notes = list(info.notes if info else []) + list((notices or {}).values())
    if notes:
        d["notes"] = notes
    label_fit(d, results)
    return d


def _ms_cell(v: float | None, width: int = 9) -> str:
    return f"{'-':>{width}}" if v is None else f"{v * 1e3:>{width},.1f}"


def format_text(d: dict[str, Any]) -> str:
    s = d["server"]
    out = [f"server  {s['kind']}  model {s['model'] or '?'}  "
           f"context {s['context_tokens'] or '?'} tokens",
           "",
           f"{'requested':>9} {'counted':>8} {'n':>4} {'TTFT p50':>9} {'p90':>9} {'p99':>9} "
           f"{'min':>9} {'server prefill':>15}   (ms)"]
    for r in d["lengths"]:
        sp = _ms_cell(r["server_prefill_median_s"], 15)
        out.append(f"{r['requested_tokens']:>9} {r['prompt_tokens'] or '-':>8} {r['n']:>4} "
                   f"{_ms_cell(r.get('ttft_p50_s', r['ttft_median_s']))} "
                   f"{_ms_cell(r.get('ttft_p90_s'))} {_ms_cell(r.get('ttft_p99_s'))} "
                   f"{_ms_cell(r['ttft_min_s'])} {sp}")
    out.append("")
    out.append(f"probes ok {d['probes']}, failed {d['failed']}, warm-up {d['warmup']}"
               + (f", rate-limited {d['rate_limited']}" if d["rate_limited"] else "")
               + (f", cache hits {d['cache_hits']}" if d["cache_hits"] else ""))
    if d["errors"]:
        out.append("errors  " + ", ".join(f"{k} {v}" for k, v in sorted(d["errors"].items())))
    f = d["fit"]
    if d.get("analysis") is not None:
        pass  # the analysis summary below shows the fit with its intervals
    elif f:
        tps = f.get("prefill_tokens_per_s")
        est = ", lengths estimated" if f.get("lengths") == "estimated" else ""
        out.append(f"fit ({f.get('method', 'ols')}{est})  TTFT = {f['intercept_s'] * 1e3:.2f} ms + "
                   f"{f['slope_s_per_token'] * 1e3:.4f} ms/token x n   "
                   f"prefill {tps:,.0f} tokens/s   R2 {f['r2']:.3f}   n {f['n']}"
                   if tps else f"fit  intercept {f['intercept_s'] * 1e3:.2f} ms, slope <= 0")
    else:
        out.append("fit  too few points (need 3 fit-eligible probes at 2+ lengths)")
    if d["overhead_median_s"] is not None:
        out.append(f"client overhead (TTFT - server prefill, median)  "
                   f"{d['overhead_median_s'] * 1e3:.2f} ms")
    u = d.get("until_ci")
    if u:
        out.append("until-ci  " + _until_line(u))
    if d["run_file"]:
        out.append(f"run file  {d['run_file']}")
    out += [f"note: {n}" for n in d.get("notes", [])]
    return "\n".join(out)


def _until_line(u: dict[str, Any]) -> str:
    """'target +-2 % reached after 57 probes (240 s): throughput +-1.9 %' and the like."""
    hw = u.get("half_width_pct")
    now = "no throughput interval" if hw is None else f"throughput +-{hw:.1f} %"
    tgt = f"target +-{u['target_pct']:g} % " if u.get("target_pct") is not None else ""
    if u.get("reason") == "target reached":
        return f"{tgt}reached after {u['probes']} probes ({u['elapsed_s']:.0f} s): {now}"
    if u.get("target_pct") is None:  # --budget alone
        return (f"{u['reason'] or 'sweep finished within the budget'}: {u['probes']} probes "
                f"({u['elapsed_s']:.0f} s)")
    why = u.get("reason") or "stopped before the target"
    return (f"{tgt}not reached: {why} after {u['probes']} probes ({u['elapsed_s']:.0f} s): {now}")


def _attach_analysis(d: dict[str, Any], results, info, args,
                     gpu_names: list[str] | None = None) -> str | None:
    """Add the analysis summary (roofline, CIs, verdict): ``d["analysis"]`` and its fit
    as ``d["fit"]``; returns its text form, or None when the analysis failed (then
    ``d["fit"]`` is the plain fit of ``compute_fit`` and a note says why)."""
    try:
        a = analyze(results, info, args, gpu_names=gpu_names)
        text = format_summary(a, percentile_table=False)  # the table above has them per length
    except Exception as e:  # the summary must not lose a finished sweep
        d.setdefault("notes", []).append(f"analysis failed: {type(e).__name__}: {e}")
        d["fit"] = compute_fit(results)
        return None
    d["analysis"] = a
    fit = a.get("fit") or {}
    d["fit"] = fit if fit.get("n") else None
    return text


def _progress_line(r: ProbeResult, total: int | None, index: int | None = None) -> str:
    """One probe's line; ``index``: which planned probe it is (a retried rate-limited
    attempt repeats its probe's number), never over ``total``; default ``r.seq``."""
    n = r.seq if index is None else index
    if total:
        n = min(n, total)
    tag = " warm-up" if r.warmup else (" burst" if r.burst else "")
    head = f"[{n:>3}/{total or '?':>3}] {r.requested_tokens:>6} tok{tag}"
    if r.ok:
        sp = f"  server {r.server_prefill_s * 1e3:.1f} ms" if r.server_prefill_s is not None else ""
        if r.queue_s is not None:
            est = " (est.)" if r.extra.get("queue_source") in ("idle", "estimated") else ""
            sp += f"  queue {r.queue_s * 1e3:.1f} ms{est}"
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
        return f"{head}{cnt}  TTFT {r.ttft_s * 1e3:.1f} ms{sp}{cache}"
    return f"{head}  FAILED {r.error_kind}: {r.error_message}"


def _depth_line(r: ProbeResult) -> str:
    d = r.extra.get("depth")
    head = f"[depth {d:,}]"
    if not r.ok:
        return f"{head} FAILED {r.error_kind}: {r.error_message}"
    if r.extra.get("depth_role") == "prefix":
        return f"{head} prefix sent ({r.prompt_tokens} counted)  TTFT {r.ttft_s * 1e3:.1f} ms"
    new = r.extra.get("depth_new_tokens")
    ok = "verified" if r.extra.get("depth_verified") else f"NOT VERIFIED: {r.extra.get('depth_flag')}"
    where = "cold" if not d else \
        f"after {r.cached_tokens if r.cached_tokens is not None else '?'} cached"
    return (f"{head} {r.requested_tokens:>6} new tok ({new if new is not None else '?'} counted "
            f"{where}, {ok})  TTFT {r.ttft_s * 1e3:.1f} ms")


def _run_depth_phase(args, session: Session, lengths: list[int], stream, seq0: int
                     ) -> tuple[list[ProbeResult], list[str]]:
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
        print(_depth_line(r), file=stream, flush=True)

    async def go() -> list[str]:
        async with session.new_client(seed_offset=1) as c:
            try:
                info = await c.discover()
            except ServerUnreachable as e:
                return [f"depth probes not run: {e}"]
            await c.warm()
            return await run_depths(c, args.depth, lengths, repeats=args.repeats,
                                    cap=cap_for_context(info.context_tokens), seed=args.seed,
                                    on_result=on_result)

    return out, asyncio.run(go())


def run_sweep(args, base_url: str) -> int:
    """Run the headless sweep against ``base_url`` (used by ``prefilltui demo --headless``)."""
    args.url = base_url
    return run(args)


def run(args) -> int:
    """Entry point of ``prefilltui sweep``; returns the exit code (see the module doc)."""
    try:
        session = build_session(args, args.url)
    except SessionError as e:
        err(str(e))
        return e.code
    as_json = args.format == "json"
    stream = sys.stderr if as_json else sys.stdout
    budget_probes, budget_s = getattr(args, "budget", None) or (None, None)
    until = getattr(args, "until_ci", None)
    depths = [x for x in (getattr(args, "depth", None) or []) if x > 0]
    holder: dict[str, Any] = {"planned": False, "notes": 0}

    def on_result(r: ProbeResult) -> None:
        total = None if until else args.warmup + len(runner.lengths) * args.repeats
        if total is not None and budget_probes:
            total = min(total, budget_probes)
        line = _progress_line(r, total, runner.finished + 1)
        prog = runner.progress
        if until and prog is not None and not r.warmup:
            line += f"  [{prog.line()}]"
        print(line, file=stream, flush=True)

    def on_plan(planned: list[int], notes: list[str]) -> None:
        """The header, once the server's context is known: the lengths that will run."""
        if not holder["planned"]:
            holder["planned"] = True
            if not as_json:
                if until:
                    how = f"until throughput +-{until:g} %"
                else:
                    how = f"= {args.warmup + len(planned) * args.repeats} probes"
                budget = ", ".join(x for x in (f"{budget_probes} probes" if budget_probes else "",
                                               f"{budget_s:g} s" if budget_s else "") if x)
                print(f"sweeping {display_url(args.url)}: lengths {','.join(map(str, planned))} x "
                      f"{args.repeats} + {args.warmup} warm-up ({how}"
                      + (f"; budget {budget}" if budget else "") + ")"
                      + (f"; then at depths {','.join(map(str, depths))} (cached prefix)"
                         if depths else ""), file=stream, flush=True)
        for n in notes[holder["notes"]:]:
            print(f"  note: {n}", file=stream, flush=True)
        holder["notes"] = len(notes)

    def on_state(state: str, detail: str) -> None:
        if state in ("retrying",) or (state == "probing" and detail.startswith("context")):
            print(f"  {detail}", file=stream, flush=True)

    runner = session.new_runner(on_result, on_state, on_plan=on_plan)
    depth_results: list[ProbeResult] = []
    depth_notes: list[str] = []
    runner.start()
    try:
        while runner.alive:
            runner.join(0.2)
        if depths and runner.state == "done":
            depth_results, depth_notes = _run_depth_phase(
                args, session, runner.lengths, stream,
                max((r.seq for r in runner.results), default=0))
    except KeyboardInterrupt:
        runner.stop(10)
        err("interrupted")
        return ExitCode.INTERRUPTED
    finally:
        session.close()
    results = runner.results
    if runner.state == "failed" and not any(r.ok for r in results):
        err(runner.state_detail or "the sweep failed")
        return ExitCode.UNREACHABLE
    if not results or not any(r.ok for r in results):
        kinds = Counter(r.error_kind for r in results)
        err(f"every probe failed ({', '.join(f'{k} {v}' for k, v in kinds.items()) or 'none ran'})")
        return ExitCode.UNREACHABLE
    d = summarize(results, runner.server_info, rate_limited=runner.rate_limited,
                  run_file=str(session.run_path), notices=runner.notices)
    d["notes"] = list(runner.notes) + d.get("notes", [])
    if runner.progress is not None:
        d["until_ci"] = runner.progress.to_json()
    gpu_names = None
    if session.sampler is not None:
        snap = session.sampler.snapshot()
        if snap.kind == "gpu":
            gpu_names = [dev.name for dev in snap.devices if dev.name]
        d["telemetry"] = {"kind": snap.kind, "reason": snap.reason}
    analysis_text = _attach_analysis(d, results, runner.server_info, args, gpu_names)
    depth_text: list[str] = []
    if depths:
        d["depth"] = depth_table(list(results) + depth_results,
                                 (d.get("analysis") or {}).get("model"))
        if d["depth"] is not None:
            d["depth"]["notes"] = depth_notes + d["depth"]["notes"]
        elif runner.state == "done":
            d.setdefault("notes", []).extend(depth_notes or ["depth probes: none completed"])
        depth_text = format_depth(d["depth"])
    d["diagnosis"] = summarize_diagnosis(results, runner.server_info,
                                         baseline=args.baseline, baseline_fit=session.baseline,
                                         baseline_problem=session.baseline_problem,
                                         metrics_problem=session.metrics.problem,
                                         method=args.fit)
    if runner.state == "failed":
        d["stopped_early"] = runner.state_detail
    if as_json:
        print(json.dumps(d, indent=2))
    else:
        print("", file=stream)
        print(format_text(d), file=stream)
        if analysis_text:
            print("", file=stream)
            print(analysis_text, file=stream)
        if depth_text:
            print("", file=stream)
            print("\n".join(depth_text), file=stream)
        print("", file=stream)
        print(format_diagnosis(d["diagnosis"]), file=stream)
        if runner.state == "failed":
            print(f"stopped early: {runner.state_detail}", file=stream)
    return ExitCode.OK
