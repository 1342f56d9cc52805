"""``prefilltui status URL ... [--config targets.toml] [--format json]``: one snapshot
of a fleet for scripts and cron.

Each target gets one pass of its lengths (one warm-up, then each length once, one
probe in flight per target, at most ``--parallel`` targets at a time), the same
analysis as ``sweep`` (``analysis.analyze``), the overview's row (``model.fleet.rows``),
the advisor's lines, and the exporter's alert rules judged on the pass
(``model.fleet.health``: the same thresholds as deploy/prefilltui-alerts.yml).  Exit code:
0 every target healthy, 4 (``ExitCode.UNHEALTHY``) at least one is not (down, probe
errors, throughput below its baseline, fixed cost high), 2 a usage error.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from prefilltui.commands.argtypes import server_url
from prefilltui.commands.common import (add_analysis_args, add_hardware_args, add_output_args,
                                        add_server_args, add_sweep_args, add_telemetry_args,
                                        analysis_options, err, say, sweep_design,
                                        telemetry_options)
from prefilltui.commands.fleet import (default_run_dir, fleet_targets, local_hosts,
                                       target_baseline)
from prefilltui.exit_codes import ExitCode
from prefilltui.exporter.config import TargetConfig
from prefilltui.model import defaults
from prefilltui.model.fleet import CacheFinding, advise, target_inputs
from prefilltui.model.summary import analyze
from prefilltui.model.fleet import RecentProbes, fleet_row
from prefilltui.model.redact import display_url
from prefilltui.model.fleet import FleetStatus, TargetStatus
from prefilltui.options import AnalysisOptions, RunFileOptions, SessionOptions, TelemetryOptions

#: Targets probed at the same time by default.
PARALLEL = 8


def register(sub) -> None:
    p = sub.add_parser(
        "status", help="one health snapshot of one or more servers (exit 4 if any is unhealthy)",
        description="Probe each target once over its lengths (one probe in flight per "
                    "target), judge it by the exporter's alert rules (down, probe errors, "
                    "throughput below --baseline, fixed cost above 0.5 s) and print the "
                    "overview's table and what to check, or one JSON object.  Exit 0: every "
                    "target healthy; 4: at least one is not; 2: usage error.")
    p.add_argument("urls", nargs="*", metavar="URL", type=server_url, help="server base URLs")
    p.add_argument("--config", metavar="FILE",
                   help="TOML file of targets (the exporter's format); the flags give the defaults")
    p.add_argument("--parallel", type=int, default=PARALLEL, metavar="K",
                   help=f"targets probed at the same time (default {PARALLEL})")
    p.add_argument("--cache-check", action="store_true",
                   help="also run a prefix-cache check per target (the advisor says when "
                        "prefix caching is off)")
    p.add_argument("--ref-tokens", type=int, default=defaults.REF_TOKENS, metavar="N",
                   help=f"prompt length of the TTFT column (default {defaults.REF_TOKENS})")
    p.add_argument("--itl-goal", type=float, default=defaults.ITL_GOAL_S * 1e3, metavar="MS",
                   help="the advisor's inter-token latency goal in ms")
    p.add_argument("--width", type=int, default=100, metavar="COLS",
                   help="width of the text table (default 100)")
    p.add_argument("--run-dir", metavar="DIR",
                   help="directory of the per-target run files of this snapshot (default: a "
                        "new one in the user data dir's prefilltui/status)")
    add_server_args(p)
    add_sweep_args(p, min_tokens=64, max_tokens=2048, points=6)
    add_hardware_args(p)
    add_telemetry_args(p)
    add_analysis_args(p)
    add_output_args(p)
    # a snapshot adds no background load (a target file's load key is not applied)
    p.set_defaults(func=run, interval=defaults.FLEET_INTERVAL_S, load=None)


def run(args: argparse.Namespace) -> int:
    try:
        targets = fleet_targets(args)
    except (ValueError, OSError) as exc:
        err(str(exc))
        return ExitCode.USAGE
    t0 = time.monotonic()
    stream = sys.stderr
    say(f"status: probing {len(targets)} target(s), one pass each, at most "
        f"{max(1, args.parallel)} at a time", stream)
    status = snapshot(targets, args)
    say(f"status: {sum(t.row.probes for t in status.targets)} probes in "
        f"{time.monotonic() - t0:.1f} s", stream)
    if args.format == "json":
        from prefilltui.render.status import status_json

        print(status_json(status))
    else:
        from prefilltui.render.status import format_status

        say(format_status(status, width=max(60, args.width), ref_tokens=args.ref_tokens))
    return ExitCode.OK if status.healthy else ExitCode.UNHEALTHY


def snapshot(targets: list[TargetConfig], args: argparse.Namespace) -> FleetStatus:
    """Every target's pass, at most ``args.parallel`` at a time; worst first."""
    from prefilltui.model.fleet import rank

    analysis = analysis_options(args)
    telemetry = telemetry_options(args)
    here = local_hosts([t.url for t in targets if not t.gpu_metrics_url]) \
        if telemetry.enabled else {}
    out: list[TargetStatus | None] = [None] * len(targets)
    gate = threading.Semaphore(max(1, args.parallel))
    run_dir = Path(args.run_dir).expanduser() if args.run_dir else default_run_dir("status")

    def one(i: int) -> None:
        with gate:
            out[i] = _one_target(targets[i], args, analysis, telemetry,
                                 here.get(targets[i].url), run_dir)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(targets))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    done = [t for t in out if t is not None]
    return FleetStatus(tuple(sorted(done, key=lambda t: rank(t.row))))


