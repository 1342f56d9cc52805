"""The fleet overview's wiring: ``prefilltui URL URL ...`` / ``prefilltui --config
targets.toml`` (through ``watch``), and the targets ``prefilltui status`` reads.

Targets are the exporter's ``TargetConfig`` (one format: ``exporter.config.load_toml``
reads the same TOML file, the command-line flags give its ``[defaults]``).  Each
target gets its own session (``session.build_session``: probe client, ``/metrics``
hook, run file, one ``SweepRunner``: at most one probe in flight) and a
``FeedConfig``; the targets' probe starts are spaced by ``model.fleet.rows.fleet_interval``
(each target's interval, stretched so the fleet stays under ``--fleet-rate`` probe
starts per second) and their first probes staggered over one interval.  GPU readings
come from each target's ``gpu_metrics_url`` page, this machine's NVML only for a
target on this machine, else "no GPU source" (``measure.telemetry.remote``); a page or
the local sampler is shared by the targets that name it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from prefilltui.commands.argtypes import _positive_float, _positive_int, _shard
from prefilltui.commands.common import (err, probe_options, roofline_spec, run_app,
                                        sweep_design)
from prefilltui.exit_codes import ExitCode
from prefilltui.exporter.config import (JITTER, TargetConfig, check, load_toml, otlp_options,
                                        path_options, unique)
from prefilltui.model import defaults
from prefilltui.model.fleet import fleet_interval, fleet_load
from prefilltui.options import (AnalysisOptions, DisplayOptions, FleetOptions, LoadOptions,
                                RunFileOptions, SessionOptions, SweepDesign, TelemetryOptions)

#: Results each target's runner keeps in memory (the feed keeps its own for the plot).
RUNNER_KEEP = 8
#: Recent results a fleet target's feed keeps (the plot shows at most 2,000 points).
FEED_KEEP = 2000
#: Seconds the fleet waits for host names to resolve (is this target local?).
RESOLVE_S = 3.0


def add_fleet_args(p: argparse.ArgumentParser) -> None:
    """The fleet's flags (the ``watch`` command's, used with several targets)."""
    g = p.add_argument_group("fleet (several URLs, or --config)")
    g.add_argument("--config", metavar="FILE",
                   help="TOML file of targets, the exporter's format ([defaults], [[target]] "
                        "with url, name, interval, gpu_metrics_url, ...); the flags give the "
                        "defaults")
    g.add_argument("--interval", type=_positive_float, default=defaults.FLEET_INTERVAL_S,
                   metavar="S", help="each target's shortest gap between probe starts "
                   f"(default {defaults.FLEET_INTERVAL_S:g}; a target's own interval wins)")
    g.add_argument("--fleet-rate", type=_positive_float, default=defaults.FLEET_RATE,
                   metavar="R", help="most probe starts per second across the fleet: gaps "
                   f"are stretched to targets/R (default {defaults.FLEET_RATE:g})")
    g.add_argument("--ref-tokens", type=_positive_int, default=defaults.REF_TOKENS,
                   metavar="N", help=f"prompt length of the TTFT column (default "
                   f"{defaults.REF_TOKENS})")
    g.add_argument("--itl-goal", type=_positive_float, default=defaults.ITL_GOAL_S * 1e3,
                   metavar="MS", help="the advisor's inter-token latency goal in ms "
                   f"(default {defaults.ITL_GOAL_S * 1e3:g})")
    g.add_argument("--run-dir", metavar="DIR",
                   help="directory of the per-target run files (default: a new one in the "
                        "user data dir's prefilltui/fleet)")
    g.add_argument("--file-sd", action="append", default=[], metavar="FILE",
                   help="targets from a Prometheus file_sd file (JSON or YAML; the labels of "
                        "docs/kubernetes.md), read once at start")
    g.add_argument("--http-sd", action="append", default=[], metavar="URL",
                   help="targets from a Prometheus http_sd URL, read once at start")
    g.add_argument("--shard", type=_shard, default=None, metavar="I/N",
                   help="only the targets whose entry (the file_sd/http_sd string, else "
                        "the URL) falls to shard I of N (Prometheus' hashmod, as the "
                        "exporter's --shard)")


def discovered_targets(args: argparse.Namespace, base: TargetConfig) -> list[TargetConfig]:
    """The targets of ``--file-sd`` / ``--http-sd``, read once (the overview does not
    follow later changes; the exporter does).

    Raises:
        ValueError: a source that cannot be read or holds a bad list (its reason)."""
    from prefilltui.exporter.discovery import Discovery, FileSource, HttpSource

    sources = ([FileSource(f) for f in getattr(args, "file_sd", None) or []]
               + [HttpSource(u, 0) for u in getattr(args, "http_sd", None) or []])
    if not sources:
        return []
    disc = Discovery(sources, base)
    disc.refresh()
    bad = [st.error for st in disc.states if st.error]
    if bad:
        raise ValueError(bad[0])
    return disc.targets()


def fleet_options(args: argparse.Namespace) -> FleetOptions:
    """``add_fleet_args``'s flags."""
    return FleetOptions(interval_s=args.interval, fleet_rate=args.fleet_rate,
                        ref_tokens=args.ref_tokens, itl_goal_s=args.itl_goal / 1e3,
                        run_dir=args.run_dir)


