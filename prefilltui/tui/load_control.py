"""The dashboard's background-load part: the ``l`` key, the decode row on the gauges'
time axis, the status words and the stats lines.

``LoadControl(gen, feed, notify)`` is given the load (``measure.load.generator.LoadGenerator``,
which runs in its own thread: this only reads its snapshots, ``traces()`` and
``describe()``, and calls ``start``/``set_level``, which return at once), the target's
feed (its probes) and where to say things.  Without ``--load`` the dashboard has
none, and ``l`` says how to configure one (``NO_LOAD``): nothing is ever sent.
"""

from __future__ import annotations

from typing import Any, Callable

from prefilltui.model.sanitize import clean
from prefilltui.tui.feed import TargetFeed
from prefilltui.tui.viewmodel import VerdictNow, verdict_forms, verdict_now
from prefilltui.tui.load_view import (DecodeView, decode_view, live_verdict, load_status,
                                      stall_lines)

#: The decode row's time span (s): the gauges' history span.
SPAN_S = 60.0

#: What ``l`` says without a load configured.
NO_LOAD = ("no background load configured: start with --load decode:N or "
           "--load rate:R,tokens:L (nothing is sent unless asked)")

Notify = Callable[..., None]


class LoadControl:
    """The background load as the dashboard shows and switches it.

    gen: the ``LoadGenerator`` (its ``spec``, ``state``, ``level``, ``fault``,
    ``describe()``, ``traces(since)``, ``start()``, ``set_level(level)``); feed: the
    target's feed; notify(message, **kw): the app's notify.
    """

    def __init__(self, gen: Any, feed: TargetFeed, notify: Notify) -> None:
        self.gen = gen
        self.feed = feed
        self.notify = notify
        self._fault_said = False

    def toggle(self) -> None:
        """``l``: background load on / off (the configured level / level 0)."""
        gen = self.gen
        if gen.state in ("fault", "done", "stopped"):
            self.notify(clean(gen.describe()) + " (restart prefilltui to load again)",
                        severity="warning", timeout=6)
            return
        if gen.state == "off":
            gen.set_level(gen.spec.level)
            gen.start()
        elif gen.level > 0:
            gen.set_level(0)
        else:
            gen.set_level(gen.spec.level)
        self.notify(clean(gen.describe()), timeout=3)

    def status_text(self) -> str:
        """The status line's load words (markup)."""
        return load_status(self.gen.describe()) or ""

    def decode(self, now: float) -> DecodeView:
        """The decode row from the load's traces (cheap: a copy of the last minute);
        a fault is said once (the status line keeps saying it)."""
        gen = self.gen
        if gen.fault and not self._fault_said:
            self._fault_said = True
            self.notify(f"background load stopped: {gen.fault}", severity="error", timeout=12)
        last = next((r for r in reversed(self.feed.recent_results()) if r.ok and r.load_level),
                    None)
        return decode_view(gen.traces(since=now - SPAN_S), now, SPAN_S,
                           describe=gen.describe(), last=last)


def level_title(feed: TargetFeed) -> str:
    """" · load 2" after the stats title when the fit shown is a load level's."""
    lv = feed.current_level()
    return f" · load {lv:g}" if lv and lv in feed.levels else ""


def load_lines(feed: TargetFeed, assessment: Any = None) -> tuple[list[str], tuple[str, ...]]:
    """(the stats lines of the last loaded probe's stall, the verdict's line and its
    shorter forms, ``verdict_forms``) over the probes of the current level since the
    last reset, held against the idle fit (never a load level's own)."""
    recent = feed.recent_results()
    last = next((r for r in reversed(recent) if r.ok and not r.warmup), None)
    level = last.load_level if last is not None else None  # right now: this level
    snap = feed.live.fit.snapshot("all")
    # idle: the expectation the feed holds (baseline or first pinned fit) and the present
    # (the probe in flight, the waiting gauge, the users' window); a load level: its own
    held = feed.live.held if not level else None
    now = verdict_now(feed) if not level else VerdictNow()
    v = live_verdict([r for r in recent if r.load_level == level],
                     snap.fit if snap is not None else None, assessment=assessment,
                     held=held, now=now)
    return stall_lines(last), verdict_forms(v)