def _one_target(t: TargetConfig, args: argparse.Namespace, analysis: AnalysisOptions,
                telemetry: TelemetryOptions, local_host: bool | None, run_dir: Path
                ) -> TargetStatus:
    """One target's pass and judgement.  Never raises: a session that cannot be built
    is a target that is down, with the reason."""
    from prefilltui.model.summary import LiveFacts
    from prefilltui.session import SessionError, build_session, session_sampler

    label = t.label
    opts = SessionOptions(
        probe=t.probe, design=replace(sweep_design(args), lengths=t.lengths, pause_s=0.0),
        telemetry=replace(telemetry, enabled=False),
        run_file=RunFileOptions(path=str(run_dir / f"{t.slug}.jsonl")),
        analysis=replace(analysis, window=t.window, roofline=t.roofline))
    sampler, words = None, None
    recent = RecentProbes(span_s=float("inf"))
    results: list[Any] = []
    detail, state, info = "", "failed", None
    cache: CacheFinding | None = None
    try:
        session = build_session(opts, t.url)
    except SessionError as exc:
        session, detail = None, str(exc)
    if session is not None:
        try:
            if telemetry.enabled and (t.gpu_metrics_url or local_host):
                sampler, words = session_sampler(
                    replace(telemetry, gpu_metrics_url=t.gpu_metrics_url, gpus=t.gpus), t.url)
                if sampler.kind != "none":
                    session.hooks.append(sampler)
            runner = session.new_runner()
            runner.start()
            runner.join()
            results, state, detail, info = (list(runner.results), runner.state,
                                            runner.state_detail, runner.server_info)
            if args.cache_check and info is not None:
                from prefilltui.commands.exports import cache_finding
                from prefilltui.measure.prefix_cache import run_cache_check

                cache = cache_finding(run_cache_check(
                    session.new_client, min(defaults.CACHE_CHECK_TOKENS, max(t.lengths))))
        finally:
            session.close()
    names: list[str] = []
    if sampler is not None:
        if sampler.kind == "gpu":
            sampler.tick()  # a remote page read at least once
            names = [d.name for d in sampler.snapshot().devices if d.name]
        sampler.stop()
    now = time.time()
    for r in results:
        recent.add(r, now)
    summary = analyze(results, info, opts.analysis, gpu_names=names or None,
                      baseline_fit=session.baseline if session else None,
                      live=LiveFacts(base_url=display_url(t.url)))
    if words is None:
        words = ("no GPU source: " + ("--no-telemetry" if not telemetry.enabled else
                 "another machine (set gpu_metrics_url)")) if not local_host else None
    try:
        base_tps, base_source, roofline = target_baseline(t, session)
    except ValueError as exc:  # an unreadable baseline_run: said, not judged
        base_tps, base_source, roofline = None, None, False
        detail = f"{detail}; {exc}" if detail else str(exc)
    # a probe that timed out waited past the hang threshold: the hang rule, after the fact
    waited = max((t.probe.timeout_s for r in results if r.error_kind == "timeout"), default=None)
    row = fleet_row(0, label, state if results or state == "failed" else "failed", summary,
                    recent, now=now, detail=detail, last_probe_at=now if results else None,
                    baseline_tok_s=base_tps, baseline_source=base_source,
                    baseline_roofline=roofline, ref_tokens=args.ref_tokens, results=results,
                    gpu=", ".join(sorted(set(names))) or None, in_flight_s=waited,
                    hang_after_s=t.hang_after_s)
    advice = advise(target_inputs(
        summary, info, results, cache=cache, itl_goal_s=args.itl_goal / 1e3,
        metrics=session.metrics.last_sample if session is not None else None))
    return TargetStatus(label=label, url=t.shown_url, row=row, summary=summary,
                        advice=advice, gpu_source=words)
