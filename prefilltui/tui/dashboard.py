"""The dashboard of one target: TTFT plot, the fit's headline and details, gauges,
probe log, a line for messages.

``DashboardScreen(feed)`` shows one ``TargetFeed``: the app's only screen for
``prefilltui URL``, and the drill-in of the fleet overview (Esc returns).  Data flows
one way: the runner's thread -> ProbeDone/RunnerStateChanged messages to the app ->
the feed (always) and this screen (while it is up) -> its ``Redraw`` (buffers, then a
throttled tick) -> widgets.  Threads never touch widgets.  Opened on a feed that
already has probes (a drill-in), it replays them into the plot and the log first.

The screen is composed of parts that own their state, each given what it needs:
``SweepControls`` (what the keys do to the feed and its runner), ``Jobs`` (export,
save the screen, cache check: workers that post messages), ``LoadControl`` (the
background load, with ``--load``), ``Redraw`` (the throttled redraw and its buffers);
the widgets keep their own drawn state and talk by messages (``ProbeLog.Highlighted``
/ ``Selected``, ``GaugePanel.Info``).  The screen holds the one piece of state the
widgets share, ``highlight`` (the probe under the log's cursor), and whether the
details panel is open.

A layout per size: the headline (prefill throughput with its interval, the fixed
cost, MFU or the achieved FLOP/s or what they need, the verdict, why TTFT) and the
gauges are always in view; from 28 rows up the details follow the headline in the
side panel, below that they open in place of the plot (``d``).  Notifications go to
the message line above the footer, never over the widgets (no toasts, on any screen);
the footer lists every key the width leaves room for, the help all of them.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.reactive import var
from textual.screen import Screen
from textual.worker import Worker, WorkerState
from textual.widgets import Footer

from prefilltui.model.sanitize import clean
from prefilltui.model.types import ProbeResult
from prefilltui.tui.controls import SweepControls
from prefilltui.tui.feed import TargetFeed
from prefilltui.tui.help import HelpScreen, dashboard_details
from prefilltui.tui.jobs import Jobs
from prefilltui.tui.load_control import NO_LOAD, LoadControl
from prefilltui.tui.messages import CacheCheckDone, ExportDone
from prefilltui.tui.redraw import GAUGE_HZ, REPLOT_HZ, Panels, Redraw
from prefilltui.tui.widgets.decode_row import DecodeRow
from prefilltui.tui.widgets.gauges import GaugePanel
from prefilltui.tui.widgets.message_line import MessageLine, Severity
from prefilltui.tui.widgets.probe_log import ProbeLog, probe_message
from prefilltui.tui.widgets.stats import DetailsBox, Headline, StatsPanel
from prefilltui.tui.widgets.path_row import PathRow
from prefilltui.tui.widgets.slo_row import SloRow
from prefilltui.tui.widgets.status_line import StatusLine
from prefilltui.tui.widgets.ttft_plot import TTFTPlot

_RANGE = Binding.Group("Range", compact=True)

Window = tuple[float, float]


def footer_cost(binding: Binding) -> int:
    """Columns a key takes in the compact footer: 'k Label' and one space."""
    key = binding.key_display or binding.key.split(",")[0]
    return len(key) + 1 + len(binding.description) + 1


class DashboardScreen(Screen[None]):
    """One target's live dashboard (see the module docstring).

    feed: the target; clock: perf_counter-compatible "now" for the gauges; replot_hz /
    gauge_hz: redraw rates; back: whether Esc returns to an overview (the fleet).
    """

    BINDINGS = [
        Binding("space", "toggle_pause", "Pause", key_display="␣"),
        Binding("r", "reset_fit", "Reset"),
        Binding("w", "toggle_window", "Window"),
        Binding("b", "burst", "Burst"),
        # one footer entry "+-Range" for the pair
        Binding("plus,equals_sign", "widen", "Wider", key_display="+", group=_RANGE),
        Binding("minus", "narrow", "Narrower", key_display="-", group=_RANGE),
        Binding("d", "toggle_details", "More"),
        Binding("e", "export", "Export"),
        Binding("s", "save_svg", "SVG"),
        Binding("c", "cache_check", "Cache"),
        Binding("l", "toggle_load", "Load"),
        Binding("t", "next_theme", "Theme"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "app.quit_app", "Quit"),
    ]
    #: actions the footer shows only when the width leaves room, the first first (the
    #: help lists every key)
    FOOTER_OPTIONAL: ClassVar[tuple[str, ...]] = ("next_theme", "save_svg", "toggle_load")

    #: the request window of the probe under the focused log's cursor
    highlight: var[Window | None] = var(None, init=False)
    #: the details panel open in place of the plot (``d``)
    details: var[bool] = var(False, init=False)
    #: the optional footer keys the width leaves room for
    footer_room: var[frozenset[str]] = var(frozenset(), init=False)

    def __init__(self, feed: TargetFeed, *, clock: Callable[[], float] = time.perf_counter,
                 replot_hz: float = REPLOT_HZ, gauge_hz: float = GAUGE_HZ, back: bool = False) -> None:
        super().__init__()
        self.feed = feed
        self.clock = clock
        self.replot_hz = replot_hz
        self.gauge_hz = gauge_hz
        self.back = back
        self.replayed = False  # the feed's earlier probes are in the widgets
        self.controls = SweepControls(feed, self.notify)
        self.jobs = Jobs(feed, notify=self.notify, run_worker=self.run_worker,
                         post=self.post_message,
                         save_screenshot=lambda name, path: self.app.save_screenshot(name, path))
        load = feed.config.load
        self.load = LoadControl(load, feed, self.notify) if load is not None else None
        self.redraw: Redraw | None = None  # once mounted
        #: notifications (the app's ``notify``); said before the mount, shown from it
        self.messages = MessageLine(id="messages")
        self._notes_shown = 0  # runner notes already said

    @property
    def last_fit(self) -> Any:
        """The fit snapshot last shown (what ``e`` exports)."""
        return self.redraw.last_fit if self.redraw is not None else None

    def notify(self, message: str, **kw: Any) -> None:  # type: ignore[override]
        """The app's notify (control characters escaped, markup off; shown on this
        screen's message line)."""
        self.app.notify(message, **kw)

    def say(self, text: str, *, severity: Severity = "information", title: str = "",
            timeout: float | None = None) -> None:
        """Show a notification on the message line (the app's ``notify`` calls this)."""
        self.messages.say(text, severity=severity, title=title, timeout=timeout)

    # ----------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")
        yield SloRow(id="slo")
        yield PathRow(id="path")
        with Horizontal(id="top"):
            yield TTFTPlot(id="plot")
            with Vertical(id="stats-box"):
                yield Headline(id="headline")
                with DetailsBox(id="details-box"):
                    yield StatsPanel(id="stats")
        yield GaugePanel(id="gauges")
        yield DecodeRow(id="decode")
        yield ProbeLog(id="log")
        yield self.messages
        yield Footer(compact=True)

    def on_mount(self) -> None:
        plot = self.query_one("#plot", TTFTPlot)
        plot.border_title = ("TTFT vs prompt tokens" if not self.back
                             else f"{clean(self.feed.config.label)} · TTFT vs prompt tokens")
        self.query_one("#stats-box").border_title = "fit"
        self.query_one("#details-box").border_title = "details"
        self.query_one("#log", ProbeLog).border_title = "probes"
        plot.set_range_hint(self.feed.sweep_range[1])
        self.redraw = Redraw(
            self.feed,
            Panels(status=self.query_one(StatusLine), plot=plot,
                   side=self.query_one("#stats-box"), headline=self.query_one(Headline),
                   stats=self.query_one(StatsPanel), gauges=self.query_one(GaugePanel),
                   decode=self.query_one(DecodeRow), log=self.query_one(ProbeLog),
                   slo=self.query_one(SloRow), path=self.query_one(PathRow)),
            load=self.load, notify=self.notify, clock=self.clock, replot_hz=self.replot_hz,
            gauge_hz=self.gauge_hz, label=self.feed.config.label if self.back else None,
            wake=lambda: self.call_later(self._tick))
        self._replay()
        self.redraw.status()
        # one timer: data at replot_hz, gauges at gauge_hz in the same pass (fewer frames)
        self.set_interval(self.redraw.interval_s, self._tick)
        self.redraw.gauges(self.highlight)
        self._tick()

    def _tick(self) -> None:
        if self.redraw is not None:
            self.redraw.tick(self.highlight)

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
        self.redraw.soon()

    def flush(self) -> None:
        """Redraw now whatever changed (tests call this instead of waiting a tick)."""
        if self.redraw is not None:
            self.redraw.flush(self.highlight)

    def on_resize(self, event: events.Resize) -> None:
        self._fit_footer(event.size.width)
        if self.redraw is not None:  # the fit box's title: the form that fits its width
            self.redraw.soon()

    def _fit_footer(self, width: int) -> None:
        """The optional keys that fit beside the others at ``width`` columns."""
        shown: dict[str, Binding] = {}
        for _key, binding in self._bindings:
            if binding.show and binding.action not in shown:
                shown[binding.action] = self._labelled(binding)
        groups: set[str] = set()
        used = 0
        for action, b in shown.items():
            if action in self.FOOTER_OPTIONAL:
                continue
            if b.group is not None:
                if b.group.description in groups:
                    continue
                groups.add(b.group.description)
                used += 2 + 1 + len(b.group.description) + 1  # "+- Range "
            else:
                used += footer_cost(b)
        room: set[str] = set()
        for action in self.FOOTER_OPTIONAL:
            b = shown.get(action)
            if b is not None and used + footer_cost(b) <= width + 1:  # the last one's space
                used += footer_cost(b)
                room.add(action)
        self.footer_room = frozenset(room)

    def watch_footer_room(self) -> None:
        self.refresh_bindings()

    def _labelled(self, binding: Binding) -> Binding:
        """``binding`` as the footer names it now: space says what it will do
        ("Resume" while paused)."""
        if binding.action == "toggle_pause" and self.feed.paused:
            return replace(binding, description="Resume")
        return binding

    @property
    def active_bindings(self):  # type: ignore[override]
        """Textual's, with the optional keys the width leaves no room for not shown
        (they still work), and each key's label as it is now (``_labelled``)."""
        bindings = super().active_bindings
        hide = set(self.FOOTER_OPTIONAL) - self.footer_room
        return {key: active._replace(binding=replace(self._labelled(active.binding),
                                                     show=False)
                                     if active.binding.action in hide
                                     else self._labelled(active.binding))
                for key, active in bindings.items()}

    # ------------------------------------------------- data from the app
    def probe_arrived(self, r: ProbeResult) -> None:
        """A probe of this screen's feed (already added to the feed)."""
        if self.redraw is not None:
            try:
                self.redraw.probe(r)
            except NoMatches:  # a probe that lands while the screen is closing
                pass

    def state_changed(self, old: str, burst_done: bool) -> None:
        """The feed's runner state changed (the feed holds the new one)."""
        feed = self.feed
        if self.controls.effective_range():
            self._range_changed(redraw=False)
        if feed.state == "failed" and old != "failed":
            self.notify(feed.state_detail or "probing failed", severity="error", timeout=10)
        if feed.state == "done" and old != "done" and feed.state_detail:
            self.notify(feed.state_detail, title="done", timeout=15)
        self.controls.burst_state(feed.state, burst_done)
        if burst_done:
            self.notify(f"burst: {feed.state_detail[6:]}", timeout=8)
        self._notify_runner_notes()
        if self.redraw is None:
            return
        if old != feed.state and {old, feed.state} <= {"probing", "idle"}:
            self.redraw.status_later()
        else:
            self.redraw.status()

    def _notify_runner_notes(self) -> None:
        """Each new note of the runner (lengths capped at the context, ...) once."""
        runner = self.feed.runner
        notes = list(runner.notes) if runner is not None else []
        for note in notes[self._notes_shown:]:
            self.notify(note, severity="warning", timeout=12)
        self._notes_shown = max(self._notes_shown, len(notes))

    def on_screen_resume(self) -> None:
        if self.redraw is not None:
            self.redraw.titles_again()  # a theme changed while away: set the legend again
            self.redraw.soon()

    def theme_changed(self) -> None:
        if self.redraw is not None:
            self.redraw.soon()
            self.redraw.titles_again()  # set the legend again under the new theme
            self.redraw.gauges(self.highlight)

    def _redraw_now(self) -> None:
        """After a key: the data on the next tick, the status at once."""
        if self.redraw is not None:
            self.redraw.soon()
            self.redraw.status()

    def _range_changed(self, *, redraw: bool = True) -> None:
        try:
            self.query_one("#plot", TTFTPlot).set_range_hint(self.feed.sweep_range[1])
        except NoMatches:  # a state change that lands while the screen is closing
            return
        if redraw:
            self._redraw_now()

    # ------------------------------------------------------------------- actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Esc (back to the overview) exists only in the fleet's drill-in."""
        return self.back if action == "back" else True

    def action_toggle_pause(self) -> None:
        if not self.controls.toggle_pause():
            return
        self._fit_footer(self.size.width)  # "Resume" is one column longer
        self.refresh_bindings()
        if self.redraw is not None:
            self.redraw.status()

    def action_reset_fit(self) -> None:
        self.controls.reset()
        self.query_one("#plot", TTFTPlot).clear_points()
        self._redraw_now()

    def action_toggle_window(self) -> None:
        self.controls.toggle_window()
        self._redraw_now()

    def action_burst(self) -> None:
        self.controls.burst()

    def action_widen(self) -> None:
        if self.controls.widen():
            self._range_changed()

    def action_narrow(self) -> None:
        if self.controls.narrow():
            self._range_changed()

    def action_toggle_details(self) -> None:
        self.details = not self.details

    def watch_details(self, on: bool) -> None:
        self.set_class(on, "-details")
        if self.redraw is not None:
            self.redraw.soon()

    def action_export(self) -> None:
        self.jobs.export(self.last_fit)

    def action_save_svg(self) -> None:
        self.jobs.save_svg()

    def action_cache_check(self) -> None:
        self.jobs.cache_check()

    def action_toggle_load(self) -> None:
        if self.load is None:
            self.notify(NO_LOAD, timeout=6)
            return
        self.load.toggle()
        if self.redraw is not None:
            self.redraw.status()

    def action_help(self) -> None:
        if not isinstance(self.app.screen, HelpScreen):
            self.app.push_screen(HelpScreen(dashboard_details(
                self.feed.config, self.messages.history)))

    def action_next_theme(self) -> None:
        self.app.action_next_theme()

    def action_back(self) -> None:
        if self.back:
            self.dismiss()

    # ------------------------------------------------------------------ messages
    def watch_highlight(self) -> None:
        if self.redraw is not None:
            self.redraw.gauges(self.highlight)

    def on_probe_log_highlighted(self, message: ProbeLog.Highlighted) -> None:
        r = message.result
        self.highlight = ((r.t_send, r.t_end) if r is not None and r.t_send is not None
                          and r.t_end is not None else None)

    def on_probe_log_selected(self, message: ProbeLog.Selected) -> None:
        r = message.result
        self.notify(probe_message(r), severity="information" if r.ok else "warning",
                    timeout=8)

    def on_gauge_panel_info(self, message: GaugePanel.Info) -> None:
        said = self.app.said  # once per app: a drill-in again says nothing new
        if message.text not in said:
            said.add(message.text)
            self.notify(message.text, title="telemetry", timeout=6)

    def on_details_box_hint(self, message: DetailsBox.Hint) -> None:
        """Details out of sight: the fit panel's bottom border says so."""
        self.query_one("#stats-box").border_subtitle = message.text

    def on_export_done(self, message: ExportDone) -> None:
        self.jobs.export_done(message)

    def on_cache_check_done(self, message: CacheCheckDone) -> None:
        self.jobs.cache_done(message)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.notify(f"{event.worker.name} failed: {event.worker.error}", severity="error")


class DrillInScreen(DashboardScreen):
    """The dashboard opened from the fleet overview: Esc returns to it; e and t are
    shown in the footer only where the width leaves room beside "esc Back"."""

    BINDINGS = [
        Binding("escape", "back", "Back", key_display="esc"),
    ]
    FOOTER_OPTIONAL = ("export", "next_theme", "save_svg", "toggle_load")

    def __init__(self, feed: TargetFeed, **kw: Any) -> None:
        super().__init__(feed, back=True, **kw)
