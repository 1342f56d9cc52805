"""`prefilltui watch URL` (also `prefilltui URL`): the live TUI against a server.

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
import csv
import sys
from pathlib import Path
from typing import Any, Callable

from prefilltui.commands.common import (
    add_analysis_args, add_hardware_args, add_load_args, add_server_args, add_sweep_args,
    add_telemetry_args, err, load_options, server_url, session_options,
)
from prefilltui.model import defaults
from prefilltui.model.analysis import analyze
from prefilltui.model.redact import display_url
from prefilltui.model.summary import LiveFacts
from prefilltui.measure.prefix_cache import run_cache_check
from prefilltui.measure.runfile import read_run
from prefilltui.exit_codes import ExitCode
from prefilltui.options import AnalysisOptions, DisplayOptions, SessionOptions
from prefilltui.render.text import summary_json
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
        "watch", help="live TUI against a server (same as 'prefilltui URL')",
        description="Open the live TUI: continuous one-token probes across the sweep, the "
                    "TTFT scatter with the running fit, roofline lines, GPU/CPU gauges and "
                    "the probe log.  Keys: space pause, r reset fit, w window fit, b burst, "
                    "+/- sweep range, e export, s save screen (SVG), c cache check, t theme, "
                    "l background load on/off (with --load), ? help, q quit.")
    p.add_argument("url", type=server_url,
                   help="server base URL, e.g. http://127.0.0.1:8000 (with or without /v1)")
    add_server_args(p)
    add_sweep_args(p)
    add_hardware_args(p)
    add_telemetry_args(p)
    add_analysis_args(p)
    add_load_args(p)
    add_tui_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``prefilltui watch``."""
    return run_tui(session_options(args, load=load_options(args)), display_options(args),
                   args.url)


def make_exporter(run_path: Path | None, info_fn: Callable[[], Any],
                  options: AnalysisOptions | None = None,
                  notices_fn: Callable[[], dict[str, str]] = dict):
    """exporter(results, fit_snapshot) -> [csv path, json path] beside the run file: the
    probes as CSV and the run's summary (the ``RunSummary`` JSON ``report`` prints).
    ``notices_fn``: the session's notices (``SweepRunner.notices``), the summary's
    ``live.notes``.

    Reads every probe back from the run file (the source of truth); falls back to the
    in-memory results when the file cannot be read.  Raises OSError on write failure.
    """

    def export(results: list, fit: Any) -> list[Path]:
        base = run_path or Path.cwd() / "prefilltui-run.jsonl"
        if run_path is not None:
            try:
                results = read_run(run_path)[0] or results
            except (OSError, ValueError):
                pass
        csv_path = base.with_suffix(".csv")
        json_path = base.with_suffix(".summary.json")
        rows = [r.to_json() for r in results]
        for row in rows:
            row.pop("extra", None)
        fields = list(rows[0].keys()) if rows else ["seq"]
        with open(csv_path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        info = info_fn()
        live = LiveFacts(base_url=display_url(info.base_url) if info else None,
                         notes=tuple(notices_fn().values()))
        summary = analyze(results, info, options,
                          run_file=str(run_path) if run_path else None, live=live)
        with open(json_path, "w", encoding="utf-8") as f:
            f.write(summary_json(summary) + "\n")
        return [csv_path, json_path]

    return export


def make_watch_app(options: SessionOptions, display: DisplayOptions, base_url: str, *,
                   on_ready: Callable[[Any], None] | None = None) -> tuple[Any, Session]:
    """The live app and its session for ``base_url`` (what ``run_tui`` runs; tests run
    it with ``app.run_test()``).  The caller closes the session.

    Raises:
        SessionError: bad options or an unwritable run file (see ``build_session``).
    """
    from prefilltui.tui.app import build_app
    from prefilltui.tui.themes import load_themes, resolve_theme_arg, user_theme_dir
    from prefilltui.tui.viewmodel import roofline_analysis, with_baseline

    session = build_session(options, base_url, continuous=True)
    lengths = session.lengths
    info_fn = lambda: session.runner.server_info if session.runner else None  # noqa: E731
    themes = load_themes(user_dir=user_theme_dir())
    theme, problem = resolve_theme_arg(display.theme, themes)
    problems = [problem] if problem else []
    analysis = roofline_analysis(options.analysis.roofline)
    if session.baseline is not None:
        analysis = with_baseline(analysis, session.baseline)
    if session.baseline_problem:
        problems.append(session.baseline_problem)
    cache_tokens = min(defaults.CACHE_CHECK_TOKENS, max(lengths))
    app = build_app(
        session.new_runner, session.sampler, analysis=analysis, theme=theme, themes=themes,
        window=options.analysis.window, fit_method=options.analysis.fit,
        sweep_range=(min(lengths), max(lengths)), run_path=session.run_path,
        exporter=make_exporter(session.run_path, info_fn, options.analysis,
                               lambda: session.runner.notices if session.runner else {}),
        cache_checker=lambda: run_cache_check(session.new_client, cache_tokens).line,
        # the same ProbeOptions the session's client was built from: one route
        probe_timeout_s=options.probe.timeout_s, problems=problems, on_ready=on_ready,
        pacing=session.config.effective_pacing, load=session.load)
    if session.load is not None:
        session.load.start()  # its own thread; the decode row and status line show it
    return app, session


def run_tui(options: SessionOptions, display: DisplayOptions, base_url: str, *,
            on_ready: Callable[[Any], None] | None = None) -> int:
    """Run the live TUI against ``base_url`` until the user quits; returns the exit code
    (``ExitCode``: OK; USAGE, e.g. a bad --gpus; UNREACHABLE, the server was never
    reached or every probe failed; FAILURE, e.g. the run file cannot be created).
    ``on_ready(app)`` is called once the app is mounted and the runner started."""
    try:
        app, session = make_watch_app(options, display, base_url, on_ready=on_ready)
    except SessionError as exc:
        err(str(exc))
        return exc.code
    code = ExitCode.FAILURE
    # The probe thread must get the GIL back as soon as the first token's bytes
    # arrive; the default 5 ms switch interval lets the UI thread hold it for that
    # long (measured: TUI-vs-headless TTFT 1.42 -> 0.73 ms, tests/bench).
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, 0.0005))
    try:
        code = app.run()
        code = ExitCode.OK if code is None else int(code)
    finally:
        sys.setswitchinterval(switch)
        session.close()
    c = app.counters
    print(f"prefilltui: {c.probes} probe(s), {c.failed} failed, saved to {session.run_path}",
          file=sys.stderr)
    if app.state == "failed" and app.state_detail:
        err(app.state_detail)
    return code
