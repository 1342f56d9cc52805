"""The dashboard's status line: connection state, probe counts, range, fit scope."""

from __future__ import annotations

from textual.widgets import Static


class StatusLine(Static):
    """One line of markup (``viewmodel.status_line``); ``show(text)`` redraws only when
    the text changed (no layout: the line is one row high whatever it says)."""

    DEFAULT_CSS = "StatusLine { height: 1; }"

    def __init__(self, **kw) -> None:
        super().__init__("", **kw)
        #: the markup shown now
        self.text = ""

    def show(self, text: str) -> None:
        if text != self.text:  # unchanged text: no redraw, no terminal bytes
            self.text = text
            self.update(text, layout=False)
