"""The Textual app: one target's dashboard, or a fleet overview with a drill-in.

``build_app`` (one target) and ``build_fleet_app`` (several) are the factories used by
the CLI (commands/watch.py, commands/fleet.py) and the tests.  The app owns the
targets' ``TargetFeed`` objects and their runners; the screens only show them:

- one target: the ``DashboardScreen`` is the default screen (today's dashboard);
- several: the ``FleetScreen`` overview is; Enter opens a target's dashboard over it,
  Esc returns.

Data flows one way: each runner's thread -> ``ProbeDone`` / ``RunnerStateChanged``
(tagged with the feed's index) -> the app: the feed first (always), then the
dashboard on screen for that feed, and the overview marks the row dirty.  Threads
never touch widgets.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from textual.app import App
from textual.binding import Binding
from textual.screen import Screen

from prefilltui.exit_codes import ExitCode
from prefilltui.model import defaults
from prefilltui.model.fit import LinearFit
from prefilltui.model.fleet import FleetLoad
from prefilltui.model.metrics import MetricsSample
from prefilltui.model.pacing import Pacing
from prefilltui.model.fit import RunningFit
from prefilltui.model.sanitize import clean
from prefilltui.model.spec import AnalysisOptions
from prefilltui.model.types import FitMethod
from prefilltui.tui import hangup, heap
from prefilltui.tui.dashboard import DashboardScreen, DrillInScreen
from prefilltui.tui.feed import (Exporter, FeedConfig, RunnerFactory, TargetFeed,
                                 TelemetrySource)
from prefilltui.tui.messages import ProbeDone, RunnerStateChanged
from prefilltui.tui.redraw import GAUGE_HZ, REPLOT_HZ
from prefilltui.tui.widgets.message_line import Says
from prefilltui.tui.themes import (DEFAULT_THEME, VARIABLE_DEFAULTS, ThemeSet, load_themes,
                                   register_usable_themes)

__all__ = ["PrefillApp", "build_app", "build_fleet_app", "FeedConfig", "TargetFeed"]


class PrefillApp(App[int]):
    """Live prefill monitor over one or more ``TargetFeed``.  Build it with
    ``build_app`` / ``build_fleet_app``.

    feeds: the targets; themes / theme: the theme set and the one to start with;
    clock: perf_counter-compatible "now" for the gauges; replot_hz / gauge_hz: redraw
    rates; problems: said once at start; on_ready(app): called once the runners are
    started; load: the fleet's own probing load (``model.fleet.rows.FleetLoad``, the overview
    states it);
    ref_tokens: the prompt length of the overview's TTFT column.
    """

    CSS_PATH = "app.tcss"
    TITLE = "prefilltui"
    ENABLE_COMMAND_PALETTE = False
    #: wider terminals (>= 120 columns) get a taller log and a wider stats panel
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    #: from 28 rows the fit's details follow its headline in the side panel; below,
    #: they open in place of the plot (``d``)
    VERTICAL_BREAKPOINTS = [(0, "-short"), (28, "-tall")]

    BINDINGS = [
        # Ctrl-C quits too (Textual would only hint at ctrl+q): the run file is
        # already on disk and the demo's server is stopped on the way out.
        Binding("ctrl+c", "quit_app", "Quit", show=False, priority=True),
    ]

    def __init__(self, feeds: list[TargetFeed], *, themes: ThemeSet | None = None,
                 theme: str | None = None, clock: Callable[[], float] = time.perf_counter,
                 replot_hz: float = REPLOT_HZ, gauge_hz: float = GAUGE_HZ, problems: list[str] = (),
                 on_ready: Callable[["PrefillApp"], None] | None = None,
                 load: FleetLoad | None = None, ref_tokens: int = 1024,
                 sub_title: str = "") -> None:
        if not feeds:
            raise ValueError("the app needs at least one target")
        self.feeds = list(feeds)
        self.theme_set = themes or load_themes()
        self._initial_theme = theme or DEFAULT_THEME
        self.clock = clock
        self.replot_hz = replot_hz
        self.gauge_hz = gauge_hz
        self.problems = list(problems)
        self.on_ready = on_ready
        self.load = load
        self.ref_tokens = ref_tokens
        #: whether the app ended because its terminal hung up (``tui.hangup``)
        self.hung_up = False
        self.said: set[str] = set()  # info notifications already shown (once per app)
        super().__init__()
        self.sub_title = clean(sub_title)

    # ------------------------------------------------------------- one target
    @property
    def feed(self) -> TargetFeed:
        """The first (for ``prefilltui URL``: the only) target."""
        return self.feeds[0]

    @property
    def fleet(self) -> bool:
        return len(self.feeds) > 1

    def dashboard(self) -> DashboardScreen | None:
        """The dashboard on screen (the default one for a single target)."""
        for screen in reversed(self.screen_stack):
            if isinstance(screen, DashboardScreen):
                return screen
        return None

    # what the single-target tests and the CLI read (the first feed's)
    @property
    def live(self):
        return self.feed.live

    @property
    def fit(self) -> RunningFit:
        return self.feed.live.fit

    @property
    def runner(self):
        return self.feed.runner

    @property
    def results(self):
        return self.feed.results

    @property
    def state(self) -> str:
        return self.feed.state

    @property
    def state_detail(self) -> str:
        return self.feed.state_detail

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
    def cache_checker(self):
        return self.feed.config.cache_checker

    @property
    def highlight(self):
        d = self.dashboard()
        return d.highlight if d is not None else None

    @property
    def last_fit(self):
        d = self.dashboard()
        return d.last_fit if d is not None else None

    def flush(self) -> None:
        """Redraw now whatever changed (tests call this instead of waiting a tick)."""
        screen = self.screen
        for candidate in (screen, self.dashboard()):
            flush = getattr(candidate, "flush", None)
            if flush is not None:
                flush()
                return

    # ----------------------------------------------------------------- screens
    def get_default_screen(self) -> Screen:
        if self.fleet:
            from prefilltui.tui.fleet_screen import FleetScreen

            return FleetScreen(self.feeds, clock=self.clock, load=self.load,
                               ref_tokens=self.ref_tokens)
        return DashboardScreen(self.feed, clock=self.clock, replot_hz=self.replot_hz,
                               gauge_hz=self.gauge_hz)

    def open_dashboard(self, index: int) -> None:
        """The drill-in: the dashboard of feed ``index`` over the overview."""
        self.push_screen(DrillInScreen(self.feeds[index], clock=self.clock,
                                       replot_hz=self.replot_hz, gauge_hz=self.gauge_hz))

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return {**super().get_theme_variable_defaults(), **VARIABLE_DEFAULTS}

    def on_mount(self) -> None:
        # only themes that parse with the whole stylesheet; a bad one is notified below
        self.theme = register_usable_themes(self, self.theme_set, self._initial_theme)
        self.theme_changed_signal.subscribe(self, lambda _t: self._on_theme_changed())
        problems = list(self.theme_set.problems) + self.problems
        for feed in self.feeds:
            problems += [p if not self.fleet else f"{feed.config.label}: {p}"
                         for p in feed.config.problems]
        for problem in problems:
            self.notify(problem, severity="warning", timeout=8)
        for feed in self.feeds:
            delay = feed.config.start_delay_s
            if delay > 0:  # the fleet's stagger: the monitor's own load stays spread
                self.set_timer(delay, lambda f=feed: self._start(f))
            else:
                self._start(feed)
        if self.on_ready is not None:
            self.on_ready(self)
        self.call_after_refresh(self._show_sub_title)
        if not self.is_headless:  # a real terminal (tests run headless)
            hangup.HangupWatch(hangup.terminals(), self._hung_up).start()
            self.set_timer(heap.FREEZE_AFTER_S, heap.freeze_startup_heap)

    def _hung_up(self) -> None:
        """The terminal hung up (``tui.hangup``; called from its thread): end as SIGHUP
        would, with nothing printed after."""
        self.hung_up = True
        loop = self._loop
        if loop is not None:  # else the watch ends the process after its grace
            loop.call_soon_threadsafe(
                lambda: self.exit(ExitCode.HANGUP, return_code=ExitCode.HANGUP))

    def watch_sub_title(self, _old: str, _new: str) -> None:
        self._show_sub_title()

    def _show_sub_title(self) -> None:
        """The app's subtitle (Textual's ``sub_title``; the demo's server URL) on screen:
        the bottom border of each dashboard's probe log, so it takes no row (set after
        the first refresh and on every change; the demo has a single dashboard)."""
        from prefilltui.tui.widgets.probe_log import ProbeLog

        for screen in self.screen_stack:
            if isinstance(screen, DashboardScreen):
                for log in screen.query(ProbeLog):
                    log.border_subtitle = self.sub_title

    def _start(self, feed: TargetFeed) -> None:
        i = feed.index
        feed.set_state("connecting", "")
        feed.start(lambda r, i=i: self.post_message(ProbeDone(r, i)),
                   lambda state, detail="", i=i: self.post_message(
                       RunnerStateChanged(state, clean(detail), i)))
        if feed.start_error:
            self.notify(feed.start_error if not self.fleet
                        else f"{feed.config.label}: {feed.start_error}",
                        severity="error", timeout=15)

    def on_unmount(self) -> None:
        for feed in self.feeds:
            feed.stop(timeout=2.0)

    def notify(self, message: str, **kw: Any) -> None:  # type: ignore[override]
        """Textual's notify, with control characters escaped (``model.sanitize``) and
        markup off unless asked for: notifications quote servers' words.  Shown on a
        message line, never as a toast over the widgets: the screen on top's (the help,
        the fleet overview: ``Says``) and the dashboard's, which keeps the history the
        help lists (its line shows it again once the help is closed)."""
        kw.setdefault("markup", False)
        text = clean(message, multiline=True)
        super().notify(text, **kw)  # Textual's record of it (``_notifications``)
        if kw["markup"]:
            from rich.text import Text

            text = Text.from_markup(text).plain
        said = dict(severity=kw.get("severity", "information"), title=kw.get("title") or "",
                    timeout=kw.get("timeout"))
        dashboard = self.dashboard()
        if dashboard is not None:
            dashboard.say(text, **said)
        top = self.screen_stack[-1] if self.screen_stack else None
        if top is not dashboard and isinstance(top, Says):
            top.say(text, **said)

    def _refresh_notifications(self) -> None:
        """Never Textual's toasts: every screen of the app shows notifications on its
        message line (``notify``), and a toast would cover its text (the help's, the
        probe log).  Textual sets the toast rack's display itself, so CSS cannot hide
        it; the notifications expire from Textual's record unseen."""

    # ------------------------------------------------------- runner messages
    def on_probe_done(self, message: ProbeDone) -> None:
        feed = self.feeds[message.feed]
        feed.add(message.result)
        for screen in self.screen_stack:
            if isinstance(screen, DashboardScreen):
                if screen.feed is feed and screen.replayed:
                    screen.probe_arrived(message.result)
            elif hasattr(screen, "feed_changed"):
                screen.feed_changed(feed)

    def on_runner_state_changed(self, message: RunnerStateChanged) -> None:
        feed = self.feeds[message.feed]
        old = feed.state
        feed.set_state(message.state, message.detail)
        for screen in self.screen_stack:
            if isinstance(screen, DashboardScreen):
                if screen.feed is feed:
                    screen.state_changed(old, message.burst_done)
            elif hasattr(screen, "feed_changed"):
                screen.feed_changed(feed)

    def _on_theme_changed(self) -> None:
        for screen in self.screen_stack:
            changed = getattr(screen, "theme_changed", None)
            if changed is not None:
                changed()

    # ------------------------------------------------------------------- actions
    def action_next_theme(self) -> None:
        names = self.theme_set.names()
        if not names:
            return
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        self.notify(f"theme: {self.theme.removeprefix('prefilltui-')}", timeout=2)

    def action_quit_app(self) -> None:
        code = self.exit_code()
        self.exit(code, return_code=code)

    def exit_code(self) -> ExitCode:
        """OK normally; UNREACHABLE when no target was ever reached (or every probe of
        every target failed)."""
        if any(f.session_ok for f in self.feeds):  # whole session: not reset by r
            return ExitCode.OK
        if any(f.state == "failed" or f.session_failed for f in self.feeds):
            return ExitCode.UNREACHABLE
        return ExitCode.OK


