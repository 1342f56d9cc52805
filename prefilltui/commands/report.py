"""`prefilltui report RUN.jsonl`: re-analyse a saved run file.

Prints the same summary as the end of a sweep (fit with 95 % intervals, window fit,
roofline comparison, verdict) and a plotext scatter of TTFT against prompt tokens
with the fitted line; ``--format json`` prints the ``RunSummary``'s JSON instead (the
same as ``sweep --format json`` printed for the run, without ``live``).
``--svg FILE`` / ``--html FILE`` also write the figure (``prefilltui.render.figure``):
an SVG, and an HTML page with the same figure and the summary tables.  Probes of a
``--depth`` run get their own table (``prefilltui.model.depth``).
Exit codes (``ExitCode``): OK; FAILURE unreadable file or no probe in it; UNREACHABLE
every probe in it failed.  ``--baseline`` drift is ``core.drift``, as in sweep and the TUI.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from dataclasses import replace
from collections import Counter
from pathlib import Path

from prefilltui.commands.common import (add_analysis_args, add_hardware_args, add_output_args,
                                        analysis_options, err, say)
from prefilltui.model.summary import analyze
from prefilltui.model.sanitize import clean
from prefilltui.measure.runfile import load_baseline, read_run_sessions, read_session
from prefilltui.model.fit import LinearFit, throughput_text
from prefilltui.model.summary import RunSummary
from prefilltui.model.types import ProbeResult, server_info_from_session
from prefilltui.render.tables import format_depth
from prefilltui.render.text import format_summary, summary_json
from prefilltui.render.ticks import plot_ticks, tick_label
from prefilltui.commands.load_sweep import with_load
from prefilltui.measure.runfile import read_load
from prefilltui.model.load import facts_of_run, main_results
from prefilltui.model.loadspec import LoadSpec
from prefilltui.render.load_text import load_block
from prefilltui.exit_codes import ExitCode


def register(sub) -> None:
    p = sub.add_parser("report", help="re-analyse a saved run file (text + plot, or JSON)",
                       description="Re-analyse a run file written by sweep/watch: fit TTFT = a + b*n "
                                   "with 95 % intervals, compare with the roofline, give a verdict.")
    p.add_argument("run_file", metavar="RUN.jsonl", help="run file (one JSON line per probe)")
    p.add_argument("--model", metavar="NAME",
                   help="model name for the roofline (default: the model recorded in the run)")
    p.add_argument("--no-plot", action="store_true", help="text summary without the plot")
    p.add_argument("--svg", metavar="FILE",
                   help="also write the figure (TTFT vs prompt tokens, fit, depth series) as SVG")
    p.add_argument("--html", metavar="FILE",
                   help="also write an HTML page: the same figure, the per-length and depth "
                        "tables and the text summary")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--merge-sessions", action="store_true",
                   help="analyse every run in the file together (a file that several runs "
                        "appended to is refused otherwise)")
    g.add_argument("--session", type=_session_number, metavar="N",
                   help="analyse only the N-th run in the file (1 = the first)")
    add_hardware_args(p)
    add_analysis_args(p)
    add_output_args(p)
    p.set_defaults(func=run)


def _session_number(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a run number 1, 2, ..., got {text!r}")
    return n


def _load(path: str, *, merge: bool = True, session: int | None = None):
    """(results, None) or (None, why).  A file holding several runs (appended to by
    more than one sweep) is refused unless ``merge`` or one ``session`` is picked."""
    try:
        sessions, problems = read_run_sessions(path)
    except (OSError, UnicodeError) as e:
        return None, f"cannot read {path}: {getattr(e, 'strerror', None) or e}"
    if session is not None:
        if session > len(sessions):
            return None, f"{path} holds {len(sessions)} run(s), not {session}"
        sessions = [sessions[session - 1]]
    elif len(sessions) > 1 and not merge:
        spans = ", ".join(f"{i}: {s.span()}" for i, s in enumerate(sessions, 1))
        return None, (f"{path} holds {len(sessions)} runs ({spans}): more than one run was "
                      "written to this file; report one with --session N, or all of them "
                      "together with --merge-sessions")
    results = [r for s in sessions for r in s.results]
    for msg in problems[:5]:
        err(f"{path}: {msg} (skipped)")
    if len(problems) > 5:
        print(f"prefilltui: {path}: {len(problems) - 5} more bad lines skipped", file=sys.stderr)
    if not results:
        return None, f"no probe results in {path}"
    return results, None


def slo_of_session(keys) -> tuple:
    """The objectives a run file's session line names (``slo``: their keys, as
    ``--slo`` takes them); one that no longer parses is left out."""
    from prefilltui.model.slo import parse_objective

    out = []
    for key in keys if isinstance(keys, list) else []:
        try:
            out.append(parse_objective(key))
        except ValueError:
            continue
    return tuple(out)


def run(args) -> int:
    options = analysis_options(args)
    results, problem = _load(args.run_file, merge=args.merge_sessions, session=args.session)
    if problem:
        err(problem)
        return ExitCode.FAILURE
    models = Counter(r.model for r in results if r.model)
    # the run as the sweep saw it: the server's model shape and the GPU names
    session = read_session(args.run_file)
    info = server_info_from_session(session.get("server"),
                                    model=models.most_common(1)[0][0] if models else None)
    gpu_names = session.get("gpu_names")
    gpu_names = ([n for n in gpu_names if isinstance(n, str) and n]
                 if isinstance(gpu_names, list) else None) or None
    if not options.slo:  # the objectives the run was watched by, unless --slo says others
        options = replace(options, slo=slo_of_session(session.get("slo")))
    baseline_fit, baseline_problem = _baseline(options.baseline, options.fit)
    # probes after a deliberately cached prefix (--depth) go to their own table; probes
    # under background load are fitted per load level (the idle fit keeps none of them)
    main, under = main_results(results)
    d = analyze(main, info, options, gpu_names=gpu_names, baseline_fit=baseline_fit,
                baseline_problem=baseline_problem, run_file=str(args.run_file))
    traces, bad = read_load(args.run_file)
    for msg in bad[:5]:
        err(f"{args.run_file}: {msg} (skipped)")
    d = with_load(d, results, traces, under=under,
                  facts=facts_of_run(LoadSpec.from_json(session.get("load")), traces),
                  chunk_tokens=info.n_batch or info.n_ubatch, baseline=baseline_fit)
    text = clean(format_summary(d), multiline=True)  # run files hold servers' raw text
    drift = d.diagnosis.drift if d.diagnosis is not None else None
    if drift:
        text += f"\nDrift vs baseline: {drift}"
    if d.depth:
        text += "\n" + "\n".join(format_depth(d.depth))
    text += "\n\n" + clean(load_block(d.load, d.ttft_verdict), multiline=True)
    code = _write_figures(args, results, d, text)
    if code:
        return code
    if args.format == "json":
        print(summary_json(d))
    else:
        say(text)
        if not args.no_plot:
            plot = render_plot(results, d)
            if plot:
                print(plot)
    if not any(r.ok for r in results):
        err(f"every probe in {args.run_file} failed")
        return ExitCode.UNREACHABLE
    return ExitCode.OK


def _write_figures(args, results: list[ProbeResult], d: RunSummary, text: str) -> int:
    """Write --svg / --html; ``ExitCode.FAILURE`` (with the reason) when a file cannot
    be written, else ``ExitCode.OK``."""
    from prefilltui.render.figure import html_page, svg_figure

    load_svg = None
    if d.load is not None and (d.load.stall is not None or d.load.levels is not None):
        from prefilltui.render.load_figure import load_figure

        load_svg = load_figure(d.load.stall, d.load.levels,
                               title=f"Prefill under background load — {args.run_file}")
    jobs = [(args.svg, lambda: svg_figure(results, d)),
            (args.html, lambda: html_page(results, d, text,
                                          title=f"prefilltui report: {args.run_file}",
                                          extra_svg=load_svg))]
    if args.svg and load_svg:  # the load figure beside the main one: NAME-load.svg
        jobs.append((str(Path(args.svg).with_name(Path(args.svg).stem + "-load.svg")),
                     lambda: load_svg))
    for path, make in jobs:
        if not path:
            continue
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(make())
        except OSError as e:
            err(f"cannot write {path}: {e.strerror or e}")
            return ExitCode.FAILURE
        print(f"prefilltui: wrote {path}", file=sys.stderr)
    return ExitCode.OK


def _baseline(path: str | None, method: str) -> tuple[LinearFit | None, str | None]:
    """The ``--baseline`` run's fit (``runfile_read.load_baseline``, as sweep and the TUI load
    it), or None and why (also said on stderr)."""
    if not path:
        return None, None
    try:
        return load_baseline(path, method=method), None
    except (OSError, ValueError) as e:
        print(f"prefilltui: baseline not used: --baseline {path}: {e}", file=sys.stderr)
        return None, f"--baseline {path}: {e}"


def render_plot(results: list[ProbeResult], d: RunSummary, *, width: int | None = None,
                height: int | None = None) -> str:
    """plotext scatter of TTFT (ms) vs prompt tokens, fit line over it, both axes from 0
    with the dashboard's round ticks (``render.ticks``); '' with no points."""
    import plotext as plt

    pts = [r for r in results if r.fit_eligible]
    if not pts:
        return ""
    cols, rows = shutil.get_terminal_size((100, 30))
    width = width or min(cols, 120)
    height = height or max(12, min(rows - 4, 24))
    plt.clear_figure()
    plt.plotsize(width, height)
    color = sys.stdout.isatty()
    if not color:
        plt.theme("clear")
    xs_all, ys_all = [r.tokens for r in pts], [r.ttft_s * 1e3 for r in pts]
    plt.scatter(xs_all, ys_all, label="TTFT (fit-eligible)")
    f = d.fit
    if f is not None:
        lo = max(f.knee_tokens or 0, min(xs_all))
        hi = max(xs_all)
        xs = [lo + (hi - lo) * i / 40 for i in range(41)]
        ys = [(f.intercept_s + f.slope_s_per_token * x) * 1e3 for x in xs]
        ys_all += ys
        plt.plot(xs, ys, label=f"{f.method} fit: {throughput_text(f, 'tok/s') or 'slope ≤ 0'}")
    if d.quadratic is not None and d.quadratic.applies:
        q = d.quadratic.fit
        xs = [q.x_min + (q.x_max - q.x_min) * i / 40 for i in range(41)]
        ys = [(q.intercept_s + q.slope_s_per_token * x + q.c_s_per_token2 * x * x) * 1e3
              for x in xs]
        ys_all += ys
        plt.plot(xs, ys, label="quadratic fit")
    # from 0 with a margin, as the dashboard's plot; the canvas: the height less the
    # title, the frame, the x axis, its labels and its title
    x_max, y_max = max(max(xs_all), 16) * 1.05, max(max(ys_all), 1.0) * 1.08
    plt.xlim(0, x_max)
    plt.ylim(0, y_max)
    xt, yt = plot_ticks(x_max, y_max, width, height, height - 6)
    plt.xticks(xt, [tick_label(v) for v in xt])
    plt.yticks(yt, [tick_label(v) for v in yt])
    plt.xlabel("prompt tokens")
    plt.ylabel("TTFT (ms)")
    plt.title("TTFT vs prompt length")
    out = plt.build()
    return out if color else re.sub(r"\x1b\[[0-9;]*m", "", out)
