"""`prefilltui watch URL` (also `prefilltui URL`): the live TUI against a server;
with several URLs or ``--config targets.toml``, the fleet overview
(``commands/fleet.py``).

``run_tui(options, display, base_url, *, on_ready=None) -> int`` is shared with
`prefilltui demo`: ``options`` (``SessionOptions``) and ``display``
(``DisplayOptions``, ``--theme``) are built from the command line once
(``commands.common.session_options``, ``display_options``); the objects come from
``prefilltui.session.build_session``, as for ``sweep``.  Probing runs
continuously (the randomized sweep, cycled) in the runner's own thread, with an idle
gap after each probe (``core.pacing.auto_pacing``: duty 0.5 by default) so the gauges
show one spike per long probe; every probe is appended to the run file as it
completes, so quitting never loses data.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from prefilltui.commands.argtypes import server_url
from prefilltui.commands.common import (
    add_analysis_args, add_hardware_args, add_load_args, add_server_args, add_sweep_args,
    add_otlp_args, add_path_args, add_telemetry_args, err, load_options, otlp_options,
    path_options, run_app, session_options,
)
from prefilltui.commands.exports import cache_finding, make_exporter
from prefilltui.commands.fleet import add_fleet_args, run_fleet
from prefilltui.model import defaults
from prefilltui.model.redact import display_url
from prefilltui.measure.prefix_cache import run_cache_check
from prefilltui.exit_codes import ExitCode
from prefilltui.options import DisplayOptions, SessionOptions
from prefilltui.session import Session, SessionError, build_session


def add_tui_args(p: argparse.ArgumentParser) -> None:
    """--theme (shared with `prefilltui demo`)."""
    g = p.add_argument_group("display")
    g.add_argument("--theme", metavar="NAME|PATH",
                   help="theme name (dark, light, high-contrast, or any loaded theme's name) "
                        "or a theme TOML file; extra themes are read from "
                        "<user config dir>/prefilltui/themes/*.toml; NO_COLOR is honoured")


def display_options(args: argparse.Namespace) -> DisplayOptions:
    """``add_tui_args``'s flags."""
    return DisplayOptions(theme=args.theme)


