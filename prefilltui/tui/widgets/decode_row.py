"""The decode row under the gauges: the background load's decode streams on the same
time axis (the last 60 s, ending at the gauges' "now").

One text line (streams, ITL p50, the last probe's stall and excess) over a sparkline
of inter-token latency: each column the *longest* decode gap that ended in it (a
stall must stand out, not be averaged away), probe windows tinted as on the gauges,
and columns holding a stall (a gap of 3 baseline gaps or more) marked with ▲ in the
hot colour.  Hidden unless a load is configured.  Reads a ``DecodeView``
(``tui/load_view.py``); never touches the load itself.
"""

from __future__ import annotations

from typing import Any, Sequence

from rich.segment import Segment
from rich.style import Style
from textual.app import ComposeResult
from textual.color import Color
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from prefilltui.tui.load_view import DecodeView
from prefilltui.tui.widgets.gauges import HistorySpark, bar_glyph, marks, window_mask

#: mark level of a column holding a stall (above the probe tints 1 and 2)
STALL = 3


def bucket_max(points: Sequence[tuple[float, float]], now: float, span: float,
               width: int) -> list[float | None]:
    """The largest value per time bucket over [now - span, now]; None where empty."""
    out: list[float | None] = [None] * max(width, 0)
    if width <= 0 or span <= 0:
        return out
    start, step = now - span, span / width
    for t, v in points:
        if start <= t <= now:
            i = min(int((t - start) / step), width - 1)
            out[i] = v if out[i] is None else max(out[i], v)
    return out


class DecodeSpark(HistorySpark):
    """An ITL sparkline: bucket maxima, probe windows tinted, stalls marked."""

    DEFAULT_CSS = """
    DecodeSpark { height: 2; width: 1fr; }
    """

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.stalls: Sequence[tuple[float, float]] = ()

    def set_view(self, view: DecodeView, now: float, windows=(), highlight=None) -> None:
        self.stalls = view.stalls
        hi = max((g for _, g in view.gaps), default=0.0)
        if view.baseline_s:
            hi = max(hi, 4 * view.baseline_s)
        self.set_data(view.gaps, now, hi, windows, highlight)

    def _columns(self) -> tuple:
        width = self.size.width
        mask = marks(self.windows, self.highlight, self.now, self.span, width)
        for i, m in enumerate(window_mask(self.stalls, self.now, self.span, width)):
            if m:
                mask[i] = STALL
        return (width, self.hi, tuple(bucket_max(self.history, self.now, self.span, width)),
                tuple(mask))

    def _tints(self, base: Color, probe: Color, hot: Color) -> tuple:
        return super()._tints(base, probe, hot) + (base.blend(hot, 0.35).rich_color,)

    def _cell(self, ratio: float, mark: int, row: int, height: int, cool: Color,
              hot: Color, bg: Any) -> Segment:
        if mark != STALL:
            return super()._cell(ratio, mark, row, height, cool, hot, bg)
        # the top row of a stall column is marked whatever its height
        ch = "▲" if row == height - 1 else bar_glyph(ratio, row, height)
        return Segment(ch, Style(color=hot.rich_color, bgcolor=bg))


class DecodeRow(Horizontal):
    """The decode row (hidden until ``show`` gets a view): laid out as a gauge row, the
    sparkline in the left half under the first device's utilization history (same
    width, same 60 s), the figures in the right half."""

    DEFAULT_CSS = """
    DecodeRow { height: auto; display: none; }
    DecodeRow.-on { display: block; }
    DecodeRow > Vertical { width: 1fr; height: auto; padding: 0 1 0 0; }
    DecodeRow .decode-text { height: 1; width: 1fr; }
    DecodeRow .decode-detail { height: 2; width: 1fr; }
    """

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._texts: tuple[str, str] | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("", classes="decode-text", markup=False)
            yield DecodeSpark(classes="decode-spark")
        with Vertical():
            yield Static("", classes="decode-text decode-head", markup=False)
            yield Static("", classes="decode-detail", markup=False)

    def show(self, view: DecodeView | None, now: float, windows=(), highlight=None) -> None:
        """Show ``view`` (None hides the row)."""
        self.set_class(view is not None, "-on")
        if view is None or not self.query(".decode-text"):
            return
        head, _, detail = view.text.partition("\n")
        if (head, detail) != self._texts:
            self._texts = (head, detail)
            left, _, right = head.partition("  ")
            self.query(".decode-text").first(Static).update(left, layout=False)
            self.query_one(".decode-head", Static).update(right, layout=False)
            self.query_one(".decode-detail", Static).update(detail, layout=False)
        self.query_one(DecodeSpark).set_view(view, now, windows, highlight)
