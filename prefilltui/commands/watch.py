"""`prefilltui watch URL` (also `prefilltui URL`): the live TUI against a server.

``run_tui(args, base_url, *, on_ready=None) -> int`` is shared with `prefilltui demo`:
``args`` is a Namespace carrying the server, sweep, hardware, telemetry and analysis
groups of commands/common.py plus ``--theme`` (``add_tui_args``).  Probing runs
continuously (the randomized sweep, cycled) in the runner's own thread; every probe is
appended to the run file as it completes, so quitting never loses data.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import inspect
import json
import sys
from pathlib import Path
from typing import Any, Callable

from prefilltui.commands.common import (
    add_analysis_args, add_hardware_args, add_server_args, add_sweep_args,
    add_telemetry_args,
)


def add_tui_args(p: argparse.ArgumentParser) -> None:
    """--theme (shared with `prefilltui demo`)."""
    g = p.add_argument_group("display")
    g.add_argument("--theme", metavar="NAME|PATH",
                   help="theme name (dark, light, high-contrast, or any loaded theme's name) "
                        "or a theme TOML file; extra themes are read from "
                        "<user config dir>/prefilltui/themes/*.toml; NO_COLOR is honoured")


def register(sub) -> None:
    p = sub.add_parser(
        "watch", help="live TUI against a server (same as 'prefilltui URL')",
        description="Open the live TUI: continuous one-token probes across the sweep, the "
                    "TTFT scatter with the running fit, roofline lines, GPU/CPU gauges and "
                    "the probe log.  Keys: space pause, r reset fit, w window fit, b burst, "
                    "+/- sweep range, e export, c cache check, t theme, ? help, q quit.")
    p.add_argument("url", help="server base URL, e.g. http://127.0.0.1:8000 (with or without /v1)")
    add_server_args(p)
    add_sweep_args(p)
    add_hardware_args(p)
    add_telemetry_args(p)
    add_analysis_args(p)
    add_tui_args(p)
    p.set_defaults(func=lambda args: run_tui(args, args.url))


def _err(msg: str) -> None:
    print(f"prefilltui: {msg}", file=sys.stderr)


class _LazyMetricsHook:
    """Builds core.metrics.MetricsHook once the server kind is known (after discovery)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.hook: Any = None
        self.failed = False

    async def before_probe(self, client) -> None:
        if self.hook is None and not self.failed:
            info = getattr(client, "info", None)
            if info is None:
                return
            try:
                from prefilltui.core.metrics_hook import MetricsHook

                self.hook = MetricsHook(base_url=self.base_url, kind=info.kind)
            except Exception:
                self.failed = True
                return
        if self.hook is not None:
            await self.hook.before_probe(client)

    async def after_probe(self, result) -> None:
        if self.hook is not None:
            await self.hook.after_probe(result)


def make_exporter(run_path: Path | None, info_fn: Callable[[], Any], args: Any):
    """exporter(results, fit_snapshot) -> [csv path, json path] beside the run file.

    Reads every probe back from the run file (the source of truth); falls back to the
    in-memory results when the file cannot be read.  Raises OSError on write failure.
    """

    def export(results: list, fit: Any) -> list[Path]:
        base = run_path or Path.cwd() / "prefilltui-run.jsonl"
        if run_path is not None:
            try:
                from prefilltui.core.runfile import read_run

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
        summary: dict[str, Any]
        try:
            from prefilltui.core.analysis import analyze

            summary = analyze(results, info, args)
        except ImportError:
            ok = [r for r in results if r.ok]
            summary = {
                "server": info.to_json() if info is not None else None,
                "probes": len(ok), "failed": len(results) - len(ok),
                "fit": fit.to_json() if hasattr(fit, "to_json") else None,
            }
        summary.setdefault("run_file", str(run_path) if run_path else None)
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2, default=str)
            f.write("\n")
        return [csv_path, json_path]

    return export


def make_cache_checker(client_factory: Callable[[], Any], tokens_fn: Callable[[], int]):
    """cache_checker() -> one line, or None when core.diagnose.cache_check is missing.

    Runs in a worker thread (its own event loop, its own client); the app pauses the
    runner first so the check never overlaps a probe.
    """
    try:
        from prefilltui.core.diagnose import cache_check
    except ImportError:
        return None

    def check() -> str:
        async def go() -> Any:
            client = client_factory()
            try:
                await client.discover()
                res = cache_check(client, tokens_fn())
                if inspect.isawaitable(res):
                    res = await res
                return res
            finally:
                await client.aclose()

        res = asyncio.run(go())
        for attr in ("text", "line", "summary"):
            if isinstance(getattr(res, attr, None), str):
                return getattr(res, attr)
        return str(res)

    return check


