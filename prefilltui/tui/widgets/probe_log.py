"""Probe log: the last probes (time, tokens, TTFT, utilization peak/mean over the
request window, energy, status), newest at the bottom.

Between the probes, a note row says what happened to the server (``add_note``: a
restart, another server behind the URL, ``model.server_change``); it has no probe.

Selecting a row (enter / click) posts ``ProbeLog.Selected`` with the probe so the app
can show its full message; once the cursor is moved (keys, click) and while the log
keeps focus, the row under the cursor is posted as ``ProbeLog.Highlighted`` (None
when the log loses focus) so the app can highlight that probe's window on the gauge
history.  Bounded: the oldest rows are
removed beyond ``max_rows``.

A small line-API scroll view rather than a DataTable (measured with tests/tui/measure_cpu.py: the DataTable
re-measured and re-rendered every visible cell through Rich on each new row, ~2 % of a
core at one probe a second): each row is formatted once, on arrival, into fixed-width
columns; drawing a line is a lookup.  A new row changes only the scrollable (virtual)
size, never the box (its height is fixed by CSS), so the screen is not laid out again:
the scrollbars are updated here and the view follows the newest row in the same frame.
"""

from __future__ import annotations

import time

from rich.segment import Segment
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Size
from textual.message import Message
from textual.reactive import Reactive
from textual.strip import Strip

from prefilltui.model.sanitize import clean
from prefilltui.model.types import ProbeResult
from prefilltui.model.units import MISSING, ms
from prefilltui.tui.widgets.cursor import RowCursor

#: column headers and widths (cells); the status column takes the rest
COLUMNS = (("time", 8), ("tokens", 6), ("TTFT ms", 8), ("util pk/avg", 11), ("J", 6),
           ("status", 0))


def _row_text(cells: tuple[str, ...]) -> str:
    """One line: each cell padded by one space either side, like a DataTable."""
    out = []
    for (_, width), cell in zip(COLUMNS, cells):
        out.append(" " + (cell.ljust(width) if width else cell) + " ")
    return "".join(out).rstrip()


HEADER = _row_text(tuple(name for name, _ in COLUMNS))


def probe_status(r: ProbeResult) -> str:
    """A short status word: ok / warm-up / cache N / burst / error kind."""
    if not r.ok:
        return r.error_kind or "failed"
    if r.warmup:
        return "warm-up"
    if r.cache_hit:
        return f"cached {r.cached_tokens}"
    return "burst" if r.burst else "ok"


def ttft_cell(r: ProbeResult) -> str:
    """The TTFT column: ms grouped (``units.ms``), one decimal up to 100 s and none past
    it, so it keeps its 8 cells ("1,245.3", "120,000"); MISSING for a failed probe."""
    if not r.ok or r.ttft_s is None:
        return f"{MISSING:>8}"
    return f"{ms(r.ttft_s, 1 if r.ttft_s < 100 else 0, unit=False):>8}"


def row_cells(r: ProbeResult) -> tuple[str, ...]:
    """A probe's cells, in ``COLUMNS`` order: time, tokens, TTFT, utilization, energy,
    status."""
    when = time.strftime("%H:%M:%S", time.localtime(r.started_at)) if r.started_at else MISSING
    tokens = r.tokens if r.tokens is not None else r.requested_tokens
    energy = f"{r.energy_j:6.1f}" if r.energy_j is not None else f"{MISSING:>6}"
    return (when, f"{tokens:>6}", ttft_cell(r), util_cell(r), energy, probe_status(r))


def util_cell(r: ProbeResult) -> str:
    """Utilization peak/mean over the probe's request window, e.g. " 98/ 61" (percent;
    MISSING when nothing was sampled)."""
    if r.util_peak_pct is None:
        return f"{MISSING:>7}"
    mean = f"{r.util_mean_pct:3.0f}" if r.util_mean_pct is not None else MISSING
    return f"{r.util_peak_pct:3.0f}/{mean}"


def probe_message(r: ProbeResult) -> str:
    """The full description shown when a row is selected."""
    when = time.strftime("%H:%M:%S", time.localtime(r.started_at)) if r.started_at else "?"
    head = f"probe #{r.seq} at {when}: {r.requested_tokens} tokens requested"
    if r.prompt_tokens is not None:
        head += f", {r.prompt_tokens} " + ("estimated (the server gives no count)"
                                           if r.prompt_tokens_source == "estimate" else "counted")
    if r.ok:
        head += f"; TTFT {ms(r.ttft_s)}"
        if r.server_prefill_s is not None:
            head += f", server prefill {ms(r.server_prefill_s)}"
        if r.util_peak_pct is not None:
            head += f", util peak {r.util_peak_pct:.0f} %"
            if r.util_mean_pct is not None:
                head += f" (mean {r.util_mean_pct:.0f} %)"
        if r.power_peak_w is not None:
            head += f", peak {r.power_peak_w:.0f} W"
        if r.energy_j is not None:
            head += f", {r.energy_j:.2f} J"
        return head
    msg = clean(r.error_message or "no message")  # a server's words: controls escaped
    status = f" (HTTP {r.http_status})" if r.http_status else ""
    return f"{head}; failed: {r.error_kind}{status}: {msg}"


