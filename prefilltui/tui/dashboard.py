"""The dashboard of one target: TTFT plot, stats, gauges and probe log.

``DashboardScreen(feed)`` shows one ``TargetFeed``: the app's only screen for
``prefilltui URL``, and the drill-in of the fleet overview (Esc returns).  Data flows
one way: the runner's thread -> ProbeDone/RunnerStateChanged messages to the app ->
the feed (always) and this screen's buffers (while it is up) -> (throttled tick) ->
widgets.  Threads never touch widgets.  Opened on a feed that already has probes (a
drill-in), it replays them into the plot and the log first.

Cost on screen: a probe only touches buffers; one throttled timer redraws what changed
(``dashboard_ticks.DashboardTicks``, with the budget and how it is kept).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Footer, Static

from prefilltui.model.sanitize import clean
from prefilltui.model.types import ProbeResult
from prefilltui.tui.feed import TargetFeed
from prefilltui.tui.dashboard_actions import DashboardActions
from prefilltui.tui.dashboard_ticks import DashboardTicks
from prefilltui.tui.load_actions import LoadActions
from prefilltui.tui.widgets.decode_row import DecodeRow
from prefilltui.tui.widgets.gauges import GaugePanel
from prefilltui.tui.widgets.probe_log import ProbeLog
from prefilltui.tui.widgets.stats import StatsPanel
from prefilltui.tui.widgets.ttft_plot import TTFTPlot
from prefilltui.tui.workers import WorkerActions

_RANGE = Binding.Group("Range", compact=True)


class DashboardScreen(DashboardActions, LoadActions, WorkerActions, DashboardTicks, Screen[None]):
    """One target's live dashboard (see the module docstring).

    feed: the target; clock: perf_counter-compatible "now" for the gauges; replot_hz /
    gauge_hz: redraw rates; back: whether Esc returns to an overview (the fleet).
    """

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
        Binding("q", "app.quit_app", "Quit"),
    ]

    def __init__(self, feed: TargetFeed, *, clock: Callable[[], float] = time.perf_counter,
                 replot_hz: float = 1.0, gauge_hz: float = 2.0, back: bool = False) -> None:
        super().__init__()
        self.feed = feed
        self.clock = clock
        self.replot_hz = replot_hz
        self.gauge_hz = gauge_hz
        self.back = back
        #: the request window of the probe under the focused log's cursor
        self.highlight: tuple[float, float] | None = None
        self.last_fit: Any = None
        self.replayed = False  # the feed's earlier probes are in the widgets
        self._dirty = True
        #: probes received since the last tick, shown in the log on the next tick
        self._pending_rows: list[ProbeResult] = []
        self._gauge_next = 0.0  # time.monotonic() of the next gauge update
        self._data_next = 0.0  # ... and of the next data redraw (replot_hz)
        self._border_texts: dict[str, str] = {}  # border titles as last set
        self._status_text = ""
        self._status_dirty = False  # a runner state change not yet drawn
        self._burst_pending = False  # b pressed, its probe not back yet
        self._notes_shown = 0  # runner notes already notified

    # ----------------------------------------------------------------- plumbing
    @property
    def runner(self):
        return self.feed.runner

    @property
    def paused(self) -> bool:
        return self.feed.paused

    @property
    def which(self) -> str:
        return self.feed.which

    @property
    def sweep_range(self) -> tuple[int, int]:
        return self.feed.sweep_range

    @property
    def run_path(self):
        return self.feed.config.run_path

    @property
    def exporter(self):
        return self.feed.config.exporter

    @property
    def cache_checker(self):
        return self.feed.config.cache_checker

    @property
    def probe_timeout_s(self) -> float:
        return self.feed.config.probe_timeout_s

    @property
    def results(self):
        return self.feed.results

    # what the background-load part (LoadActions) reads: this feed's
    @property
    def load(self):
        return self.feed.config.load

    @property
    def fit(self):
        return self.feed.live.fit  # the idle fit

    @property
    def load_fits(self):
        return {level: ls.fit for level, ls in self.feed.levels.items()}

    @property
    def windows(self):
        return self.feed.windows

    @property
    def sampler(self):
        return self.feed.config.sampler

    def notify(self, message: str, **kw: Any) -> None:  # type: ignore[override]
        """The app's notify (control characters escaped, markup off)."""
        self.app.notify(message, **kw)

    # ----------------------------------------------------------------- layout
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
        plot = self.query_one("#plot", TTFTPlot)
        plot.border_title = ("TTFT vs prompt tokens" if not self.back
                             else f"{clean(self.feed.config.label)} · TTFT vs prompt tokens")
        self.query_one("#stats-box").border_title = "fit"
        self.query_one("#log", ProbeLog).border_title = "probes"
        plot.set_range_hint(self.feed.sweep_range[1])
        self._replay()
        self._update_status()
        # one timer: data at replot_hz, gauges at gauge_hz in the same pass (fewer frames)
        self.set_interval(1.0 / max(self.replot_hz, self.gauge_hz), self._tick)
        self._gauge_tick()
        self._tick()

    def _replay(self) -> None:
        """The feed's earlier probes into the plot and the log (a drill-in)."""
        plot = self.query_one("#plot", TTFTPlot)
        results = list(self.feed.results)
        for r in results[-4 * 2000:]:
            plot.add_result(r)
        if results:
            self.query_one("#log", ProbeLog).add_results(results[-200:])
        self._notes_shown = len(self.feed.runner.notes) if self.feed.runner else 0
        self.replayed = True
        self._dirty = True

    # ------------------------------------------------- data from the app
    def probe_arrived(self, r: ProbeResult) -> None:
        """A probe of this screen's feed (already added to the feed): buffers only; the
        log row and every redraw wait for the next tick."""
        self._dirty = True
        self._pending_rows.append(r)
        try:
            self.query_one("#plot", TTFTPlot).add_result(r)
        except NoMatches:  # a probe that lands while the screen is closing
            pass

    def state_changed(self, old: str, burst_done: bool) -> None:
        """The feed's runner state changed (the feed holds the new one)."""
        feed = self.feed
        try:
            self._effective_range()
        except NoMatches:  # a state change that lands while the screen is closing
            pass
        if feed.state == "failed" and old != "failed":
            self.notify(feed.state_detail or "probing failed", severity="error", timeout=10)
        if feed.state == "done" and old != "done" and feed.state_detail:
            self.notify(feed.state_detail, title="done", timeout=15)
        if burst_done:
            self._burst_pending = False
            self.notify(f"burst: {feed.state_detail[6:]}", timeout=8)
        elif feed.state == "burst":
            self._burst_pending = False  # running: +/- no longer changes what it probes
        self._notify_runner_notes()
        if old != feed.state and {old, feed.state} <= {"probing", "idle"}:
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

    def cache_found(self, finding) -> None:
        self.feed.cache = finding

    def on_screen_resume(self) -> None:
        self._border_texts.clear()  # a theme changed while away: set the legend again
        self._redraw_soon()

    def theme_changed(self) -> None:
        self._redraw_soon()
        self._border_texts.clear()  # set the legend again under the new theme
        self._gauge_tick()

    # ------------------------------------------------------------------- actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Esc (back to the overview) exists only in the fleet's drill-in."""
        return self.back if action == "back" else True

    def action_next_theme(self) -> None:
        self.app.action_next_theme()

    def action_back(self) -> None:
        if self.back:
            self.dismiss()


class DrillInScreen(DashboardScreen):
    """The dashboard opened from the fleet overview: Esc returns to it; e and t work but
    leave the footer to "esc Back", so it still fits 80 columns."""

    BINDINGS = [
        Binding("e", "export", "Export", show=False),
        Binding("t", "next_theme", "Theme", show=False),
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    def __init__(self, feed: TargetFeed, **kw: Any) -> None:
        super().__init__(feed, back=True, **kw)