def run_tui(args: argparse.Namespace, base_url: str, *,
            on_ready: Callable[[Any], None] | None = None) -> int:
    """Run the live TUI against ``base_url`` until the user quits; returns the exit code
    (0 ok; 2 usage, e.g. a bad --gpus; 3 the server was never reached or every probe
    failed; 1 other, e.g. the run file cannot be created).  ``on_ready(app)`` is called
    once the app is mounted and the runner started."""
    from prefilltui.core.probe import ProbeClient
    from prefilltui.core.runfile import RunWriter, default_run_path
    from prefilltui.core.sweep import SweepConfig, SweepRunner, make_lengths
    from prefilltui.tui.app import build_app
    from prefilltui.tui.themes import load_themes, resolve_theme_arg, user_theme_dir
    from prefilltui.tui.viewmodel import roofline_analysis, with_baseline

    g = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    from prefilltui.commands.common import read_api_key

    try:
        api_key = read_api_key(args)
    except ValueError as exc:
        _err(str(exc))
        return 2

    def client_factory() -> ProbeClient:
        return ProbeClient(base_url, api=g("api", "completions"), model=g("model"),
                           api_key=api_key, timeout=g("timeout", 120.0),
                           verify=not g("insecure", False))

    try:
        if g("lengths"):
            lengths = sorted(set(g("lengths")))
        else:
            lengths = make_lengths(g("min_tokens", 32), g("max_tokens", 4096), g("points", 8))
    except ValueError as exc:
        _err(f"sweep range: {exc}")
        return 2
    config = SweepConfig(lengths=lengths, repeats=g("repeats", 1), warmup=g("warmup", 1),
                         pause_s=g("pause", 0.0) or 0.0, seed=g("seed"), continuous=True)
    run_path = Path(g("out")).expanduser() if g("out") else default_run_path()
    try:
        run_path.parent.mkdir(parents=True, exist_ok=True)
        writer = RunWriter(run_path)
    except OSError as exc:
        _err(f"cannot write the run file {run_path}: {exc.strerror or exc}")
        return 1

    sampler = None
    if not g("no_telemetry", False):
        from prefilltui.core.telemetry import make_sampler

        try:
            sampler = make_sampler(g("gpus"), hz=g("sample_hz", 10.0),
                                   processes=g("telemetry_processes")).start()
        except ValueError as exc:
            writer.close()
            _err(str(exc))
            return 2
    hooks: list[Any] = [_LazyMetricsHook(base_url)]
    if sampler is not None:
        hooks.insert(0, sampler)

    holder: dict[str, Any] = {}

    def runner_factory(on_result, on_state) -> SweepRunner:
        holder["runner"] = SweepRunner(client_factory, config, on_result=on_result,
                                       on_state=on_state, runfile=writer, hooks=hooks)
        return holder["runner"]

    info_fn = lambda: getattr(holder.get("runner"), "server_info", None)  # noqa: E731
    themes = load_themes(user_dir=user_theme_dir())
    theme, problem = resolve_theme_arg(g("theme"), themes)
    problems = [problem] if problem else []
    analysis = roofline_analysis(args)
    if g("baseline"):
        try:
            from prefilltui.core.diagnose import load_baseline

            analysis = with_baseline(analysis, load_baseline(g("baseline"),
                                                             method=g("fit", "robust")))
        except (OSError, ValueError, ImportError) as exc:
            problems.append(f"--baseline {g('baseline')}: {exc}")
    app = build_app(
        runner_factory, sampler, analysis=analysis, theme=theme, themes=themes,
        window=g("window", 50), fit_method=g("fit", "robust"),
        sweep_range=(min(lengths), max(lengths)), run_path=run_path,
        exporter=make_exporter(run_path, info_fn, args),
        cache_checker=make_cache_checker(client_factory, lambda: min(512, max(lengths))),
        problems=problems, on_ready=on_ready)
    code = 1
    # The probe thread must get the GIL back as soon as the first token's bytes
    # arrive; the default 5 ms switch interval lets the UI thread hold it for that
    # long (measured: TUI-vs-headless TTFT 1.42 -> 0.73 ms, tests/bench).
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, 0.0005))
    try:
        code = app.run()
        code = 0 if code is None else int(code)
    finally:
        sys.setswitchinterval(switch)
        runner = holder.get("runner")
        if runner is not None:
            try:
                runner.stop(timeout=5.0)
            except Exception:
                pass
        if sampler is not None:
            sampler.stop()
        writer.close()
    c = app.counters
    print(f"prefilltui: {c.probes} probe(s), {c.failed} failed, saved to {run_path}",
          file=sys.stderr)
    if app.state == "failed" and app.state_detail:
        _err(app.state_detail)
    return code