#: Probes the one-target app keeps in memory when a run file has them all: the export
#: (``e``) reads the run file back; the screen needs the last 200 (the log), the
#: verdict the last 40.  A probe kept is ~0.6-1 KiB (tracemalloc): keeping 100,000 was
#: most of the app's RSS growth (tests/bench, docs/performance.md).
KEEP_WITH_RUN_FILE = 1000
#: ... and without a run file, where the export has only these.
KEEP_WITHOUT_RUN_FILE = 100_000


def build_app(runner_factory: RunnerFactory, sampler: TelemetrySource | None = None, *,
              analysis: AnalysisOptions | None = None, baseline: LinearFit | None = None,
              fit_method: FitMethod | None = None, window: int | None = None,
              theme: str | None = None, themes: ThemeSet | None = None,
              sweep_range: tuple[int, int] = (defaults.MIN_TOKENS, defaults.MAX_TOKENS),
              context_cap: int | None = None, run_path: Path | None = None,
              exporter: Exporter | None = None, cache_checker: Callable[[], str] | None = None,
              probe_timeout_s: float = defaults.TIMEOUT_S, pacing: Pacing | None = None,
              problems: list[str] = (), max_results: int | None = None, label: str = "",
              gpu_source: str | None = None,
              metrics: Callable[[], MetricsSample | None] | None = None,
              baseline_tok_s: float | None = None, load: Any = None, users: Any = None,
              server_changes: Callable[[], tuple] | None = None, **kw: Any) -> PrefillApp:
    """The one-target app (today's dashboard): the factory for the CLI and the tests.

    runner_factory(on_result, on_state) -> runner with start/stop/pause/resume/burst/
    set_range/state/server_info (``measure.sweep.runner.SweepRunner`` or a fake).  sampler: an
    object with ``snapshot() -> TelemetrySnapshot`` (already started) or None.
    analysis: the fit shown, the window and the roofline inputs (``fit_method`` /
    ``window`` override its fields); baseline: the ``--baseline`` run's fit; load: the
    background load (``measure.load.generator.LoadGenerator``, started by the caller);
    server_changes: the server's recent restarts and changes
    (``measure.server_watch.ServerWatch.recent``).  Other
    keyword arguments go to ``PrefillApp`` (clock, replot_hz, gauge_hz, on_ready,
    sub_title: a line shown on screen, e.g. the demo server's URL, ...).
    max_results: probes kept in memory (default: ``KEEP_WITH_RUN_FILE`` with a run
    file, which the export reads back, else ``KEEP_WITHOUT_RUN_FILE``).
    """
    from dataclasses import replace

    if max_results is None:
        max_results = KEEP_WITH_RUN_FILE if run_path is not None else KEEP_WITHOUT_RUN_FILE

    analysis = analysis or AnalysisOptions()
    if fit_method is not None:
        analysis = replace(analysis, fit=fit_method)
    if window is not None:
        analysis = replace(analysis, window=window)
    config = FeedConfig(label=label, runner_factory=runner_factory, sampler=sampler,
                        gpu_source=gpu_source, analysis=analysis, baseline=baseline,
                        sweep_range=tuple(sweep_range), context_cap=context_cap,
                        run_path=run_path, exporter=exporter, cache_checker=cache_checker,
                        probe_timeout_s=probe_timeout_s, pacing=pacing,
                        problems=tuple(problems), max_results=max_results, url=label,
                        metrics=metrics, baseline_tok_s=baseline_tok_s,
                        baseline_source="--baseline run" if baseline_tok_s else None,
                        load=load, users=users, server_changes=server_changes)
    return PrefillApp([TargetFeed(config, 0)], themes=themes, theme=theme, **kw)


def build_fleet_app(configs: list[FeedConfig], *, theme: str | None = None,
                    themes: ThemeSet | None = None, wall_clock: Callable[[], float] = time.time,
                    **kw: Any) -> PrefillApp:
    """The fleet app: one feed per config, the overview first.  ``wall_clock``: unix
    "now" for the probe ages (tests fix it).  Other keyword arguments go to
    ``PrefillApp``."""
    feeds = [TargetFeed(c, i, clock=wall_clock) for i, c in enumerate(configs)]
    return PrefillApp(feeds, themes=themes, theme=theme, **kw)
