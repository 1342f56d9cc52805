"""The dashboard's throttled redraw (a mixin of ``DashboardScreen``, kept apart so
dashboard.py stays small): one timer applies what changed to the widgets.

Cost on screen (budget: <= 5 % of a core at 1 probe/s with 10 Hz sampling): a probe
only touches buffers; one timer applies everything that changed (log rows, summary,
stats, plot, status) at most ``replot_hz`` (1) times a second, probes arriving faster
drawn together, and, in the same pass, the gauges at ``gauge_hz``, so a probe costs
one screen update, not one per widget; the per-probe probing/idle state cycle waits
for the next tick, and keys and theme changes redraw at once.  The stats are a view of the
feed's ``LiveSummary`` (O(sample) per redraw whatever the run length, never
``analyze`` over every probe).  Widgets redraw only when their text or drawn columns
change, and none of the steady updates needs a screen layout.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

from textual.widgets import Static

from prefilltui.model.sanitize import clean
from prefilltui.model.types import ProbeResult
from prefilltui.tui.feed import TargetFeed
from prefilltui.tui.viewmodel import build_stats, drift_warning, roofline_lines, status_line
from prefilltui.tui.widgets.gauges import GaugePanel
from prefilltui.tui.widgets.probe_log import ProbeLog
from prefilltui.tui.widgets.stats import StatsPanel, stats_title
from prefilltui.tui.widgets.ttft_plot import TTFTPlot


class _Judged(NamedTuple):
    """The roofline judgement the live "why is TTFT high?" verdict reads (MFU, level)."""

    mfu: float | None
    level: str | None


class DashboardTicks:
    """Mixin: needs ``self.feed`` (a ``TargetFeed``), ``self.clock``, ``self.replot_hz``,
    ``self.gauge_hz``, ``self.back``, ``self.highlight``, ``self.sampler``, ``self.load``,
    ``self.runner``, ``self.notify``, ``self.query`` / ``self.query_one``, the buffers
    ``DashboardScreen.__init__`` sets (``_dirty``, ``_pending_rows``, ``_gauge_next``,
    ``_data_next``, ``_border_texts``, ``_status_text``, ``_status_dirty``, ``last_fit``)
    and ``LoadActions``' ``load_lines``, ``level_title``, ``load_status_text`` and
    ``_show_decode``."""

    feed: TargetFeed
    clock: Callable[[], float]
    replot_hz: float
    gauge_hz: float
    back: bool
    highlight: tuple[float, float] | None
    last_fit: Any
    _dirty: bool
    _pending_rows: list[ProbeResult]
    _gauge_next: float
    _data_next: float
    _border_texts: dict[str, str]
    _status_text: str
    _status_dirty: bool

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
        """Summary, stats, log rows, replot, when something changed; returns whether it
        drew."""
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
            feed = self.feed
            summary = feed.summary()
            self.last_fit = feed.live.fit.snapshot(feed.which, feed.config.analysis.fit)
            lin = summary.fit
            plot = self.query_one("#plot", TTFTPlot)
            if lin is not None:
                plot.set_fit(lin.intercept_s * 1e3, lin.slope_s_per_token * 1e3)
            else:
                plot.set_fit(None, None)
            plot.set_reference_lines([(lab, (lambda n, f=fn: f(n) * 1e3))
                                      for lab, fn in roofline_lines(summary)])
            plot.set_users(feed.user_points())  # the server's spans (--otlp-listen)
            plot.replot()
            # compare with what was set (the getter returns parsed content, which never
            # equals the markup: setting it anyway repaints the whole plot each tick)
            legend = plot.legend_markup()
            if legend != self._border_texts.get("legend"):
                self._border_texts["legend"] = legend
                plot.border_subtitle = legend
            drift = drift_warning(feed.config.baseline, lin)
            stats = build_stats(summary, which=feed.which, method=feed.config.analysis.fit,
                                last=feed.last_ok, device=feed.device_label,
                                last_cached_tokens=feed.live.last_cached_tokens,
                                warnings=(drift,) if drift else ())
            # the last probe's stall under load, and "why is TTFT high?" held against the
            # idle fit (never a load level's own): LoadActions.load_lines
            roof = summary.roofline
            stats.notes[:0] = self.load_lines(_Judged(roof.mfu if roof else None,
                                                      summary.verdict.level))
            stats.notes += feed.users_lines()  # the users' window (--otlp-listen)
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
                snap_t = self.sampler.snapshot().t if self.sampler is not None else None
                self._show_decode(snap_t or self.clock())
        except Exception as exc:  # never a traceback from a timer
            self.notify(f"gauge update failed: {exc}", severity="warning", timeout=4)

    def _show_gauges(self) -> None:
        panel = self.query_one("#gauges", GaugePanel)
        sampler = self.feed.config.sampler
        if sampler is None:
            panel.show(None, self.clock())
            return
        try:
            snap = sampler.snapshot()
        except Exception as exc:
            panel.show(None, self.clock())
            self.notify(f"telemetry failed: {exc}", severity="warning")
            return
        before = self.feed.device_names
        self.feed.telemetry()
        if self.feed.device_names != before:
            self._dirty = True
        now = snap.t or self.clock()
        panel.show(snap, now, tuple(self.feed.windows), self.highlight)

    def _update_status(self) -> None:
        self._status_dirty = False
        if not self.query("#status"):
            return
        feed, runner = self.feed, self.runner
        text = status_line(feed.state, feed.state_detail, feed.live.counts, feed.sweep_range,
                           feed.which, feed.paused,
                           tuple(runner.notices) if runner is not None else (),
                           progress=runner.progress if runner is not None else None,
                           cap_note=runner.cap_note if runner is not None else None,
                           load=self.load_status_text())
        if self.back:
            text = f"[b]{_escape(feed.config.label)}[/]  {text}"
        if text != self._status_text:  # unchanged text: no redraw, no terminal bytes
            self._status_text = text
            # one line high whatever it says (CSS height: 1): no screen layout needed
            self.query_one("#status", Static).update(text, layout=False)


def _escape(text: str) -> str:
    return clean(text).replace("[", r"\[")
