"""The TTFT scatter: TTFT (ms) against prompt tokens, the running fit line and the
roofline expectation lines.

The widget owns bounded buffers of points and only draws; it never fits.  The app
calls ``add_result`` per probe, ``set_fit``/``set_reference_lines`` when the fit
changes, and ``replot()`` at most a few times a second (it merges updates).

Drawing is line by line (``render_line``) from strips built once per replot, and a
replot repaints only the rows that changed (a new point or a nudged fit line touches a
few rows): fewer lines to compose and fewer bytes to the terminal than a full repaint.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual_plotext import PlotextPlot

from prefilltui.model.types import ProbeResult
from prefilltui.render.ticks import plot_ticks, tick_label
from prefilltui.tui.themes import VARIABLE_DEFAULTS, rgb

#: Markers: one character each so the kinds differ without colour (NO_COLOR).
MARK_OK = "•"
MARK_NEWEST = "◆"
MARK_WARMUP = "×"
MARK_CACHE = "○"
MARK_LOAD = "▴"
#: A user's request (the server's own span, ``--otlp-listen``): TTFT as the server saw it.
MARK_USER = "+"


class TTFTPlot(PlotextPlot):
    """Scatter of TTFT (ms) vs prompt tokens with fit and roofline lines.

    Buffers hold at most ``max_points`` fit points and ``max_points // 4`` warm-up /
    cache-hit points (oldest dropped).  Failed probes are never plotted.
    """

    def __init__(self, *, max_points: int = 2000, show_excluded: bool = True, **kw) -> None:
        super().__init__(**kw)
        self._ok: deque[tuple[int, float]] = deque(maxlen=max_points)
        self._warm: deque[tuple[int, float]] = deque(maxlen=max(8, max_points // 4))
        self._cache: deque[tuple[int, float]] = deque(maxlen=max(8, max_points // 4))
        #: probes under background load: plotted, never in the (idle) fit
        self._load: deque[tuple[int, float]] = deque(maxlen=max(8, max_points // 2))
        self._newest: tuple[int, float] | None = None
        #: users' requests (set whole by ``set_users``): plotted, never fitted
        self._users: list[tuple[int, float]] = []
        self._fit: tuple[float, float] | None = None  # (intercept ms, slope ms/token)
        self._lines: list[tuple[str, Callable[[float], float]]] = []
        self.show_excluded = show_excluded
        self._max_tokens_hint: int | None = None
        self.replots = 0  # how many times replot() drew (tests check throttling)
        self._render_key: tuple | None = None
        self._plot_text = None
        self._canvas_key: tuple | None = None
        self._canvas_text = ""
        self._strips_key: tuple | None = None
        self._strips_cache: list[Strip] = []
        #: row ANSI text -> its Strip, for the last build's rows (valid for one width and
        #: base style): a replot redecodes only the rows whose text changed
        self._row_strips: dict[str, Strip] = {}
        self._row_base: tuple | None = None
        self._shown: list[Strip] | None = None  # the rows as last handed to the screen

    # -- data in -------------------------------------------------------------
    def add_result(self, r: ProbeResult) -> None:
        """Buffer one probe (failed probes and probes without TTFT are ignored)."""
        if not r.ok or r.ttft_s is None or r.tokens is None:
            return
        point = (int(r.tokens), r.ttft_s * 1000.0)
        if r.warmup:
            self._warm.append(point)
        elif r.cache_hit:
            self._cache.append(point)
        elif r.load_level:
            self._load.append(point)
            self._newest = point
        else:
            self._ok.append(point)
            self._newest = point

    def clear_points(self) -> None:
        """Forget every plotted point (the fit was reset)."""
        self._ok.clear()
        self._warm.clear()
        self._cache.clear()
        self._load.clear()
        self._newest = None

    def set_users(self, points: list[tuple[int, float]]) -> None:
        """The users' requests to show: (prompt tokens, server TTFT ms), replacing the
        last set (the caller keeps the bounded window, ``measure.otlp.UsersTrace``)."""
        self._users = list(points)

    def set_fit(self, intercept_ms: float | None, slope_ms_per_token: float | None) -> None:
        """The fit line TTFT = a + b*n in ms; None hides it."""
        if intercept_ms is None or slope_ms_per_token is None:
            self._fit = None
        else:
            self._fit = (float(intercept_ms), float(slope_ms_per_token))

    def set_reference_lines(self, lines: list[tuple[str, Callable[[float], float]]]) -> None:
        """Roofline expectation lines: (label, tokens -> TTFT ms)."""
        self._lines = list(lines)

    def set_range_hint(self, max_tokens: int | None) -> None:
        """The sweep's longest prompt, so the x axis does not jump around."""
        self._max_tokens_hint = max_tokens

    @property
    def point_count(self) -> int:
        return len(self._ok)

    # -- drawing -------------------------------------------------------------
    def _color(self, var: str) -> tuple[int, int, int]:
        try:
            value = self.app.theme_variables.get(var)
        except Exception:  # not mounted yet
            value = None
        return rgb(value or VARIABLE_DEFAULTS.get(var))

    def replot(self) -> None:
        """Redraw from the buffers (cheap: a few thousand points at most)."""
        self.replots += 1
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.xlabel("prompt tokens")
        plt.ylabel("TTFT ms")
        xs_all = [p[0] for p in self._ok] + [p[0] for p in self._load]
        ys_all = [p[1] for p in self._ok] + [p[1] for p in self._load]
        if self.show_excluded:
            xs_all += [p[0] for p in self._warm] + [p[0] for p in self._cache]
            ys_all += [p[1] for p in self._warm] + [p[1] for p in self._cache]
        xs_all += [p[0] for p in self._users]
        ys_all += [p[1] for p in self._users]
        x_max = max(xs_all, default=0)
        if self._max_tokens_hint:
            x_max = max(x_max, self._max_tokens_hint)
        x_max = max(x_max, 16) * 1.05
        y_max = max(ys_all, default=0.0)
        if self._fit:
            y_max = max(y_max, self._fit[0] + self._fit[1] * x_max)
        y_max = max(y_max, 1.0) * 1.08
        xs_line = [0.0, x_max * 0.25, x_max * 0.5, x_max * 0.75, x_max]
        for _label, fn in self._lines:
            try:
                ys = [fn(x) for x in xs_line]
            except Exception:
                continue
            plt.plot(xs_line, ys, marker="braille", color=self._color("plot-roofline"))
        if self._fit:
            a, b = self._fit
            plt.plot([0.0, x_max], [a, a + b * x_max], marker="braille",
                     color=self._color("plot-fit"))
        if self.show_excluded and self._warm:
            plt.scatter([p[0] for p in self._warm], [p[1] for p in self._warm],
                        marker=MARK_WARMUP, color=self._color("plot-warmup"))
        if self.show_excluded and self._cache:
            plt.scatter([p[0] for p in self._cache], [p[1] for p in self._cache],
                        marker=MARK_CACHE, color=self._color("plot-cache"))
        if self._load:
            plt.scatter([p[0] for p in self._load], [p[1] for p in self._load],
                        marker=MARK_LOAD, color=self._color("plot-load"))
        if self._users:  # under the probes: a probe is never hidden by a user
            plt.scatter([p[0] for p in self._users], [p[1] for p in self._users],
                        marker=MARK_USER, color=self._color("plot-user"))
        if self._ok:
            plt.scatter([p[0] for p in self._ok], [p[1] for p in self._ok],
                        marker=MARK_OK, color=self._color("plot-point"))
        if self._newest:
            plt.scatter([self._newest[0]], [self._newest[1]], marker=MARK_NEWEST,
                        color=self._color("plot-newest"))
        plt.xlim(0, x_max)
        plt.ylim(0, y_max)
        # the canvas rows: the height less the frame's top, the x axis, its labels and
        # its title
        xt, yt = plot_ticks(x_max, y_max, self.size.width, self.size.height,
                            self.size.height - 4)
        plt.xticks(xt, [tick_label(v) for v in xt])
        plt.yticks(yt, [tick_label(v) for v in yt])
        self._refresh_changed_rows()

    def _strips(self) -> list[Strip]:
        """The plot as one Strip per content row, built once per (replot, size, theme).

        Rows are decoded from plotext's ANSI text one by one (as ``Text.from_ansi`` of
        the whole text, split at newlines, would give them), and a row whose text is
        the same as in the last build reuses its Strip: a new probe changes a few rows
        of the plot, not all of them (decoding and rendering every row was ~1/3 of a
        replot's cost at the default pacing, measured with py-spy)."""
        width, height = self.size
        key = (self.replots, width, height, self.app.theme)
        if key != self._strips_key:
            rows = self._canvas().splitlines()
            console, base = self.app.console, self.rich_style
            if self._row_base != (width, base):
                self._row_base, self._row_strips = (width, base), {}
            old, new = self._row_strips, {}
            strips = []
            for y in range(height):
                row = rows[y] if y < len(rows) else ""
                strip = old.get(row, new.get(row))
                if strip is None:
                    line = Text.from_ansi(row) if row else Text()
                    strip = Strip(list(line.render(console, end="")))
                    strip = strip.adjust_cell_length(width).apply_style(base)
                new[row] = strip
                strips.append(strip)
            self._row_strips = new
            self._strips_key, self._strips_cache = key, strips
        return self._strips_cache

    def _refresh_changed_rows(self) -> None:
        """Repaint the rows whose content differs from what is on screen (all of them
        when the size changed or nothing was drawn yet)."""
        old = self._shown
        if not self.is_mounted or not self.size or old is None:
            self.refresh()
            return
        new = self._strips()
        if len(old) != len(new):
            self.refresh()
            return
        width = self.size.width
        for y, (a, b) in enumerate(zip(old, new)):
            if a != b:
                self.refresh(Region(0, y, width, 1))

    def render_line(self, y: int) -> Strip:
        strips = self._strips()
        self._shown = strips
        if 0 <= y < len(strips):
            return strips[y]
        return Strip.blank(self.size.width, self.rich_style)

    def render(self):
        """Build the plotext text once per (replot, size, theme); Textual may call
        render() more often than the data changes (overlapping toasts, focus)."""
        key = (self.replots, self.size.width, self.size.height, self.app.theme)
        if key != self._render_key:
            self._render_key = key
            self._plot_text = Text.from_ansi(self._canvas())
        return self._plot_text

    def _canvas(self) -> str:
        """plotext's ANSI text of the plot (``PlotextPlot.render`` before its
        ``Text.from_ansi``), built once per (replot, size, theme)."""
        width, height = self.size
        key = (self.replots, width, height, self.app.theme)
        if key != self._canvas_key:
            plot = self.plt
            plot.plotsize(width, height)
            plot._set_size(width, height)  # as PlotextPlot.render (textual-plotext issue 5)
            plot.theme(self._get_plotext_theme_name(self.app.theme))
            self._canvas_key, self._canvas_text = key, plot.build()
        return self._canvas_text

    def on_resize(self) -> None:
        # tick density depends on the size: redraw (cheap) when the terminal changes
        self.replot()

    def legend_markup(self) -> str:
        """A one-line legend for the border subtitle (colours from the theme)."""
        parts = [f"[$plot-point]{MARK_OK}[/]probe", f"[$plot-newest]{MARK_NEWEST}[/]new",
                 "[$plot-fit]─[/]fit"]
        if self._lines:
            parts.append("[$plot-roofline]─[/]" + "/".join(l for l, _ in self._lines))
        if self.show_excluded and self._warm:
            parts.append(f"[$plot-warmup]{MARK_WARMUP}[/]warm-up")
        if self.show_excluded and self._cache:
            parts.append(f"[$plot-cache]{MARK_CACHE}[/]cached")
        if self._load:
            parts.append(f"[$plot-load]{MARK_LOAD}[/]under load")
        if self._users:
            parts.append(f"[$plot-user]{MARK_USER}[/]users")
        return " ".join(parts)
