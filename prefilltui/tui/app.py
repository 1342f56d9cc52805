"""The Textual app: TTFT plot, stats, gauges and probe log over a live sweep.

``build_app`` is the one factory used by the CLI (commands/watch.py) and the tests.
Data flows one way: the runner's thread -> ProbeDone/RunnerStateChanged messages ->
buffers + RunningFit -> (throttled tick) -> widgets.  Threads never touch widgets.

Cost on screen (budget: <= 5 % of a core at 1 probe/s with 10 Hz sampling): a probe
only touches buffers; one timer at ``replot_hz`` applies everything that changed (log
rows, fit, stats, plot, status) and, in the same pass, the gauges at ``gauge_hz``, so
a probe costs one screen update, not one per widget.  Widgets redraw only when their
text or drawn columns change, and none of the steady updates needs a screen layout
(fixed-height status, gauge texts and log; the stats panel only when its line count
changes).

Over 400 lines because the message handlers and the throttled tick share the app's
buffers; what stands alone is already apart (``viewmodel.py`` pure functions,
``workers.py`` thread actions, ``widgets/``, ``help.py``, ``themes.py``).
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Protocol

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Static

from prefilltui.model import defaults
from prefilltui.model.pacing import Pacing
from prefilltui.model.sanitize import clean
from prefilltui.measure.telemetry import TelemetrySnapshot
from prefilltui.model.types import FitMethod, ProbeResult, RunnerState, ServerInfo
from prefilltui.model.units import MISSING
from prefilltui.model.until_ci import Progress
from prefilltui.exit_codes import ExitCode
from prefilltui.tui.help import HelpScreen
from prefilltui.tui.load_actions import LoadActions
from prefilltui.tui.workers import WorkerActions
from prefilltui.tui.messages import ProbeDone, RunnerStateChanged
from prefilltui.tui.themes import (DEFAULT_THEME, VARIABLE_DEFAULTS, ThemeSet, load_themes,
                                   register_usable_themes)
from prefilltui.tui.viewmodel import (
    Analysis, Counters, build_stats, linear_of, no_analysis, status_line,
)
from prefilltui.tui.widgets.decode_row import DecodeRow
from prefilltui.tui.widgets.gauges import GaugePanel
from prefilltui.tui.widgets.probe_log import ProbeLog, probe_message
from prefilltui.tui.widgets.stats import StatsPanel, stats_title
from prefilltui.tui.widgets.ttft_plot import TTFTPlot

class TelemetrySource(Protocol):
    """Where the app reads telemetry: a started ``core.telemetry.Sampler`` (or a test's
    sampler returning real snapshots)."""

    def snapshot(self) -> TelemetrySnapshot: ...


class Runner(Protocol):
    """What the app drives and reads: ``core.sweep.SweepRunner`` (or a test's fake)."""

    state: RunnerState
    state_detail: str
    notes: list[str]  # each said once (lengths capped at the context, ...)
    cap_note: str | None  # short, for the status line

    @property
    def server_info(self) -> ServerInfo | None: ...
    @property
    def notices(self) -> dict[str, str]: ...
    @property
    def lengths(self) -> list[int]: ...
    @property
    def progress(self) -> Progress | None: ...

    def start(self) -> None: ...
    def stop(self, timeout: float | None = ...) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def burst(self) -> None: ...
    def set_range(self, lo: int, hi: int) -> None: ...


#: runner_factory(on_result, on_state) -> the Runner (SweepRunner) the app drives.
RunnerFactory = Callable[[Callable[[ProbeResult], None], Callable[[str, str], None]], Runner]


_RANGE = Binding.Group("Range", compact=True)


class PrefillApp(LoadActions, WorkerActions, App[int]):
    """Live prefill monitor.  Build it with ``build_app``."""

    CSS_PATH = "app.tcss"
    TITLE = "prefilltui"
    ENABLE_COMMAND_PALETTE = False
    #: wider terminals (>= 120 columns) get a taller log and a wider stats panel
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]

    BINDINGS = [
        Binding("space", "toggle_pause", "Pause", key_display="␣"),  # fits 80 columns
        Binding("r", "reset_fit", "Reset"),
        Binding("w", "toggle_window", "Window"),
        Binding("b", "burst", "Burst"),
        # one footer entry "+-Range" for the pair, so c Cache / t Theme fit at 80 columns
        Binding("plus,equals_sign", "widen", "Wider", key_display="+", group=_RANGE),
        Binding("minus", "narrow", "Narrower", key_display="-", group=_RANGE),
        Binding("e", "export", "Export"),
        Binding("s", "save_svg", "Save SVG", show=False),  # in the help; the footer is full
        Binding("c", "cache_check", "Cache"),
        Binding("t", "next_theme", "Theme"),
        Binding("l", "toggle_load", "Load", show=False),  # in the help; the footer is full
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit_app", "Quit"),
        # Ctrl-C quits too (Textual would only hint at ctrl+q): the run file is
        # already on disk and the demo's server is stopped on the way out.
        Binding("ctrl+c", "quit_app", "Quit", show=False, priority=True),
    ]

    def __init__(self, runner_factory: RunnerFactory, *, sampler: TelemetrySource | None = None,
                 fit: Any = None, analysis: Analysis = no_analysis,
                 themes: ThemeSet | None = None, theme: str | None = None,
                 sweep_range: tuple[int, int] = (defaults.MIN_TOKENS, defaults.MAX_TOKENS),
                 context_cap: int | None = None,
                 fit_method: FitMethod = defaults.FIT_METHOD, run_path: Path | None = None,
                 exporter: Callable[[list[ProbeResult], Any], list[Path]] | None = None,
                 cache_checker: Callable[[], str] | None = None,
                 probe_timeout_s: float = defaults.TIMEOUT_S,
                 clock: Callable[[], float] = time.perf_counter,
                 replot_hz: float = 1.0, gauge_hz: float = 2.0,
                 problems: list[str] = (), on_ready: Callable[["PrefillApp"], None] | None = None,
                 max_results: int = 100_000, pacing: Pacing | None = None,
                 load: Any = None) -> None:
        super().__init__()
        #: the background load (``measure.load.LoadGenerator``), None unless --load
        self.load = load
        self.load_fits: dict[float, Any] = {}
        self.runner_factory = runner_factory
        self.runner: Runner | None = None
        self.sampler = sampler
        self.fit = fit
        self.analysis = analysis
        self.theme_set = themes or load_themes()
        self._initial_theme = theme or DEFAULT_THEME
        self.sweep_range = tuple(sweep_range)
        self.context_cap = context_cap
        self.fit_method = fit_method
        self.run_path = run_path
        self.exporter = exporter
        self.cache_checker = cache_checker
        self.probe_timeout_s = probe_timeout_s
        self.clock = clock
        self.replot_hz = replot_hz
        self.gauge_hz = gauge_hz
        self.problems = list(problems)
        self.on_ready = on_ready
        #: how the runner spaces probes and sizes a burst (for the toasts and help)
        self.pacing = pacing
        self.which = "all"
        self.paused = False
        self.state, self.state_detail = "connecting", ""
        self.counters = Counters()
        self.results: deque[ProbeResult] = deque(maxlen=max_results)
        self.windows: deque[tuple[float, float]] = deque(maxlen=256)
        #: the request window of the probe under the focused log's cursor
        self.highlight: tuple[float, float] | None = None
        self.last_result: ProbeResult | None = None
        self.last_ok: ProbeResult | None = None
        self.last_fit: Any = None
        self._dirty = True
        #: probes received since the last tick, shown in the log on the next tick
        self._pending_rows: list[ProbeResult] = []
        self._gauge_next = 0.0  # time.monotonic() of the next gauge update
        self._data_next = 0.0  # ... and of the next data redraw (replot_hz)
        self._border_texts: dict[str, str] = {}  # border titles as last set
        self._device_label: str | None = None
        self._device_names: list[str] = []
        self._status_text = ""
        self._status_dirty = False  # a runner state change not yet drawn
        self._burst_pending = False  # b pressed, its probe not back yet
        self._notes_shown = 0  # runner notes already notified

    # ----------------------------------------------------------------- layout
    def get_theme_variable_defaults(self) -> dict[str, str]:
        return {**super().get_theme_variable_defaults(), **VARIABLE_DEFAULTS}

    def compose(self) -> ComposeResult:
        yield Static("", id="status")
        with Horizontal(id="top"):
            yield TTFTPlot(id="plot")
            with VerticalScroll(id="stats-box"):
                yield StatsPanel(id="stats")
        yield GaugePanel(id="gauges")
        yield DecodeRow(id="decode")
        yield ProbeLog(id="log")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        # only themes that parse with the whole stylesheet; a bad one is notified below
        self.theme = register_usable_themes(self, self.theme_set, self._initial_theme)
        self.theme_changed_signal.subscribe(self, lambda _t: self._on_theme_changed())
        for problem in self.theme_set.problems + self.problems:
            self.notify(problem, severity="warning", timeout=8)
        self.query_one("#plot", TTFTPlot).border_title = "TTFT vs prompt tokens"
        self.query_one("#stats-box").border_title = "fit"
        self.query_one("#log", ProbeLog).border_title = "probes"
        self.query_one("#plot", TTFTPlot).set_range_hint(self.sweep_range[1])
        self._update_status()
        # one timer: data at replot_hz, gauges at gauge_hz in the same pass (fewer frames)
        self.set_interval(1.0 / max(self.replot_hz, self.gauge_hz), self._tick)
        self._gauge_tick()
        self._tick()
        try:
            self.runner = self.runner_factory(self._runner_result, self._runner_state)
            self.runner.start()
        except Exception as exc:  # e.g. an empty sweep: say so, never a traceback
            self.state, self.state_detail = "failed", f"cannot start probing: {exc}"
            self.notify(self.state_detail, severity="error", timeout=15)
            self._update_status()
        if self.on_ready is not None:
            self.on_ready(self)

    def on_unmount(self) -> None:
        if self.runner is not None:
            try:
                self.runner.stop(timeout=2.0)
            except Exception:  # never a traceback at exit
                pass

    # ------------------------------------------------- runner thread -> messages
    def _runner_result(self, result: ProbeResult) -> None:
        """Called from the runner's thread: only post a message (thread-safe)."""
        self.post_message(ProbeDone(result))

    def _runner_state(self, state: str, detail: str = "") -> None:
        # a state's detail quotes servers (errors): control characters escaped here
        self.post_message(RunnerStateChanged(state, clean(detail)))

    def notify(self, message: str, **kw: Any) -> None:  # type: ignore[override]
        """Textual's notify, with control characters escaped (``model.sanitize``) and
        markup off unless asked for: notifications quote servers' words."""
        kw.setdefault("markup", False)
        super().notify(clean(message, multiline=True), **kw)

    def on_probe_done(self, message: ProbeDone) -> None:
        r = message.result
        self.results.append(r)
        self.counters.add(r)
        self.last_result = r
        if r.ok:
            self.last_ok = r
        if r.t_send is not None and r.t_end is not None:
            self.windows.append((r.t_send, r.t_end))
        if self.fit is not None:
            self.fit.add(r)  # the idle fit: probes under load never enter it
            self.add_to_level_fit(r)
        self._dirty = True
        # buffers only: the log row and every redraw wait for the next tick
        self._pending_rows.append(r)
        try:
            self.query_one("#plot", TTFTPlot).add_result(r)
        except NoMatches:  # a probe that lands while the app is shutting down
            pass

    def on_runner_state_changed(self, message: RunnerStateChanged) -> None:
        old = self.state
        self.state, self.state_detail = message.state, message.detail
        try:
            self._effective_range()
        except NoMatches:  # a state change that lands while the app is shutting down
            pass
        if message.state == "failed" and old != "failed":
            self.notify(message.detail or "probing failed", severity="error", timeout=10)
        if message.state == "done" and old != "done" and message.detail:
            self.notify(message.detail, title="done", timeout=15)
        if message.burst_done:
            self._burst_pending = False
            self.notify(f"burst: {message.detail[6:]}", timeout=8)
        elif message.state == "burst":
            self._burst_pending = False  # running: +/- no longer changes what it probes
        self._notify_runner_notes()
        if old != message.state and {old, message.state} <= {"probing", "idle"}:
            # the per-probe cycle waits for the next tick: each probe brings two state
            # changes, each a screen update of its own when drawn at once (at the
            # default pacing that was ~1 % of a core, measured)
            self._status_dirty = True
        else:
            self._update_status()

    def _notify_runner_notes(self) -> None:
        """Each new note of the runner (lengths capped at the context, ...) once."""
        notes = list(self.runner.notes) if self.runner is not None else []
        for note in notes[self._notes_shown:]:
            self.notify(note, severity="warning", timeout=12)
        self._notes_shown = max(self._notes_shown, len(notes))

    # ------------------------------------------------------------ throttled ticks
    def _redraw_soon(self) -> None:
        """A change the user asked for (a key, the theme): drawn on the next tick, not
        after the data redraw's ``replot_hz`` gap."""
        self._dirty = True
        self._data_next = 0.0

    def flush(self) -> None:
        """Redraw now whatever changed (tests call this instead of waiting a tick)."""
        self._dirty = True
        self._data_next = 0.0
        self._tick()
        self._gauge_tick()

    def _tick(self) -> None:
        """The one timer: new data (at most ``replot_hz`` times a second) and the gauges
        (``gauge_hz``, and whenever new data is shown so a probe's window is tinted in
        the same frame as its point).  All of it lands in one screen update."""
        now = time.monotonic()
        slack = 0.5 / max(self.replot_hz, self.gauge_hz)
        shown = False
        if now >= self._data_next - slack:
            new_probes = bool(self._pending_rows)
            shown = self._show_data()
            if shown and new_probes:  # probes faster than replot_hz are drawn together
                self._data_next = now + 1.0 / self.replot_hz
        if self._status_dirty and not shown:  # _show_data updates the status itself
            self._update_status()
        # half a tick of slack: timer jitter must not turn 2 Hz into every third tick
        if (self.sampler is not None or self.load is not None) and (
                shown or now >= self._gauge_next - slack):
            self._gauge_next = now + 1.0 / self.gauge_hz
            self._gauge_tick()

    def _show_data(self) -> bool:
        """Refit snapshot, stats, log rows, replot, when something changed; returns
        whether it drew."""
        if not self._dirty or not self.query("#plot"):
            return False
        self._dirty = False
        if self._pending_rows:
            rows, self._pending_rows = self._pending_rows, []
            try:
                self.query_one("#log", ProbeLog).add_results(rows)
            except Exception as exc:  # never a traceback from a timer
                self.notify(f"probe log update failed: {exc}", severity="error", timeout=6)
        try:
            snap = None
            fit = self.shown_fit()  # the idle fit, or the current load level's own
            if fit is not None:
                snap = fit.snapshot(which=self.which, method=self.fit_method)
            self.last_fit = snap
            info = self.runner.server_info if self.runner is not None else None
            roof = self.analysis(snap, info, self._device_names)
            lin = linear_of(snap)
            plot = self.query_one("#plot", TTFTPlot)
            if lin is not None:
                plot.set_fit(lin.intercept_s * 1e3, lin.slope_s_per_token * 1e3)
            else:
                plot.set_fit(None, None)
            plot.set_reference_lines([(lab, (lambda n, f=fn: f(n) * 1e3))
                                      for lab, fn in (roof.lines if roof else [])])
            plot.replot()
            # compare with what was set (the getter returns parsed content, which never
            # equals the markup: setting it anyway repaints the whole plot each tick)
            legend = plot.legend_markup()
            if legend != self._border_texts.get("legend"):
                self._border_texts["legend"] = legend
                plot.border_subtitle = legend
            stats = build_stats(snap, which=self.which, method=self.fit_method, info=info,
                                last=self.last_ok, counters=self.counters,
                                device=self._device_label, roof=roof)
            stats.notes[:0] = self.load_lines(roof)
            self.query_one("#stats", StatsPanel).show(stats)
            title = stats_title(stats) + self.level_title()
            if title != self._border_texts.get("stats"):
                self._border_texts["stats"] = title
                self.query_one("#stats-box").border_title = title
            self._update_status()
        except Exception as exc:  # a bad fit must not end the app
            self.notify(f"display update failed: {exc}", severity="error", timeout=6)
        return True

    def _gauge_tick(self) -> None:
        """Gauges from the sampler's latest snapshot (cheap; no I/O here)."""
        try:
            if self.query("#gauges"):
                self._show_gauges()
            if self.load is not None:
                now = self.sampler.snapshot().t if self.sampler is not None else None
                self._show_decode(now or self.clock())
        except Exception as exc:  # never a traceback from a timer
            self.notify(f"gauge update failed: {exc}", severity="warning", timeout=4)

    def _show_gauges(self) -> None:
        panel = self.query_one("#gauges", GaugePanel)
        if self.sampler is None:
            panel.show(None, self.clock())
            return
        try:
            snap = self.sampler.snapshot()
        except Exception as exc:
            panel.show(None, self.clock())
            self.notify(f"telemetry failed: {exc}", severity="warning")
            return
        devices = snap.devices
        names = [d.name for d in devices]
        if names != self._device_names:
            self._device_names = names
            if devices:
                first = devices[0].name or devices[0].label
                label = "CPU" if snap.kind == "cpu" else first
                self._device_label = label + (f" ×{len(devices)}" if len(devices) > 1 else "")
            self._dirty = True
        now = snap.t or self.clock()
        panel.show(snap, now, tuple(self.windows), self.highlight)

    def _update_status(self) -> None:
        self._status_dirty = False
        if not self.query("#status"):
            return
        runner = self.runner
        text = status_line(self.state, self.state_detail, self.counters, self.sweep_range,
                           self.which, self.paused,
                           tuple(runner.notices) if runner is not None else (),
                           progress=runner.progress if runner is not None else None,
                           cap_note=runner.cap_note if runner is not None else None,
                           load=self.load_status_text())
        if text != self._status_text:  # unchanged text: no redraw, no terminal bytes
            self._status_text = text
            # one line high whatever it says (CSS height: 1): no screen layout needed
            self.query_one("#status", Static).update(text, layout=False)

    def _on_theme_changed(self) -> None:
        self._redraw_soon()
        self._border_texts.clear()  # set the legend again under the new theme
        self._gauge_tick()

    # ------------------------------------------------------------------- actions
    def action_toggle_pause(self) -> None:
        if self.runner is None:
            return
        if self.paused:
            self.runner.resume()
            self.paused = False
        else:
            self.runner.pause()
            self.paused = True
        self._update_status()

    def action_reset_fit(self) -> None:
        if self.fit is not None:
            self.fit.reset()
        self.load_fits.clear()
        self.query_one("#plot", TTFTPlot).clear_points()
        self._redraw_soon()
        self.notify("fit reset (the run file keeps every probe)", timeout=3)

    def action_toggle_window(self) -> None:
        self.which = "window" if self.which == "all" else "all"
        self._redraw_soon()
        self._update_status()

    def action_burst(self) -> None:
        """Start a burst now (also while paused): back-to-back probes at the longest
        length for at least ``pacing.burst_min_s``; a probe in flight finishes first."""
        if self.runner is not None:
            self.runner.burst()
            self._burst_pending = True
            self._notify_burst()

    def _notify_burst(self) -> None:
        """Says what the burst will probe: the longest length as it is now (said again
        when + / - changes it before the burst starts)."""
        least = (f" for ≥ {self.pacing.burst_min_s:.1f} s"
                 if self.pacing is not None and self.pacing.burst_min_s > 0 else "")
        self.notify(f"burst: {self.sweep_range[1]:,} tokens back to back{least}", timeout=3)

    def _effective_range(self) -> None:
        """Take the range the runner really plans (``runner.lengths``: after server
        discovery and the context cap), read when a runner message arrives."""
        lengths = self.runner.lengths if self.runner is not None else None
        try:
            lo, hi = (min(lengths), max(lengths)) if lengths else self.sweep_range
        except (TypeError, ValueError):
            return
        if (lo, hi) != self.sweep_range:
            self.sweep_range = (int(lo), int(hi))
            self.query_one("#plot", TTFTPlot).set_range_hint(self.sweep_range[1])

    def _set_range(self, lo: int, hi: int) -> None:
        if self.context_cap is None:
            info = self.runner.server_info if self.runner is not None else None
            ctx = info.context_tokens if info is not None else None
            if ctx:
                from prefilltui.measure.sweep import cap_for_context

                self.context_cap = cap_for_context(ctx)
        if self.context_cap:
            hi = min(hi, self.context_cap)
        hi = max(hi, lo)
        if (lo, hi) == self.sweep_range:
            self.notify(f"range stays {lo}–{hi} tokens", timeout=3)
            return
        self.sweep_range = (lo, hi)
        if self.runner is not None:
            self.runner.set_range(lo, hi)
        self.query_one("#plot", TTFTPlot).set_range_hint(hi)
        self._redraw_soon()
        self._update_status()
        if self._burst_pending:
            self._notify_burst()

    def action_widen(self) -> None:
        lo, hi = self.sweep_range
        self._set_range(lo, hi * 2)

    def action_narrow(self) -> None:
        lo, hi = self.sweep_range
        self._set_range(lo, max(hi // 2, lo * 2))

    def action_next_theme(self) -> None:
        names = self.theme_set.names()
        if not names:
            return
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        self.notify(f"theme: {self.theme.removeprefix('prefilltui-')}", timeout=2)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self._telemetry_details()))

    def _telemetry_details(self) -> list[str]:
        """Pacing, then the full telemetry reasons (the gauges show short ones), for the
        help screen."""
        pace = []
        if self.pacing is not None:
            burst = (f"; burst ≥ {self.pacing.burst_min_s:.1f} s"
                     if self.pacing.burst_min_s > 0 else "")
            pace = [f"pacing: {self.pacing.describe()}{burst}"]
        return pace + self._sampler_details()

    def _sampler_details(self) -> list[str]:
        if self.sampler is None:
            return []
        try:
            snap = self.sampler.snapshot()
        except Exception as exc:
            return [f"telemetry failed: {exc}"]
        lines = [f"telemetry: {snap.reason}"] if snap.reason else []
        for dev in snap.devices:
            for metric, why in dev.na.items():
                lines.append(f"{dev.label} {metric} {MISSING}: {why}")
        return lines

    def action_quit_app(self) -> None:
        code = self.exit_code()
        self.exit(code, return_code=code)

    def exit_code(self) -> ExitCode:
        """OK normally; UNREACHABLE when the server was never reached or every probe
        failed."""
        if self.counters.ok == 0 and (self.state == "failed" or self.counters.failed):
            return ExitCode.UNREACHABLE
        return ExitCode.OK

    def on_gauge_panel_info(self, message: GaugePanel.Info) -> None:
        self.notify(message.text, title="telemetry", timeout=6)

    def on_probe_log_highlighted(self, message: ProbeLog.Highlighted) -> None:
        r = message.result
        window = ((r.t_send, r.t_end) if r is not None and r.t_send is not None
                  and r.t_end is not None else None)
        if window != self.highlight:
            self.highlight = window
            self._gauge_tick()

    def on_probe_log_selected(self, message: ProbeLog.Selected) -> None:
        r = message.result
        self.notify(probe_message(r), severity="information" if r.ok else "warning",
                    timeout=8)


def build_app(runner_factory: RunnerFactory, sampler: TelemetrySource | None = None, *,
              fit: Any = None,
              analysis: Analysis = no_analysis, theme: str | None = None,
              themes: ThemeSet | None = None, **kw: Any) -> PrefillApp:
    """The single factory for the CLI and the tests.

    runner_factory(on_result, on_state) -> runner with start/stop/pause/resume/burst/
    set_range/state/server_info (core.sweep.SweepRunner or a fake).  sampler: an object
    with ``snapshot() -> TelemetrySnapshot`` (already started) or None.  fit: a
    ``RunningFit`` (default: a new one).  analysis: see ``viewmodel.Analysis``.
    Other keyword arguments go to ``PrefillApp``.
    """
    if fit is None:
        from prefilltui.model.running_fit import RunningFit

        fit = RunningFit(window=kw.pop("window", defaults.WINDOW))
    else:
        kw.pop("window", None)
    return PrefillApp(runner_factory, sampler=sampler, fit=fit, analysis=analysis,
                      themes=themes, theme=theme, **kw)
