"""What the dashboard's keys do to the target: pause, reset, the fit's scope, a burst,
the sweep range.

``SweepControls(feed, notify)`` changes the feed (``TargetFeed``) and its runner and
says what it did (each key a line on the message line); it touches no widget: each method returns what the screen must
redraw.  The screen's actions call it.
"""

from __future__ import annotations

from typing import Callable

from prefilltui.tui.feed import TargetFeed

Notify = Callable[..., None]


class SweepControls:
    """The keys' effects on one target (see the module docstring).  ``burst_pending``:
    ``b`` was pressed and its burst has not started yet (+ / - then say again what it
    will probe)."""

    def __init__(self, feed: TargetFeed, notify: Notify) -> None:
        self.feed = feed
        self.notify = notify
        self.burst_pending = False

    def toggle_pause(self) -> bool:
        """Pause or resume the runner; False when there is none (nothing changed)."""
        runner = self.feed.runner
        if runner is None:
            return False
        if self.feed.paused:
            runner.resume()
        else:
            runner.pause()
        self.feed.paused = not self.feed.paused
        return True

    def reset(self) -> None:
        """Forget what the probes so far told (``TargetFeed.reset_fit``)."""
        self.feed.reset_fit()
        self.notify("fit reset: counts, percentiles and verdict start again "
                    "(the run file keeps every probe)", timeout=3)

    def toggle_window(self) -> None:
        """The fit shown: all-time or the sliding window (``--window`` probes)."""
        self.feed.which = "window" if self.feed.which == "all" else "all"
        if self.feed.which == "window":
            self.notify(f"fit: window of the last {self.feed.config.analysis.window:,} probes",
                        timeout=3)
        else:
            self.notify("fit: all-time (every probe since the start or the last reset)", timeout=3)

    def burst(self) -> None:
        """Start a burst now (also while paused): back-to-back probes at the longest
        length for at least ``pacing.burst_min_s``; a probe in flight finishes first."""
        if self.feed.runner is not None:
            self.feed.runner.burst()
            self.burst_pending = True
            self._say_burst()

    def _say_burst(self) -> None:
        """Says what the burst will probe: the longest length as it is now (said again
        when + / - changes it before the burst starts)."""
        pacing = self.feed.config.pacing
        least = (f" for ≥ {pacing.burst_min_s:.1f} s"
                 if pacing is not None and pacing.burst_min_s > 0 else "")
        self.notify(f"burst: {self.feed.sweep_range[1]:,} tokens back to back{least}",
                    timeout=3)

    def burst_state(self, state: str, burst_done: bool) -> None:
        """A runner state change: a burst that started or ended is no longer pending
        (+ / - then no longer changes what it probes)."""
        if burst_done or state == "burst":
            self.burst_pending = False

    def effective_range(self) -> bool:
        """Take the range the runner really plans (``runner.lengths``: after server
        discovery and the context cap); True when it changed."""
        runner = self.feed.runner
        lengths = runner.lengths if runner is not None else None
        try:
            lo, hi = (min(lengths), max(lengths)) if lengths else self.feed.sweep_range
        except (TypeError, ValueError):
            return False
        if (lo, hi) == self.feed.sweep_range:
            return False
        self.feed.sweep_range = (int(lo), int(hi))
        return True

    def widen(self) -> bool:
        """The longest prompt ×2 (at most the context's cap); True when it changed."""
        lo, hi = self.feed.sweep_range
        return self._set_range(lo, hi * 2)

    def narrow(self) -> bool:
        """The longest prompt ÷2 (at least twice the shortest); True when it changed."""
        lo, hi = self.feed.sweep_range
        return self._set_range(lo, max(hi // 2, lo * 2))

    def _set_range(self, lo: int, hi: int) -> bool:
        feed = self.feed
        if feed.context_cap is None:
            ctx = feed.info.context_tokens if feed.info is not None else None
            if ctx:
                from prefilltui.measure.sweep import cap_for_context

                feed.context_cap = cap_for_context(ctx)
        capped = bool(feed.context_cap) and hi > feed.context_cap
        if capped:
            hi = feed.context_cap
        hi = max(hi, lo)
        cap = " (the context's cap)" if capped else ""
        if (lo, hi) == feed.sweep_range:
            self.notify(f"range stays {lo:,}–{hi:,} tokens{cap}", timeout=3)
            return False
        feed.sweep_range = (lo, hi)
        if feed.runner is not None:
            feed.runner.set_range(lo, hi)
        self.notify(f"range {lo:,}–{hi:,} tokens{cap}", timeout=3)
        if self.burst_pending:
            self._say_burst()
        return True
