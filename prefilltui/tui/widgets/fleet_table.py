"""The fleet overview's table: one row per target, a fixed header, a cursor.

A line-API scroll view (as the probe log, and for the same reason: a DataTable
re-measures every cell through Rich on each change): ``set_rows`` takes the rows in
display order (``model.fleet.rows.FleetRow``, sorted by the screen); a line is drawn from
the row's cells (``render.fleet.cell``) only when Textual asks for it, so 100 targets
cost what the visible ones cost.  The columns follow the width (``render.fleet.layout``:
80 columns keep target, status, prefill ± interval, fixed cost, MFU, verdict, TTFT at
the reference length, probes / failures and age).

The cursor stays on its target when the order changes.  Enter or a click on a row
posts ``Selected(index)``; moving the cursor posts ``Highlighted(index)``; a click on a
column title posts ``SortBy(key)``.  ``index`` is the feed index (the app's).
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import Reactive
from textual.strip import Strip

from prefilltui.model.fleet import FleetRow
from prefilltui.render.fleet import Column, cell, fit, layout, ref_title
from prefilltui.tui.widgets.cursor import RowCursor

_STYLE_CLASSES = {"ok": "fleet-table--ok", "warn": "fleet-table--warn",
                  "bad": "fleet-table--bad", "dim": "fleet-table--dim",
                  "bold": "fleet-table--bold"}


class FleetTable(RowCursor, can_focus=True):
    """See the module docstring.  ``sort_key`` / ``reverse`` only mark the header."""

    BINDINGS = [
        Binding("enter", "select_cursor", "Open", key_display="↵"),
    ]
    COMPONENT_CLASSES = {"fleet-table--header", "fleet-table--cursor", "fleet-table--ok",
                         "fleet-table--warn", "fleet-table--bad", "fleet-table--dim",
                         "fleet-table--bold"}
    DEFAULT_CSS = """
    FleetTable {
        background: $surface;
        color: $foreground;
        & > .fleet-table--header { text-style: bold; background: $panel; color: $foreground; }
        & > .fleet-table--cursor { background: $block-cursor-blurred-background; }
        & > .fleet-table--ok { color: $success; }
        & > .fleet-table--warn { color: $warning; text-style: bold; }
        & > .fleet-table--bad { color: $error; text-style: bold; }
        & > .fleet-table--dim { color: $foreground 60%; }
        & > .fleet-table--bold { text-style: bold; }
        &:focus > .fleet-table--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
        }
    }
    """

    virtual_size = Reactive(Size(0, 0), layout=False)

    class Selected(Message):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    class Highlighted(Message):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    class SortBy(Message):
        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, *, ref_tokens: int = 1024, **kw) -> None:
        super().__init__(**kw)
        self.rows: list[FleetRow] = []
        self.ref_tokens = ref_tokens
        self.cursor_row = 0
        self.selected: int | None = None  # the feed index under the cursor
        self.moved = False  # the user moved the cursor: it stays on its target
        self.sort_key = "worst"
        self.reverse = False
        self._cols: list[tuple[Column, int]] = []
        self._width = 0
        self._drawn_order: tuple[str, bool] = ("worst", False)

    # -- data in
    def set_rows(self, rows: list[FleetRow]) -> None:
        """The rows in display order; the cursor stays on its target (on the first row
        until the user moves it).  Only the lines whose row changed are redrawn (a
        fleet's steady state changes a few rows a second, not the whole table)."""
        old, old_cursor = self.rows, self.cursor_row
        self.rows = rows
        if not self.moved:  # until the user moves it, the cursor is on the worst target
            self.selected = rows[0].index if rows else None
        if self.selected is not None:
            at = next((i for i, r in enumerate(rows) if r.index == self.selected), None)
            if at is not None:
                self.cursor_row = at
        self.cursor_row = max(0, min(self.cursor_row, len(rows) - 1))
        if rows and self.selected is None:
            self.selected = rows[self.cursor_row].index
        size = Size(self._width, len(rows) + 1)
        if size != self.virtual_size or len(old) != len(rows):
            self.virtual_size = size
            self.refresh()
            return
        top = round(self.scroll_y)
        height = self.scrollable_content_region.height
        width = self.scrollable_content_region.width
        order = (self.sort_key, self.reverse)
        if order != self._drawn_order:  # the header's sort mark
            self._drawn_order = order
            self.refresh(Region(0, 0, width, 1))
        for i in range(top, min(len(rows), top + max(0, height - 1))):
            if rows[i] != old[i] or i in (self.cursor_row, old_cursor):
                self.refresh(Region(0, i - top + 1, width, 1))

    def current(self) -> FleetRow | None:
        return self.rows[self.cursor_row] if 0 <= self.cursor_row < len(self.rows) else None

    # -- drawing
    def on_resize(self) -> None:
        self._relayout()

    def on_mount(self) -> None:
        self._relayout()

    def _relayout(self) -> None:
        width = max(self.scrollable_content_region.width, 20)
        self._cols = layout(width)
        self._width = width
        self.virtual_size = Size(width, len(self.rows) + 1)
        self.refresh()

    def _style(self, name: str) -> Style:
        """A cell's colour and weight only: the row's background (the cursor) stays."""
        cls = _STYLE_CLASSES.get(name)
        if not cls:
            return Style()
        st = self.get_component_rich_style(cls)
        return Style(color=st.color, bold=st.bold, dim=st.dim, italic=st.italic)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = self.rich_style
        if not self._cols:
            return Strip.blank(width, base)
        if y == 0:
            style = base + self.get_component_rich_style("fleet-table--header")
            titles = []
            for c, w in self._cols:
                title = ref_title(self.ref_tokens) if c.key == "ttft" else c.title
                if c.sort == self.sort_key and self.sort_key != "worst":
                    title = ("▲" if self.reverse else "▼") + title
                titles.append(fit(title, w, c.align))
            return Strip([Segment(" ".join(titles).ljust(width), style)]).crop(0, width)
        i = round(self.scroll_y) + y - 1
        if i >= len(self.rows):
            return Strip.blank(width, base)
        row = self.rows[i]
        line_style = base
        if i == self.cursor_row:
            line_style = base + self.get_component_rich_style("fleet-table--cursor")
        segs: list[Segment] = []
        used = 0
        for k, (c, w) in enumerate(self._cols):
            text, style = cell(row, c.key, w)
            if k:
                segs.append(Segment(" ", line_style))
                used += 1
            segs.append(Segment(fit(text, w, c.align), line_style + self._style(style)))
            used += w
        if used < width:
            segs.append(Segment(" " * (width - used), line_style))
        return Strip(segs).crop(0, width)

    # -- cursor
    @property
    def row_count(self) -> int:
        return len(self.rows)

    def _cursor_moved(self) -> None:
        self.selected = self.rows[self.cursor_row].index
        self.moved = True
        self.post_message(self.Highlighted(self.selected))

    def action_select_cursor(self) -> None:
        row = self.current()
        if row is not None:
            self.post_message(self.Selected(row.index))

    def on_click(self, event: Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        event.stop()
        if offset.y < 1:  # the header: sort by the column under the pointer
            x = 0
            for c, w in self._cols:
                if x <= offset.x < x + w and c.sort is not None:
                    self.post_message(self.SortBy(c.sort))
                    return
                x += w + 1
            return
        row = round(self.scroll_y) + offset.y - 1
        if 0 <= row < len(self.rows):
            if row == self.cursor_row:
                self.action_select_cursor()
            else:
                self.move_cursor(row)
