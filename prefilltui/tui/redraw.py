"""The dashboard's throttled redraw: one timer applies what changed to the widgets.

``Redraw(feed, panels, ...)`` is given the target's feed, the widgets it writes to
(``Panels``, queried once when the screen mounts), the background load's control (or
None) and where to say things; it holds the redraw's own state (what is dirty, the
probes not yet in the log, when the gauges are next due, the titles as last set).
The screen calls ``probe`` for each new probe, ``soon`` after a key, and ``tick``
from its one timer.

Cost on screen (budget: <= 3 % of a core at 1 probe/s with 10 Hz sampling, <= 5 % at
the default pacing): a probe only touches buffers; one pass applies everything that
changed (log rows, summary, stats, plot, status) at most ``replot_hz`` times a second
(``REPLOT_HZ``: one data redraw every 2 s), probes arriving faster drawn together, and,
in the same pass, the gauges at ``gauge_hz`` (``GAUGE_HZ``, once a second), so a probe
costs one screen update, not one per widget.  The pass runs on the screen's timer, and
at once (``wake``) for a probe that comes when a data redraw is due (after a quiet
spell) and for keys and theme changes; the per-probe probing/idle state cycle waits for
the next tick.  The users' spans
(``--otlp-listen``) redraw without waiting for a probe: each tick compares the users'
``version`` with the one drawn (an int), so new spans are drawn on the next data
redraw (within 2 s), together with the probes, and nothing is redrawn while none came.  The stats are a view of
the feed's ``LiveSummary`` (O(sample) per redraw whatever the run length, never
``analyze`` over every probe).  Widgets redraw only when their text or drawn columns
change, and none of the steady updates needs a screen layout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from textual.widget import Widget

from prefilltui.model.sanitize import clean
from prefilltui.model.server_change import change_words
from prefilltui.model.types import ProbeResult
from prefilltui.tui.feed import TargetFeed
from prefilltui.tui.load_control import LoadControl, level_title, load_lines
from prefilltui.tui.viewmodel import build_stats, drift_warning, roofline_lines, status_line
from prefilltui.tui.widgets.decode_row import DecodeRow
from prefilltui.render.slo import detail_lines
from prefilltui.tui.widgets.path_row import PathRow
from prefilltui.tui.widgets.slo_row import SloRow
from prefilltui.tui.widgets.gauges import GaugePanel
from prefilltui.tui.widgets.probe_log import ProbeLog
from prefilltui.tui.widgets.stats import Headline, StatsPanel, stats_title
from prefilltui.tui.widgets.status_line import StatusLine
from prefilltui.tui.widgets.ttft_plot import TTFTPlot

Window = tuple[float, float]

#: Data redraws a second at most (summary, stats, plot, log, status): probes arriving
#: faster are drawn together.  One every 2 s, as monitors left running redraw (nvitop's
#: default interval 2 s, watch(1) 2 s): a data redraw costs ~25 ms of the UI thread at
#: 120x40 (the fits, plotext, and Textual's compositor over nearly the whole screen),
#: so at one probe a second this halves the app's main cost (the app 3.5 -> ~2.7 % of
#: a core, docs/performance.md).  A probe after 2 s of quiet -- a long prefill, a
#: paced GPU server -- is still drawn on the next tick; keys redraw at once.
REPLOT_HZ = 0.5
#: Columns of a box's width its border title cannot use: the corners, the "─" after the
#: left one and a blank each side (Textual truncates the title with "…" beyond).
TITLE_FRAME = 6
#: Gauge redraws a second at most in frames of their own (they also ride along every
#: data redraw; ``widgets.gauges.MIN_REDRAW_S``).  Once a second, as nvtop and
#: ``nvidia-smi dmon`` refresh by default: at 2 Hz the frames that only move the gauges
#: were ~0.2 % of a core at one probe a second (docs/performance.md); a probe's own
#: utilization and power peaks come from the 10-Hz samples in its window, whatever the
#: gauges' rate, and its window is tinted on the sparklines.
GAUGE_HZ = 1.0
#: The timer's slack, as a share of its period: a tick a few ms early (timer jitter)
#: still draws what is due on it instead of waiting a whole period more.
SLACK = 0.1


class _Judged(NamedTuple):
    """The roofline judgement the live "why is TTFT high?" verdict reads (MFU, level)."""

    mfu: float | None
    level: str | None


@dataclass(frozen=True)
class Panels:
    """The dashboard's widgets the redraw writes to.  ``side``: the fit's box (its
    border title names the fit)."""

    status: StatusLine
    plot: TTFTPlot
    side: Widget
    headline: Headline
    stats: StatsPanel
    gauges: GaugePanel
    decode: DecodeRow
    log: ProbeLog
    slo: SloRow | None = None  # the objective line (``--slo``)
    path: PathRow | None = None  # a disaggregated path's hops (``--prefill``/``--decode``)


class Redraw:
    """The throttled redraw of one dashboard (see the module docstring).

    feed: the target; panels: its widgets; load: the background load's control, or
    None; notify(message, **kw): the app's; clock: perf_counter-compatible "now" for
    the gauges; replot_hz / gauge_hz: redraw rates; label: the target's name at the
    head of the status line (the fleet's drill-in), or None.
    """

    def __init__(self, feed: TargetFeed, panels: Panels, *, load: LoadControl | None,
                 notify: Callable[..., None], clock: Callable[[], float],
                 replot_hz: float, gauge_hz: float, label: str | None = None,
                 wake: Callable[[], None] | None = None) -> None:
        self.feed = feed
        self.panels = panels
        self.load = load
        self.notify = notify
        self.clock = clock
        self.replot_hz = replot_hz
        self.gauge_hz = gauge_hz
        self.label = label
        #: asks for a ``tick`` now, not at the timer's next one (the screen's
        #: ``call_later``); None: the next timer tick
        self.wake = wake
        #: the fit snapshot last shown (what ``e`` exports)
        self.last_fit: Any = None
        self._dirty = True
        #: probes received since the last tick, shown in the log on the next tick
        self._pending_rows: list[ProbeResult] = []
        self._gauge_next = 0.0  # time.monotonic() of the next gauge update
        self._data_next = 0.0  # ... and of the next data redraw (replot_hz)
        self._border_texts: dict[str, str] = {}  # border titles as last set
        self._status_dirty = False  # a runner state change not yet drawn
        self._users_drawn = feed.users_version()  # the users' version last drawn

    @property
    def interval_s(self) -> float:
        """The timer's period: the faster of the two rates."""
        return 1.0 / max(self.replot_hz, self.gauge_hz)

    # ----------------------------------------------------------------- inputs
    def probe(self, r: ProbeResult) -> None:
        """A probe of this feed (already added to it): buffers only; the log row and
        every redraw wait for the next data redraw: at once (``wake``) when the last
        one is ``1 / replot_hz`` ago or more (a probe after a quiet spell, a paced GPU
        server), else on the tick that the rate allows."""
        self._dirty = True
        self._pending_rows.append(r)
        self.panels.plot.add_result(r)
        if self.wake is not None and time.monotonic() >= self._data_next:
            self.wake()

    def soon(self) -> None:
        """A change the user asked for (a key, the theme): drawn at once (``wake``; else
        on the next tick), not after the data redraw's ``replot_hz`` gap."""
        self._dirty = True
        self._data_next = 0.0
        if self.wake is not None:
            self.wake()

    def status_later(self) -> None:
        """A state change to show on the next tick (the per-probe probing/idle cycle:
        each probe brings two, each a screen update of its own when drawn at once; at
        the default pacing that was ~1 % of a core, measured)."""
        self._status_dirty = True

    def titles_again(self) -> None:
        """Set the border titles again (a theme changed: the legend's colours)."""
        self._border_texts.clear()

    def flush(self, highlight: Window | None) -> None:
        """Redraw now whatever changed (tests call this instead of waiting a tick)."""
        self.soon()
        self.tick(highlight)
        self.gauges(highlight)

    # ------------------------------------------------------------------ timer
    def tick(self, highlight: Window | None) -> None:
        """The one timer: new data (at most ``replot_hz`` times a second) and the gauges
        (``gauge_hz``, and whenever new data is shown so a probe's window is tinted in
        the same frame as its point).  All of it lands in one screen update."""
        now = time.monotonic()
        slack = SLACK * self.interval_s
        shown = False
        new_users = self.feed.users_version() != self._users_drawn
        self._dirty |= new_users
        changes = self.feed.new_server_changes()
        if changes:  # one line each in the log; the verdict reads them on this redraw
            self._dirty = new_users = True
            try:
                for c in changes:
                    self.panels.log.add_note(c.seen_s, change_words([c], self.feed.clock()) or c.kind)
            except Exception as exc:  # never a traceback from a timer
                self.notify(f"probe log update failed: {exc}", severity="error", timeout=6)
        if now >= self._data_next - slack:
            new_data = bool(self._pending_rows) or new_users
            shown = self._show_data()
            if shown and new_data:  # probes and spans faster than replot_hz drawn together
                self._data_next = now + 1.0 / self.replot_hz
        if self._status_dirty and not shown:  # _show_data updates the status itself
            self.status()
        # a little slack: timer jitter must not turn 1 Hz into every second tick
        if (self.feed.config.sampler is not None or self.load is not None) and (
                shown or now >= self._gauge_next - slack):
            self._gauge_next = now + 1.0 / self.gauge_hz
            self.gauges(highlight, with_data=shown)

    def _show_data(self) -> bool:
        """Summary, stats, log rows, replot, when something changed; returns whether it
        drew."""
        if not self._dirty:
            return False
        self._dirty = False
        self._users_drawn = self.feed.users_version()  # a span from now on: drawn next
        p = self.panels
        if self._pending_rows:
            rows, self._pending_rows = self._pending_rows, []
            try:
                p.log.add_results(rows)
            except Exception as exc:  # never a traceback from a timer
                self.notify(f"probe log update failed: {exc}", severity="error", timeout=6)
        try:
            feed = self.feed
            summary = feed.summary()
            self.last_fit = feed.live.fit.snapshot(feed.which, feed.config.analysis.fit)
            lin = summary.fit
            if lin is not None:
                p.plot.set_fit(lin.intercept_s * 1e3, lin.slope_s_per_token * 1e3)
            else:
                p.plot.set_fit(None, None)
            p.plot.set_reference_lines([(lab, (lambda n, f=fn: f(n) * 1e3))
                                        for lab, fn in roofline_lines(summary)])
            p.plot.set_users(feed.user_points())  # the server's spans (--otlp-listen)
            p.plot.replot()
            # compare with what was set (the getter returns parsed content, which never
            # equals the markup: setting it anyway repaints the whole plot each tick)
            self._title(p.plot, "legend", p.plot.legend_markup(), subtitle=True)
            drift = drift_warning(feed.config.baseline, lin)
            stats = build_stats(summary, which=feed.which, method=feed.config.analysis.fit,
                                last=feed.last_ok, device=feed.device_label,
                                last_cached_tokens=feed.live.last_cached_tokens,
                                warnings=(drift,) if drift else ())
            # the last probe's stall under load, and "why is TTFT high?" held against the
            # idle fit (never a load level's own)
            roof = summary.roofline
            lines, forms = load_lines(feed, _Judged(roof.mfu if roof else None,
                                                    summary.verdict.level))
            stats.why, stats.why_forms = forms[0], forms
            stats.notes[:0] = lines
            stats.notes += feed.users_lines()  # the users' window (--otlp-listen)
            slo = feed.slo()  # the objectives (--slo): n_max, the users above it
            stats.notes += detail_lines(slo)
            p.headline.show(stats)
            p.stats.show(stats)
            if p.slo is not None:
                p.slo.show(slo)
            if p.path is not None:
                p.path.show(feed.results)
            level = level_title(feed)
            room = p.side.outer_size.width - TITLE_FRAME - len(level) if p.side.is_mounted else 0
            self._title(p.side, "stats", stats_title(stats, room if room > 0 else None) + level)
            self.status()
        except Exception as exc:  # a bad fit must not end the app
            self.notify(f"display update failed: {exc}", severity="error", timeout=6)
        return True

    def _title(self, widget: Widget, key: str, text: str, *, subtitle: bool = False) -> None:
        if text != self._border_texts.get(key):
            self._border_texts[key] = text
            if subtitle:
                widget.border_subtitle = text
            else:
                widget.border_title = text

    def gauges(self, highlight: Window | None, *, with_data: bool = False) -> None:
        """Gauges from the sampler's latest snapshot, the decode row from the load's
        (cheap; no I/O here); ``with_data``: this frame draws new probes too."""
        try:
            now = self._show_gauges(highlight, with_data)
            if self.load is not None:
                self.panels.decode.show(self.load.decode(now), now,
                                        tuple(self.feed.windows), highlight)
        except Exception as exc:  # never a traceback from a timer
            self.notify(f"gauge update failed: {exc}", severity="warning", timeout=4)

    def _show_gauges(self, highlight: Window | None, with_data: bool = False) -> float:
        """The gauges from one snapshot of the sampler (read once per tick: a snapshot
        copies each device's minute of history); returns the snapshot's time (the
        decode row's "now"), else the clock's."""
        panel = self.panels.gauges
        sampler = self.feed.config.sampler
        if sampler is None:
            panel.show(None, self.clock())
            return self.clock()
        try:
            snap = sampler.snapshot()
        except Exception as exc:
            panel.show(None, self.clock())
            self.notify(f"telemetry failed: {exc}", severity="warning")
            return self.clock()
        before = self.feed.device_names
        self.feed.telemetry(snap)
        if self.feed.device_names != before:
            self._dirty = True
        now = snap.t or self.clock()
        panel.show(snap, now, tuple(self.feed.windows), highlight, with_data=with_data)
        return now

    def status(self) -> None:
        """The status line now."""
        self._status_dirty = False
        feed, runner = self.feed, self.feed.runner
        text = status_line(feed.state, feed.state_detail, feed.live.counts, feed.sweep_range,
                           feed.which, feed.paused,
                           tuple(runner.notices) if runner is not None else (),
                           progress=runner.progress if runner is not None else None,
                           cap_note=runner.cap_note if runner is not None else None,
                           load=self.load.status_text() if self.load is not None else None)
        if self.label is not None:
            text = f"[b]{_escape(self.label)}[/]  {text}"
        self.panels.status.show(text)


def _escape(text: str) -> str:
    return clean(text).replace("[", r"\[")
