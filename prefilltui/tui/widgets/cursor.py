"""The row cursor shared by the line-API tables (``ProbeLog``, ``FleetTable``).

A ScrollView whose first line is a fixed header and whose other lines are rows, one
of them under the cursor: up/down/page up/page down/home/end move it (clamped to the
rows) and scroll it into view.  A subclass gives ``row_count`` and says what a move
means in ``_cursor_moved`` (post a message, remember the row); it binds enter itself.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.scroll_view import ScrollView


class RowCursor(ScrollView):
    """A header line over rows with a cursor (``cursor_row``, 0 = the first row)."""

    BINDINGS = [
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "cursor_home", "First", show=False),
        Binding("end", "cursor_end", "Last", show=False),
    ]

    cursor_row: int  # set by the subclass's __init__

    @property
    def row_count(self) -> int:
        raise NotImplementedError

    def _cursor_moved(self) -> None:
        """Called after ``move_cursor`` put the cursor on a row, before the redraw."""

    def move_cursor(self, row: int | None = None, **_kw) -> None:
        """Put the cursor on ``row`` (clamped) and scroll it into view (the header line
        stays on top).  No-op without rows or a row."""
        if row is None or not self.row_count:
            return
        self.cursor_row = max(0, min(row, self.row_count - 1))
        visible = max(self.scrollable_content_region.height - 1, 1)
        top = round(self.scroll_y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, immediate=True)
        elif self.cursor_row >= top + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False, immediate=True)
        self._cursor_moved()
        self.refresh()

    def _page(self) -> int:
        return max(self.scrollable_content_region.height - 2, 1)

    def action_cursor_up(self) -> None:
        self.move_cursor(self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(self.cursor_row + 1)

    def action_page_up(self) -> None:
        self.move_cursor(self.cursor_row - self._page())

    def action_page_down(self) -> None:
        self.move_cursor(self.cursor_row + self._page())

    def action_cursor_home(self) -> None:
        self.move_cursor(0)

    def action_cursor_end(self) -> None:
        self.move_cursor(self.row_count - 1)