def fleet_targets(args: argparse.Namespace, *, otlp_listen: str | None = None
                  ) -> list[TargetConfig]:
    """The targets of a parsed command line: its URLs, then the ``--config`` file's, then
    ``--file-sd`` / ``--http-sd``'s (read once), this ``--shard``'s share, with the flags
    as defaults (server, hardware, sweep lengths, --interval, --window,
    --gpu-metrics-url, --gpus, and ``otlp_listen``: the fleet's ``--otlp-listen``;
    ``status`` has none).

    Raises:
        ValueError: a bad target file, a duplicate target or no target at all;
        OSError: unreadable file.
    """
    from prefilltui.session import SessionError, sweep_lengths

    try:
        lengths = tuple(sweep_lengths(sweep_design(args)))
    except SessionError as exc:
        raise ValueError(str(exc)) from None
    base = TargetConfig(url="http://unset", probe=probe_options(args),
                        roofline=roofline_spec(args), lengths=lengths,
                        interval_s=args.interval, window=args.window,
                        gpu_metrics_url=args.gpu_metrics_url, gpus=args.gpus, load=args.load,
                        otlp_listen=otlp_listen)
    targets = [check(replace(base, url=u)) for u in args.urls]
    if args.config:
        targets += load_toml(args.config, base)
    targets = unique(targets + discovered_targets(args, replace(base, name="")))
    shard = getattr(args, "shard", None)
    if shard:
        targets = shard.select(targets)
    if not targets:
        raise ValueError("no target: give server URLs, --config FILE or --file-sd FILE"
                         + (f" (none falls to shard {shard})" if shard else ""))
    return targets


@dataclass
class Fleet:
    """What a running fleet holds (closed by ``close``): the sessions, the shared
    samplers, the feeds' configs and the fleet's own load (``FleetLoad``)."""

    sessions: list[Any] = field(default_factory=list)
    samplers: list[Any] = field(default_factory=list)
    configs: list[Any] = field(default_factory=list)
    load: Any = None  # model.fleet.rows.FleetLoad
    run_dir: Path | None = None

    def close(self) -> None:
        for s in self.sessions:
            if s.runner is not None:
                s.runner.stop(timeout=0)  # cancel every probe in flight at once
        for s in self.sessions:
            s.close()
        for smp in self.samplers:
            smp.stop()


def default_run_dir(kind: str = "fleet") -> Path:
    """A new directory for one run's per-target run files: the user data dir's
    prefilltui/<kind>/<date-time> (one file per target, never two runs in one file)."""
    import platformdirs

    return (Path(platformdirs.user_data_dir("prefilltui", appauthor=False)) / kind
            / time.strftime("%Y%m%d-%H%M%S"))


def local_hosts(urls: list[str], timeout_s: float = RESOLVE_S) -> dict[str, bool]:
    """``is_local`` of each URL, resolved in parallel; a host that does not resolve in
    ``timeout_s`` counts as another machine."""
    from prefilltui.measure.telemetry import is_local, local_addresses

    mine = local_addresses()
    out = {u: False for u in urls}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(16, max(1, len(urls))))
    futures = {pool.submit(is_local, u, addresses=mine): u for u in set(urls)}
    try:
        for fut in concurrent.futures.as_completed(futures, timeout=timeout_s):
            out[futures[fut]] = bool(fut.result())
    except concurrent.futures.TimeoutError:
        pass
    pool.shutdown(wait=False, cancel_futures=True)
    return out


