"""A screen's place for notifications: one line of its own, never over data.

A notification (a cache check's result, the files an export wrote, a theme's name, a
telemetry note) is shown on this line for its timeout, newest first, fitted to the
width (``textfit.fit_line``: ``~`` for the home directory, long paths cut in the
middle, never wrapped), followed by how many others are still within theirs, "(+1
more: ?)"; the last ``HISTORY`` stay in ``history`` in full (the help, ``?``, lists
them).  Every screen of the app has one (the dashboard, the fleet overview, the help:
``Says``); Textual's toasts, drawn over the widgets, are never shown.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from rich.text import Text
from textual.widgets import Static

from prefilltui.tui.textfit import fit_line

Severity = Literal["information", "warning", "error"]

#: Notifications kept for the help screen.
HISTORY = 50
#: Seconds a notification without its own timeout stays on the line.
DEFAULT_TIMEOUT_S = 5.0
#: Columns the notification itself keeps before the count of the others is shortened
#: from "(+1 more: ?)" to "(+1)".
MIN_BODY = 24

_ICON = {"information": "·", "warning": "⚠", "error": "✖"}


@dataclass(frozen=True, slots=True)
class Notice:
    """One notification: its text (control characters already escaped), severity,
    title (may be empty) and the unix time it was made."""

    text: str
    severity: Severity = "information"
    title: str = ""
    at: float = 0.0

    @property
    def line(self) -> str:
        return f"{self.title}: {self.text}" if self.title else self.text


@runtime_checkable
class Says(Protocol):
    """A screen with a message line: the app's ``notify`` shows notifications there."""

    def say(self, text: str, *, severity: Severity = "information", title: str = "",
            timeout: float | None = None) -> object: ...


class MessageLine(Static):
    """One line: the newest notification still within its timeout, else nothing.
    ``say(...)`` adds one (also before the line is mounted: it is drawn, and its
    timeout counted, from the mount); ``history`` holds the last ``HISTORY``.
    ``collapse``: the line takes no row while it has nothing to show (the help, a text
    sized to its content; the dashboard keeps its row so nothing moves)."""

    DEFAULT_CSS = "MessageLine { height: 1; }"

    def __init__(self, *, collapse: bool = False, **kw) -> None:
        super().__init__("", **kw)
        self.history: deque[Notice] = deque(maxlen=HISTORY)
        self._live: list[tuple[Notice, float]] = []  # (notice, monotonic deadline)
        self._shown: tuple[Notice | None, int] = (None, -1)
        self.collapse = collapse
        if collapse:
            self.display = False

    def say(self, text: str, *, severity: Severity = "information", title: str = "",
            timeout: float | None = None) -> Notice:
        notice = Notice(text, severity, title, time.time())
        self.history.append(notice)
        wait = DEFAULT_TIMEOUT_S if timeout is None else max(0.5, float(timeout))
        self._live.append((notice, time.monotonic() + wait))
        self._draw()
        if self.is_mounted:
            self.set_timer(wait, self._draw)
        return notice

    @property
    def current(self) -> Notice | None:
        """The notification on the line now (None: none within its timeout)."""
        now = time.monotonic()
        self._live = [(n, end) for n, end in self._live if end > now]
        return self._live[-1][0] if self._live else None

    def on_mount(self) -> None:
        now = time.monotonic()
        for _notice, end in self._live:  # said before the mount: cleared on time
            self.set_timer(max(0.0, end - now), self._draw)
        self._draw()

    def _draw(self) -> None:
        notice = self.current
        if self.collapse and self.display != (notice is not None):
            self.display = notice is not None  # shown: drawn again once laid out
        width = self.content_size.width if self.is_mounted and self.display else 0
        if (notice, width) == self._shown:
            return
        self._shown = (notice, width)
        for sev in _ICON:
            self.set_class(notice is not None and notice.severity == sev, f"-{sev}")
        if notice is None or width <= 0:
            self.update("", layout=False)
            return
        icon = _ICON.get(notice.severity, "·")
        tail = more_tail(len(self._live) - 1, width - 2)
        body = fit_line(notice.line, max(1, width - 2 - len(tail)))
        self.update(Text(f"{icon} {body}{tail}", no_wrap=True, overflow="ellipsis"),
                    layout=False)

    def on_resize(self) -> None:
        self._draw()


def more_tail(more: int, room: int) -> str:
    """What the line says after the newest notification about the ``more`` others still
    within their timeout: " (+2 more: ?)" (``?`` opens the help, which lists them), or
    " (+2)" when the words would leave the notification fewer than ``MIN_BODY`` of the
    ``room`` columns; "" with none."""
    if more <= 0:
        return ""
    words = f" (+{more} more: ?)"
    return words if room - len(words) >= MIN_BODY else f" (+{more})"
