"""The app's background-load part (a mixin of ``PrefillApp``): the ``l`` key, the
decode row on the gauges' time axis, the status words and the stats lines.

The load itself (``measure.load.LoadGenerator``) runs in its own thread; this only
reads its snapshots (``traces()``, ``describe()``) and calls ``start``/``set_level``,
which return at once.  Without ``--load`` nothing is ever sent: ``l`` says how to
configure one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from prefilltui.model.running_fit import RunningFit
from prefilltui.model.sanitize import clean
from prefilltui.tui.load_view import decode_view, live_verdict, load_status, stall_lines
from prefilltui.tui.viewmodel import verdict_line, verdict_now
from prefilltui.tui.widgets.decode_row import DecodeRow

#: The decode row's time span (s): the gauges' history span.
SPAN_S = 60.0


class LoadActions:
    """Mixin: needs ``self.load`` (a LoadGenerator or None), ``self.results``,
    ``self.windows``, ``self.highlight``, ``self.notify``, ``self.query``."""

    load: Any
    fit: Any
    #: each load level's own fit (level -> RunningFit); level 0 is ``self.fit``
    load_fits: dict[float, RunningFit]

    def add_to_level_fit(self, r) -> None:
        """A probe under load enters its level's own fit (as if idle there)."""
        if not r.load_level or not r.level_eligible or self.fit is None:
            return
        f = self.load_fits.get(r.load_level)
        if f is None:
            f = self.load_fits[r.load_level] = RunningFit(window=getattr(self.fit, "window", 50))
        f.add(replace(r, load_level=None))

    def current_level(self) -> float:
        last = next((r for r in reversed(self.results) if r.ok and not r.warmup), None)
        return float(last.load_level or 0.0) if last is not None else 0.0

    def shown_fit(self) -> Any:
        """The fit the plot and stats show: the current load level's own, else the
        idle fit."""
        lv = self.current_level()
        return self.load_fits.get(lv, self.fit) if lv else self.fit

    def level_title(self) -> str:
        """" · load 2" after the stats title when the fit shown is a load level's."""
        lv = self.current_level()
        return f" · load {lv:g}" if lv and lv in self.load_fits else ""

    def action_toggle_load(self) -> None:
        """``l``: background load on / off (the configured level / level 0)."""
        gen = self.load
        if gen is None:
            self.notify("no background load configured: start with --load decode:N or "
                        "--load rate:R,tokens:L (nothing is sent unless asked)", timeout=6)
            return
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
        self._update_status()

    def load_status_text(self) -> str | None:
        return load_status(self.load.describe()) if self.load is not None else None

    def _show_decode(self, now: float) -> None:
        """The decode row from the load's traces (cheap: a copy of the last minute)."""
        if not self.query("#decode"):
            return
        row = self.query_one("#decode", DecodeRow)
        gen = self.load
        if gen is None:
            row.show(None, now)
            return
        if gen.fault and not getattr(self, "_load_fault_said", False):
            self._load_fault_said = True  # once: the status line keeps saying it
            self.notify(f"background load stopped: {gen.fault}", severity="error", timeout=12)
        last = next((r for r in reversed(self.results) if r.ok and r.load_level), None)
        view = decode_view(gen.traces(since=now - SPAN_S), now, SPAN_S,
                           describe=gen.describe(), last=last)
        row.show(view, now, tuple(self.windows), self.highlight)

    def load_lines(self, assessment: Any = None) -> list[str]:
        """Stats lines: the last loaded probe's stall, then the verdict over the probes
        of the current level, held against the idle fit (never a load level's own)."""
        last = next((r for r in reversed(self.results) if r.ok and not r.warmup), None)
        lines = stall_lines(last)
        level = last.load_level if last is not None else None  # right now: this level
        recent = [r for r in list(self.results)[-40:] if r.load_level == level]
        snap = self.fit.snapshot("all") if self.fit is not None else None
        feed = getattr(self, "feed", None)
        held = feed.live.held if feed is not None and not level else None
        now = verdict_now(feed) if feed is not None and not level else {}
        v = live_verdict(recent, snap.fit if snap is not None else None, assessment=assessment,
                         held=held, **now)
        return lines + [verdict_line(v)]
