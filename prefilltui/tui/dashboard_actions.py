"""The dashboard's keys and widget events (a mixin of ``DashboardScreen``, kept apart so
dashboard.py stays small): pause, reset, window, burst, the sweep range, help, the
gauges' and the probe log's messages.  Everything reads and writes the screen's feed.
"""

from __future__ import annotations

from prefilltui.model.units import MISSING
from prefilltui.tui.feed import TargetFeed
from prefilltui.tui.help import HelpScreen
from prefilltui.tui.widgets.gauges import GaugePanel
from prefilltui.tui.widgets.probe_log import ProbeLog, probe_message
from prefilltui.tui.widgets.ttft_plot import TTFTPlot


class DashboardActions:
    """Mixin: needs ``self.feed`` (a ``TargetFeed``), ``self.runner``, ``self.notify``,
    ``self.query_one``, ``self._redraw_soon``, ``self._update_status``, ``self._gauge_tick``,
    ``self.highlight`` and ``self._burst_pending``."""

    feed: TargetFeed

    def action_toggle_pause(self) -> None:
        if self.runner is None:
            return
        if self.feed.paused:
            self.runner.resume()
            self.feed.paused = False
        else:
            self.runner.pause()
            self.feed.paused = True
        self._update_status()

    def action_reset_fit(self) -> None:
        self.feed.reset_fit()
        self.query_one("#plot", TTFTPlot).clear_points()
        self._redraw_soon()
        self.notify("fit reset (the run file keeps every probe)", timeout=3)

    def action_toggle_window(self) -> None:
        self.feed.which = "window" if self.feed.which == "all" else "all"
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
        pacing = self.feed.config.pacing
        least = (f" for ≥ {pacing.burst_min_s:.1f} s"
                 if pacing is not None and pacing.burst_min_s > 0 else "")
        self.notify(f"burst: {self.feed.sweep_range[1]:,} tokens back to back{least}",
                    timeout=3)

    def _effective_range(self) -> None:
        """Take the range the runner really plans (``runner.lengths``: after server
        discovery and the context cap), read when a runner message arrives."""
        lengths = self.runner.lengths if self.runner is not None else None
        try:
            lo, hi = (min(lengths), max(lengths)) if lengths else self.feed.sweep_range
        except (TypeError, ValueError):
            return
        if (lo, hi) != self.feed.sweep_range:
            self.feed.sweep_range = (int(lo), int(hi))
            self.query_one("#plot", TTFTPlot).set_range_hint(hi)

    def _set_range(self, lo: int, hi: int) -> None:
        feed = self.feed
        if feed.context_cap is None:
            ctx = feed.info.context_tokens if feed.info is not None else None
            if ctx:
                from prefilltui.measure.sweep_config import cap_for_context

                feed.context_cap = cap_for_context(ctx)
        if feed.context_cap:
            hi = min(hi, feed.context_cap)
        hi = max(hi, lo)
        if (lo, hi) == feed.sweep_range:
            self.notify(f"range stays {lo}–{hi} tokens", timeout=3)
            return
        feed.sweep_range = (lo, hi)
        if self.runner is not None:
            self.runner.set_range(lo, hi)
        self.query_one("#plot", TTFTPlot).set_range_hint(hi)
        self._redraw_soon()
        self._update_status()
        if self._burst_pending:
            self._notify_burst()

    def action_widen(self) -> None:
        lo, hi = self.feed.sweep_range
        self._set_range(lo, hi * 2)

    def action_narrow(self) -> None:
        lo, hi = self.feed.sweep_range
        self._set_range(lo, max(hi // 2, lo * 2))

    def action_help(self) -> None:
        if not isinstance(self.app.screen, HelpScreen):
            self.app.push_screen(HelpScreen(self._telemetry_details()))

    def _telemetry_details(self) -> list[str]:
        """Pacing, then the full telemetry reasons (the gauges show short ones), for the
        help screen."""
        pace = []
        pacing = self.feed.config.pacing
        if pacing is not None:
            burst = (f"; burst ≥ {pacing.burst_min_s:.1f} s" if pacing.burst_min_s > 0 else "")
            pace = [f"pacing: {pacing.describe()}{burst}"]
        if self.feed.config.gpu_source:
            pace.append(f"GPU readings: {self.feed.config.gpu_source}")
        return pace + self._sampler_details()

    def _sampler_details(self) -> list[str]:
        sampler = self.feed.config.sampler
        if sampler is None:
            return []
        try:
            snap = sampler.snapshot()
        except Exception as exc:
            return [f"telemetry failed: {exc}"]
        lines = [f"telemetry: {snap.reason}"] if snap.reason else []
        for dev in snap.devices:
            for metric, why in dev.na.items():
                lines.append(f"{dev.label} {metric} {MISSING}: {why}")
        return lines

    def on_gauge_panel_info(self, message: GaugePanel.Info) -> None:
        said = self.app.said  # once per app: a drill-in again says nothing new
        if message.text not in said:
            said.add(message.text)
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
