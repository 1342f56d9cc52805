"""Axis ticks for the text plots: the dashboard's TTFT plot and ``report``'s.

Round positions from 0 (the 1-2-5 series), short labels ("4k", "1.5k", "250"), never
two labels on one row of the plot.  Pure functions; the plots hand them to plotext.
"""

from __future__ import annotations

import math


def nice_step(raw: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k that is at least ``raw`` (> 0)."""
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def nice_ticks(hi: float, target: int = 5) -> list[float]:
    """Round tick positions 0, s, 2s, ... <= hi with s from the 1-2-5 series."""
    if hi <= 0:
        return [0.0]
    step = nice_step(hi / max(target - 1, 1))
    n = int(hi // step)
    return [i * step for i in range(n + 1)]


def apart(ticks: list[float], hi: float, rows: int) -> list[float]:
    """``ticks`` thinned (every other one, again while needed) until no two fall on
    the same one of ``rows`` canvas rows (plotext puts a tick v at row round(v / hi *
    (rows - 1))): two labels on one row overwrite each other, and which one is left
    then depends on plotext's set order, different from one process to the next (a
    9-row plot at 80x24 showed 2.5k or 5k at random)."""
    if hi <= 0 or rows < 1:
        return ticks[:1]
    def row(v: float) -> int:
        return round(v / hi * (rows - 1))
    while len(ticks) > 1 and len({row(v) for v in ticks}) < len(ticks):
        ticks = ticks[::2]
    return ticks


def tick_label(v: float) -> str:
    """4096 -> '4k', 1500 -> '1.5k', 12.5 -> '12.5', 40 -> '40'."""
    if abs(v) >= 1000:
        k = v / 1000
        return f"{k:.0f}k" if k == int(k) else f"{k:.1f}k"
    return f"{v:.0f}" if v == int(v) else f"{v:.1f}"


def plot_ticks(x_max: float, y_max: float, width: int, height: int,
               canvas_rows: int) -> tuple[list[float], list[float]]:
    """The x and y ticks of a ``width`` x ``height`` text plot whose axes run from 0
    to ``x_max`` / ``y_max``: about one x tick per 9 columns and one y tick per 2.5
    rows (4 to 10 and 4 to 8), the y ticks ``apart`` on its ``canvas_rows``."""
    xt = nice_ticks(x_max, max(4, min(max(width, 20) // 9, 10)))
    yt = nice_ticks(y_max, max(4, min(int(height / 2.5), 8)))
    return xt, apart(yt, y_max, max(1, canvas_rows))