class ProbeLog(RowCursor, can_focus=True):
    """The last ``max_rows`` probes, newest at the bottom (followed like a log
    unless the cursor was moved up).  Keys: up/down/page up/page down/home/end move
    the cursor, enter selects; a click selects the row under the pointer."""

    BINDINGS = [
        Binding("enter", "select_cursor", "Select", show=False),
    ]
    COMPONENT_CLASSES = {"probe-log--header", "probe-log--cursor"}
    DEFAULT_CSS = """
    ProbeLog {
        background: $surface;
        color: $foreground;
        & > .probe-log--header { text-style: bold; background: $panel; color: $foreground; }
        & > .probe-log--cursor { background: $block-cursor-blurred-background; }
        &:focus > .probe-log--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: $block-cursor-text-style;
        }
    }
    """

    #: Widget.virtual_size with layout=False: see the module docstring and
    #: ``watch_virtual_size`` (a screen layout per probe row cost ~10 ms).
    virtual_size = Reactive(Size(0, 0), layout=False)

    class Selected(Message):
        def __init__(self, result: ProbeResult) -> None:
            super().__init__()
            self.result = result

    class Highlighted(Message):
        """The probe under the cursor of the focused log (None: the log lost focus)."""

        def __init__(self, result: ProbeResult | None) -> None:
            super().__init__()
            self.result = result

    def __init__(self, *, max_rows: int = 200, **kw) -> None:
        super().__init__(**kw)
        self.max_rows = max_rows
        #: (probe, formatted line); a note's probe is None
        self._rows: list[tuple[ProbeResult | None, str]] = []
        self._width = len(HEADER)
        self.cursor_row = 0
        self.follow = True
        self._highlighting = False  # the user moved the cursor: highlight its probe

    # -- data in -------------------------------------------------------------
    @property
    def row_count(self) -> int:
        return len(self._rows)

    def add_result(self, r: ProbeResult) -> None:
        """One probe (see ``add_results``)."""
        self.add_results([r])

    def add_note(self, at_s: float, text: str) -> None:
        """One line that is no probe (what changed on the server), stamped with the unix
        time ``at_s``: " HH:MM:SS  server  TEXT" (controls in ``text`` escaped)."""
        stamp = time.strftime("%H:%M:%S", time.localtime(at_s))
        self._append([(None, f" {stamp}   server  {clean(text)}")])

    def add_results(self, results: list[ProbeResult]) -> None:
        """Append rows (oldest first), drop the oldest beyond ``max_rows`` and follow
        the newest like a log unless the user moved the cursor up to read one."""
        self._append([(r, _row_text(row_cells(r))) for r in results[-self.max_rows:]])

    def _append(self, rows: list[tuple[ProbeResult | None, str]]) -> None:
        if not rows:
            return
        self.follow = not self.has_focus or self.cursor_row >= self.row_count - 2
        for r, line in rows:
            self._rows.append((r, line))
            self._width = max(self._width, len(line))
        drop = len(self._rows) - self.max_rows
        if drop > 0:
            del self._rows[:drop]
            self.cursor_row = max(self.cursor_row - drop, 0)
        self._set_virtual_size()
        if self.follow:
            # the cursor rides on the newest row, so a focused log keeps following
            self.cursor_row = len(self._rows) - 1
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)
            self._post_highlight()
        self.refresh()

    def current(self) -> ProbeResult | None:
        """The probe under the cursor (None when the log is empty or the row is a note)."""
        if 0 <= self.cursor_row < len(self._rows):
            return self._rows[self.cursor_row][0]
        return None

    def _post_highlight(self) -> None:
        if self._highlighting:
            self.post_message(self.Highlighted(self.current()))

    def on_blur(self) -> None:
        if self._highlighting:
            self._highlighting = False
            self.post_message(self.Highlighted(None))

    def _set_virtual_size(self) -> None:
        self.virtual_size = Size(self._width + 1, len(self._rows) + 1)  # + the header

    def watch_virtual_size(self, old: Size, new: Size) -> None:
        """Rows were added or removed: update the scrollbars (a visibility change still
        lays the screen out, once)."""
        if not self.is_mounted or not self.container_size:
            return
        scroll_update = getattr(self, "_scroll_update", None)
        if scroll_update is None:  # a Textual without it: fall back to a layout
            self.refresh(layout=True)
        else:
            scroll_update(new)

    def on_resize(self) -> None:
        """The box changed height (e.g. the gauge rows above it were mounted after the
        first rows arrived): a log that follows keeps showing the newest row."""
        if self.follow and self._rows:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)

    def on_mount(self) -> None:
        self._set_virtual_size()

    # -- drawing -------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        base = self.rich_style
        if y == 0:
            style = base + self.get_component_rich_style("probe-log--header")
            text = HEADER
        else:
            i = scroll_y + y - 1
            if i >= len(self._rows):
                return Strip.blank(width, base)
            text = self._rows[i][1]
            style = base
            if i == self.cursor_row:
                style = base + self.get_component_rich_style("probe-log--cursor")
        strip = Strip([Segment(text.ljust(self._width + 1), style)], self._width + 1)
        return strip.crop_extend(scroll_x, scroll_x + width, style)

    # -- cursor and selection ------------------------------------------------
    def _cursor_moved(self) -> None:
        self._highlighting = self.has_focus
        self._post_highlight()

    def action_select_cursor(self) -> None:
        if 0 <= self.cursor_row < len(self._rows) and self._rows[self.cursor_row][0] is not None:
            self.post_message(self.Selected(self._rows[self.cursor_row][0]))

    def on_click(self, event: Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y < 1:
            return
        row = round(self.scroll_y) + offset.y - 1
        if 0 <= row < len(self._rows):
            event.stop()
            self.move_cursor(row=row)
            if self._rows[row][0] is not None:  # a note has no probe to show
                self.post_message(self.Selected(self._rows[row][0]))