def register(sub) -> None:
    p = sub.add_parser(
        "watch", help="live TUI against a server (same as 'prefilltui URL'); several: a fleet",
        description="Open the live TUI: continuous one-token probes across the sweep, the "
                    "TTFT scatter with the running fit, roofline lines, GPU/CPU gauges and "
                    "the probe log.  Keys: space pause, r reset fit, w window fit, b burst, "
                    "+/- sweep range, e export, s save screen (SVG), c cache check, t theme, "
                    "l background load on/off (with --load), ? help, q quit.  With several "
                    "URLs or --config FILE: the fleet overview, one row per target, the worst "
                    "first (enter opens a target's dashboard, esc returns; s sorts).")
    p.add_argument("urls", nargs="*", metavar="URL", type=server_url,
                   help="server base URL, e.g. http://127.0.0.1:8000 (with or without /v1); "
                        "several for the fleet overview")
    add_server_args(p)
    add_sweep_args(p)
    add_hardware_args(p)
    add_telemetry_args(p)
    add_analysis_args(p)
    add_load_args(p)
    add_otlp_args(p)
    add_path_args(p)
    add_tui_args(p)
    add_fleet_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``prefilltui watch``: one URL, today's dashboard; several, or
    ``--config`` / ``--file-sd`` / ``--http-sd``, the fleet overview."""
    listed = args.config or args.file_sd or args.http_sd  # a target list: the fleet
    try:
        path = path_options(args)
    except ValueError as e:
        err(str(e))
        return ExitCode.USAGE
    if len(args.urls) == 1 and not listed:
        return run_tui(session_options(args, load=load_options(args), otlp=otlp_options(args),
                                       path=path),
                       display_options(args), args.urls[0])
    if path.enabled:
        err("--prefill / --decode name the workers of one router URL; for several paths "
            "use --config FILE with prefill = / decode = per target (docs/disaggregated.md)")
        return ExitCode.USAGE
    if not args.urls and not listed:
        err("no target: give a server URL (several for the fleet overview), --config FILE "
            "or --file-sd FILE")
        return ExitCode.USAGE
    return run_fleet(args, display_options(args))


def make_watch_app(options: SessionOptions, display: DisplayOptions, base_url: str, *,
                   on_ready: Callable[[Any], None] | None = None,
                   sub_title: str = "") -> tuple[Any, Session]:
    """The live app and its session for ``base_url`` (what ``run_tui`` runs; tests run
    it with ``app.run_test()``).  The caller closes the session.  ``sub_title``: the
    app's subtitle, shown on screen (``demo`` gives its server's URL).

    Raises:
        SessionError: bad options or an unwritable run file (see ``build_session``).
    """
    from prefilltui.tui.app import build_app
    from prefilltui.tui.themes import load_themes, resolve_theme_arg, user_theme_dir

    session = build_session(options, base_url, continuous=True)
    lengths = session.lengths
    info_fn = lambda: session.runner.server_info if session.runner else None  # noqa: E731
    themes = load_themes(user_dir=user_theme_dir())
    theme, problem = resolve_theme_arg(display.theme, themes)
    problems = [problem] if problem else []
    if session.baseline_problem:
        problems.append(session.baseline_problem)
    cache_tokens = min(defaults.CACHE_CHECK_TOKENS, max(lengths))
    app = build_app(
        session.new_runner, session.sampler, analysis=options.analysis,
        baseline=session.baseline, theme=theme, themes=themes,
        sweep_range=(min(lengths), max(lengths)), run_path=session.run_path,
        exporter=make_exporter(session.run_path, info_fn, options.analysis,
                               lambda: session.runner.notices if session.runner else {}),
        cache_checker=lambda: cache_finding(run_cache_check(session.new_client, cache_tokens)),
        # the same ProbeOptions the session's client was built from: one route
        probe_timeout_s=options.probe.timeout_s, problems=problems, on_ready=on_ready,
        pacing=session.config.effective_pacing, label=display_url(base_url) or base_url,
        gpu_source=session.gpu_source, metrics=lambda: session.metrics.last_sample,
        baseline_tok_s=(session.baseline.prefill_tokens_per_s
                        if session.baseline is not None else None), load=session.load,
        users=session.users, sub_title=sub_title,
        server_changes=session.server_watch.recent if session.server_watch else None)
    if session.load is not None:
        session.load.start()  # its own thread; the decode row and status line show it
    return app, session


def run_tui(options: SessionOptions, display: DisplayOptions, base_url: str, *,
            on_ready: Callable[[Any], None] | None = None, sub_title: str = "") -> int:
    """Run the live TUI against ``base_url`` until the user quits; returns the exit code
    (``ExitCode``: OK; USAGE, e.g. a bad --gpus; UNREACHABLE, the server was never
    reached or every probe failed; FAILURE, e.g. the run file cannot be created).
    ``on_ready(app)`` is called once the app is mounted and the runner started;
    ``sub_title`` is shown on screen (``make_watch_app``)."""
    try:
        app, session = make_watch_app(options, display, base_url, on_ready=on_ready,
                                      sub_title=sub_title)
    except SessionError as exc:
        err(str(exc))
        return exc.code
    code = run_app(app, session.close)
    if app.hung_up:  # the terminal is gone: nobody to tell, and a write would fail
        return code
    feed = app.feed  # the whole session's counts (the dashboard's r resets its own)
    print(f"prefilltui: {feed.session_total} probe(s), {feed.session_failed} failed, saved "
          f"to {session.run_path}", file=sys.stderr)
    if app.state == "failed" and app.state_detail:
        err(app.state_detail)
    return code