def build_fleet(targets: list[TargetConfig], fleet: FleetOptions, *, analysis: AnalysisOptions,
                design: SweepDesign, telemetry: TelemetryOptions, seed: int | None = None,
                local_sampler: Callable[[], Any] | None = None) -> Fleet:
    """Sessions, samplers and feed configs of ``targets`` (see the module docstring).

    Raises:
        SessionError: a target's session cannot be built (an API key that cannot be
            sent, an unwritable run file); what was built is closed.
    """
    from prefilltui.measure.telemetry import make_sampler
    from prefilltui.measure.telemetry import split_vendor
    from prefilltui.measure.telemetry import NO_SOURCE, RemoteGpuSampler, choose_gpu_source, poll_hz
    from prefilltui.session import build_session
    from prefilltui.tui.feed import FeedConfig

    out = Fleet(run_dir=Path(fleet.run_dir).expanduser() if fleet.run_dir else default_run_dir())
    n = len(targets)
    intervals = [fleet_interval(n, t.interval_s, fleet.fleet_rate) for t in targets]
    load = fleet_load([t.lengths for t in targets], intervals, JITTER)
    offsets = load.offsets_s
    out.load = load
    pages = {t.gpu_metrics_url for t in targets if t.gpu_metrics_url}
    shared: dict[str, Any] = {}

    def local() -> Any:
        if "local" not in shared:
            make = local_sampler or (lambda: make_sampler(telemetry.gpus, hz=telemetry.sample_hz))
            shared["local"] = make().slow_between_probes().start()
            out.samplers.append(shared["local"])
        return shared["local"]

    def remote_for(select: str | None) -> Callable[[str], Any]:
        def remote(url: str) -> Any:
            key = f"{url}#{select or ''}"
            if key not in shared:
                picked = split_vendor(select)[1]  # "amd:0": the page's GPU 0
                sel = tuple(x.strip() for x in picked.split(",")) if picked else None
                shared[key] = RemoteGpuSampler(url, hz=poll_hz(len(pages)), select=sel
                                               ).slow_between_probes().start()
                out.samplers.append(shared[key])
            return shared[key]
        return remote

    here = (local_hosts([t.url for t in targets if not t.gpu_metrics_url])
            if telemetry.enabled else {})
    try:
        for i, (t, interval) in enumerate(zip(targets, intervals)):
            opts = SessionOptions(
                probe=t.probe,
                design=replace(design, lengths=t.lengths, pause_s=0.0, duty=None,
                               interval_s=interval, jitter=JITTER, keep_results=RUNNER_KEEP,
                               seed=None if seed is None else seed + i),
                telemetry=TelemetryOptions(enabled=False),
                run_file=RunFileOptions(path=str(out.run_dir / f"{t.slug}.jsonl")),
                analysis=replace(analysis, window=t.window, roofline=t.roofline),
                load=LoadOptions(spec=t.load), otlp=otlp_options(t),
                # a path is one row, its router's: its workers are scraped in its session
                path=path_options(t))
            session = build_session(opts, t.url, continuous=True)
            out.sessions.append(session)
            if session.load is not None:
                session.load.start()  # asked for (load = ... / --load); bounded (docs/load.md)
            if telemetry.enabled:
                src = choose_gpu_source(t.url, t.gpu_metrics_url, local=local,
                                        remote=remote_for(t.gpus), local_host=here.get(t.url))
                sampler, words = src.sampler, src.words
                if src.sampler.kind != "none":
                    session.hooks.append(src.sampler)  # per-probe GPU util/power
            else:
                sampler, words = None, f"{NO_SOURCE}: --no-telemetry"
            out.configs.append(_feed_config(FeedConfig, t, session, sampler, words, fleet,
                                            offsets[i] if i < len(offsets) else 0.0))
    except BaseException:
        out.close()
        raise
    return out


def _feed_config(FeedConfig, t: TargetConfig, session, sampler, words: str,
                 fleet: FleetOptions, delay: float):
    from prefilltui.commands.exports import cache_finding, make_exporter
    from prefilltui.measure.prefix_cache import run_cache_check

    info_fn = lambda: session.runner.server_info if session.runner else None  # noqa: E731
    cache_tokens = min(defaults.CACHE_CHECK_TOKENS, max(t.lengths))
    base_tps, base_source, roofline = target_baseline(t, session)
    return FeedConfig(
        label=t.label, url=t.shown_url,
        runner_factory=session.new_runner, sampler=sampler, gpu_source=words,
        analysis=session.options.analysis, baseline=session.baseline,
        sweep_range=(min(t.lengths), max(t.lengths)), run_path=session.run_path,
        exporter=make_exporter(session.run_path, info_fn, session.options.analysis,
                               lambda: session.runner.notices if session.runner else {}),
        cache_checker=lambda: cache_finding(run_cache_check(session.new_client, cache_tokens)),
        probe_timeout_s=t.probe.timeout_s, pacing=session.config.effective_pacing,
        problems=(session.baseline_problem,) if session.baseline_problem else (),
        start_delay_s=delay, max_results=FEED_KEEP,
        baseline_tok_s=base_tps, baseline_source=base_source, baseline_roofline=roofline,
        hang_after_s=t.hang_after_s, interval_s=session.config.interval_s,
        metrics=lambda: session.metrics.last_sample, itl_goal_s=fleet.itl_goal_s,
        load=session.load, users=session.users,
        server_changes=session.server_watch.recent if session.server_watch else None)


def target_baseline(t: TargetConfig, session) -> tuple[float | None, str | None, bool]:
    """A target's explicit throughput baseline for the health rules, as the exporter's
    alerts take it: ``expected_throughput`` (a number, or "roofline": the third value
    True), else ``baseline_run``'s fit, else the ``--baseline`` run's fit.  (tokens/s or
    None, where it comes from, roofline).

    Raises:
        ValueError: naming the target, when ``baseline_run`` cannot be read or has no
            throughput (``exporter.health.explicit_baseline``).
    """
    from prefilltui.exporter.health import explicit_baseline

    if t.expected_throughput == "roofline":
        return None, None, True
    exp = explicit_baseline(t)
    if exp is not None:
        return exp.tokens_per_s, {"config": "expected_throughput"}.get(exp.source, exp.source), False
    fit = session.baseline if session is not None else None
    if fit is not None and fit.prefill_tokens_per_s:
        return fit.prefill_tokens_per_s, "--baseline run", False
    return None, None, False


def run_fleet(args: argparse.Namespace, display: DisplayOptions) -> int:
    """``prefilltui URL URL ...`` / ``--config FILE``: the overview until the user quits."""
    from prefilltui.commands.common import analysis_options, telemetry_options
    from prefilltui.session import SessionError
    from prefilltui.tui.app import build_fleet_app
    from prefilltui.tui.themes import load_themes, resolve_theme_arg, user_theme_dir

    try:
        targets = fleet_targets(args, otlp_listen=args.otlp_listen)
    except (ValueError, OSError) as exc:
        err(str(exc))
        return ExitCode.USAGE
    options = fleet_options(args)
    try:
        fleet = build_fleet(targets, options, analysis=analysis_options(args),
                            design=sweep_design(args), telemetry=telemetry_options(args),
                            seed=args.seed)
    except SessionError as exc:
        err(str(exc))
        return exc.code
    except ValueError as exc:  # a target's baseline_run that cannot be read
        err(str(exc))
        return ExitCode.USAGE
    themes = load_themes(user_dir=user_theme_dir())
    theme, problem = resolve_theme_arg(display.theme, themes)
    app = build_fleet_app(fleet.configs, theme=theme, themes=themes,
                          problems=[problem] if problem else [], load=fleet.load,
                          ref_tokens=options.ref_tokens)
    code = run_app(app, fleet.close)
    if app.hung_up:  # the terminal is gone: nobody to tell, and a write would fail
        return code
    total = sum(f.session_total for f in app.feeds)  # not reset by a dashboard's r
    failed = sum(f.session_failed for f in app.feeds)
    print(f"prefilltui: {len(app.feeds)} targets, {total} probe(s), {failed} failed, run files "
          f"in {fleet.run_dir}", file=sys.stderr)
    return code
