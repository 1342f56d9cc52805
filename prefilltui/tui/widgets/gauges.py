"""Utilization and power gauges, side by side per device, each with a ~60 s history.

Widgets read a TelemetrySnapshot (core/telemetry/) handed to them by the app; they
never call NVML or psutil.  The history is bucketed by *time* (one column per
span/width seconds) on a fixed scale (0-100 % for util, 0-power limit for power); a
column's height is the *mean* of its samples, so it reads as how busy the device was
over that time: a 16-token probe is a small bump, a 1,024-token one a full spike (a
peak per column drew every probe, and every run of short probes, at full height).
Columns that overlap a probe's request window (``t_send``..``t_end``) get a tinted
background, so each probe is marked even where it is too short to raise its column,
and each spike lines up with its probe; the window of the probe selected in the probe
log gets a stronger tint.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterable, Sequence

from rich.segment import Segment
from rich.style import Style
from textual.app import ComposeResult, RenderResult
from textual.color import Color
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.strip import Strip
from textual.widgets import Sparkline, Static

from prefilltui.measure.telemetry import UTIL_WORDS, DeviceSnapshot, TelemetrySnapshot
from prefilltui.model.units import MISSING

BARS = "▁▂▃▄▅▆▇█"

#: Devices shown with a 2-line history; above this many GPUs rows go compact (1 line).
COMPACT_ABOVE = 2

#: Shortest gap (s, on the snapshot's clock) between two gauge redraws with the same
#: devices, status and selected probe in a frame of the gauges' own: the dashboard's
#: 0.5-s tick (kept for keys) then redraws them about once a second.
MIN_REDRAW_S = 0.75
#: ... and in a frame that draws new probes anyway (``with_data``): the gauges ride
#: along, so their probe window is tinted in the same frame as its point, and the
#: frame of their own half a second later is not due.  With one gap for both, a data
#: frame 0.5 s after a gauge frame skipped them, and the two alternated: two frames a
#: second at one probe a second, each re-rendering the screen between the status line
#: and the log (Textual's compositor renders the box around all dirty regions).
WITH_DATA_S = 0.25


def bucket_history(
    history: Iterable[tuple[float, float | None]], now: float, span: float, width: int
) -> list[float | None]:
    """Time-weighted mean per time bucket over [now - span, now]; None where no sample.

    history: (t_perf seconds, value or None) pairs in time order (the sampler's ticks, a
    GPU's driver samples).  Each value stands for the interval since the series'
    previous value (a counter delta or a driver average describes the time before it),
    at most one bucket long; the first one for as long as the gap after it.  A bucket's
    value is the mean over the time its intervals cover, so a sampler that reads faster
    during a probe than between probes (``Sampler.slow_between_probes``) does not weigh
    the probe's readings more than its share of the time.  Returns ``width`` values,
    oldest first.
    """
    if width <= 0 or span <= 0:
        return [None] * max(width, 0)
    sums = [0.0] * width
    weights = [0.0] * width
    start = now - span
    step = span / width
    pts = [(t, v) for t, v in history if v is not None]
    for k, (t, v) in enumerate(pts):
        if t < start or t > now:
            continue
        if k > 0:
            gap = t - pts[k - 1][0]
        else:
            gap = pts[1][0] - t if len(pts) > 1 else step
        a = max(t - min(max(gap, 0.0), step), start)
        last = min(int((t - start) / step), width - 1)
        if a >= t:  # two readings at one time: the second counts as a point
            sums[last] += v * 1e-9
            weights[last] += 1e-9
            continue
        for i in range(int((a - start) / step), last + 1):
            lo = start + i * step
            part = min(t, lo + step) - max(a, lo)
            if part > 0:
                sums[i] += v * part
                weights[i] += part
    return [sums[i] / weights[i] if weights[i] > 0 else None for i in range(width)]


def window_mask(windows: Iterable[tuple[float, float]], now: float, span: float,
                width: int, value: int | bool = True) -> list:
    """``value`` for each bucket that overlaps a probe window (t_send, t_end), else
    False."""
    mask: list = [False] * max(width, 0)
    if width <= 0:
        return mask
    start = now - span
    step = span / width
    for t0, t1 in windows:
        if t1 < start or t0 > now:
            continue
        i0 = max(int((t0 - start) / step), 0)
        i1 = min(int((t1 - start) / step), width - 1)
        for i in range(i0, i1 + 1):
            mask[i] = value
    return mask


#: mask levels: 0 no probe, 1 a probe window, 2 the selected probe's window
HIGHLIGHT = 2


def marks(windows: Iterable[tuple[float, float]], highlight: tuple[float, float] | None,
          now: float, span: float, width: int) -> list[int]:
    """Per bucket: 0 outside every probe window, 1 inside one, ``HIGHLIGHT`` inside
    the selected probe's window."""
    out = [int(m) for m in window_mask(windows, now, span, width)]
    if highlight is not None:
        for i, m in enumerate(window_mask([highlight], now, span, width)):
            if m:
                out[i] = HIGHLIGHT
    return out


class HistorySpark(Sparkline):
    """A Sparkline on a fixed scale over a time window, with probe windows tinted.

    Set ``history`` ((t, value|None) pairs), ``now``, ``span`` (s), ``hi`` (scale
    top; values above clip), ``windows`` ((t0, t1) perf_counter pairs) and
    ``highlight`` (one (t0, t1) or None) with ``set_data``.
    """

    DEFAULT_CSS = """
    HistorySpark { height: 2; width: 1fr; }
    """

    def __init__(self, *, span: float = 60.0, **kw: Any) -> None:
        super().__init__(**kw)
        self.history: Sequence[tuple[float, float | None]] = ()
        self.windows: Sequence[tuple[float, float]] = ()
        self.highlight: tuple[float, float] | None = None
        self.now = 0.0
        self.span = span
        self.hi = 100.0
        self._sig: tuple | None = None
        self._drawn: tuple | None = None  # what the cells show (``_drawn_cells``)

    def set_data(self, history, now: float, hi: float, windows=(),
                 highlight: tuple[float, float] | None = None) -> None:
        """New data; refreshes only when a drawn cell changes (saves frames and terminal
        bytes: at 60 s over ~40 columns a column lasts ~1.5 s, longer than a gauge
        tick, and the newest column's mean moves with every sample while its glyph and
        colour mostly do not)."""
        self.history = history if isinstance(history, tuple) else tuple(history)
        self.now = now
        self.hi = hi if hi and hi > 0 else 1.0
        self.windows = windows if isinstance(windows, tuple) else tuple(windows)
        self.highlight = highlight
        sig = self._sig = self._columns()
        drawn = _drawn_cells(sig, self.size.height)
        if drawn != self._drawn:
            self._drawn = drawn
            self.refresh()

    def _columns(self) -> tuple:
        """(width, scale, mean per column, probe marks per column) for the current data."""
        width = self.size.width
        return (width, self.hi, tuple(bucket_history(self.history, self.now, self.span, width)),
                tuple(marks(self.windows, self.highlight, self.now, self.span, width)))

    def render(self) -> RenderResult:  # pragma: no cover - render_lines is used
        return ""

    def render_line(self, y: int) -> Strip:
        width, height = self.size.width, self.size.height
        if width <= 0 or height <= 0:
            return Strip.blank(width)
        sig = self._sig
        if sig is None or sig[0] != width or sig[1] != self.hi:
            sig = self._sig = self._columns()  # computed once per change, not per line
        vals, mask = sig[2], sig[3]
        variables = self.app.theme_variables
        cool = Color.parse(variables.get("gauge-cool", "#2f6f4f"))
        hot = Color.parse(variables.get("gauge-hot", "#f0625d"))
        probe = Color.parse(variables.get("gauge-probe", "#f5b342"))
        tints = self._tints(self.background_colors[1], probe, hot)
        row = height - 1 - y  # 0 = bottom row
        segs = []
        for v, mark in zip(vals, mask):
            bg = tints[mark]
            if v is None:
                segs.append(Segment(" ", _blank_style(bg)))
                continue
            ratio = max(0.0, min(v / self.hi, 1.0))
            segs.append(self._cell(ratio, mark, row, height, cool, hot, bg))
        return Strip(segs, width)

    def _tints(self, base: Color, probe: Color, hot: Color) -> tuple:
        """Background per mark level: none, a probe window, the selected probe's."""
        return (base.rich_color, base.blend(probe, 0.22).rich_color,
                base.blend(probe, 0.55).rich_color)

    def _cell(self, ratio: float, mark: int, row: int, height: int, cool: Color,
              hot: Color, bg: Any) -> Segment:
        """The cell of a column at ``ratio`` of the scale, ``row`` rows up (0 = bottom)."""
        return Segment(bar_glyph(ratio, row, height), _cell_style(cool, hot, round(ratio * 100), bg))


def _drawn_cells(sig: tuple, height: int) -> tuple:
    """What ``HistorySpark.render_line`` draws from ``sig`` (width, scale, means,
    marks), as a key: per column None (no sample) or (eighths filled, colour percent),
    and the marks.  Two signatures with equal keys draw the same cells: the glyph is a
    function of ``floor(ratio * height * 8)`` (``bar_glyph``), the colour of
    ``round(ratio * 100)`` (``_cell_style``)."""
    hi, eighths = sig[1], height * len(BARS)
    cells = []
    for v in sig[2]:
        if v is None:
            cells.append(None)
        else:
            ratio = max(0.0, min(v / hi, 1.0))
            cells.append((int(ratio * eighths), round(ratio * 100)))
    return (sig[0], height, hi, tuple(cells), sig[3])


def bar_glyph(ratio: float, row: int, height: int) -> str:
    """The glyph of a bar ``ratio`` (0..1) of ``height`` rows tall, at ``row`` (0 =
    bottom): full, a partial eighth, or blank (the bottom row keeps the lowest bar)."""
    filled = ratio * height * len(BARS) - row * len(BARS)
    if filled >= len(BARS):
        return "█"
    if filled >= 1:
        return BARS[int(filled) - 1]
    return BARS[0] if row == 0 else " "


@lru_cache(maxsize=64)
def _blank_style(bg: Any) -> Style:
    return Style(bgcolor=bg)


@lru_cache(maxsize=4096)
def _cell_style(cool: Color, hot: Color, pct: int, bg: Any) -> Style:
    """The style of a history cell at ``pct`` % of the scale on ``bg``: built once per
    (theme colours, percent, tint).  Made per cell on every repaint it was half the
    gauges' drawing cost (profiled)."""
    return Style(color=cool.blend(hot, pct / 100).rich_color, bgcolor=bg)


def short_reason(why: str | None) -> str:
    """A few words for an N/A reason that must fit a gauge line ('RAPL not readable:
    no permission' -> 'no RAPL'); the full text is in the help screen (``?``)."""
    if not why:
        return ""
    low = why.lower()
    for key, short in (("rapl", "no RAPL"), ("nvml", "no NVML"), ("psutil", "no psutil"),
                       ("not supported", "unsupported"), ("permission", "no permission")):
        if key in low:
            return short
    head = why.split(":", 1)[0].strip()
    return head if len(head) <= 14 else head[:13] + "…"


def device_title(dev: DeviceSnapshot, label: str | None = None) -> str:
    """The gauge's device words: its label, then vendor and model when the source
    knows the vendor ("GPU 0 AMD MI300X", "GPU 1 NVIDIA H200"); the label alone for
    the CPU and processes."""
    label = label or dev.label
    if not dev.vendor:
        return label
    words = [w for w in (dev.name or "").split()
             if w.lower() not in (dev.vendor.lower(), "instinct")]
    return " ".join([label, dev.vendor, *words])


def util_word(dev: DeviceSnapshot) -> str:
    """What the utilization figure measures, in one word: "util" (NVML's kernel-active
    share, the CPU's busy share), "busy" (amdgpu's busy percent), "gfx" (amdsmi's
    graphics activity), "awake" (Intel's share out of RC6)."""
    return UTIL_WORDS.get(dev.util_kind or "", ("util", ""))[0]


def power_note(dev: DeviceSnapshot) -> str:
    """" (1 s avg)" for a power averaged over a known window, " avg" for the CPU's
    (one sample period) and an average whose window the source does not document,
    "" for an instantaneous reading."""
    if not dev.power_averaged:
        return ""
    if dev.power_scope == "CPU package" or dev.power_window_s is None:
        return " avg"
    return f" ({dev.power_window_s:g} s avg)"


def device_measures(dev: DeviceSnapshot) -> str | None:
    """One help line on what a device's gauges measure, e.g. "GPU 0 AMD MI300X
    (amdgpu sysfs): busy = the SMU firmware's busy percent ... (window not documented);
    power instantaneous"; None when the source says nothing (fakes, old snapshots).
    Listed on the help screen (``tui.help.dashboard_details``)."""
    if dev.util_kind is None and dev.source is None:
        return None
    word, long = UTIL_WORDS.get(dev.util_kind or "", ("util", "utilization"))
    window = (f"over {dev.util_window_s:g} s" if dev.util_window_s is not None
              else "window not documented")
    if dev.power_averaged is None:
        power = "power not read"
    elif dev.power_averaged:
        power = ("power averaged over " + (f"{dev.power_window_s:g} s"
                                           if dev.power_window_s is not None
                                           else "a window the source does not document"))
    else:
        power = "power instantaneous"
    src = f" ({dev.source})" if dev.source else ""
    return f"{device_title(dev)}{src}: {word} = {long} ({window}); {power}"


def _fmt(v: float | None, unit: str, digits: int = 0) -> str:
    return MISSING if v is None else f"{v:.{digits}f} {unit}"


class DeviceGauge(Horizontal):
    """One device: [util text + history] [power text + history], side by side."""

    DEFAULT_CSS = """
    DeviceGauge { height: auto; }
    DeviceGauge > Vertical { width: 1fr; height: auto; padding: 0 1 0 0; }
    DeviceGauge .gauge-text { height: 1; width: 1fr; }
    DeviceGauge.-compact > Vertical { layout: horizontal; }
    DeviceGauge.-compact .gauge-text { width: 22; }
    DeviceGauge.-compact HistorySpark { height: 1; }
    """

    def __init__(self, label: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.label = label
        self._pending: tuple | None = None
        self._texts: tuple[str, str] | None = None

    def compose(self) -> ComposeResult:
        with Vertical(classes="util"):
            yield Static("", classes="gauge-text util-text", markup=False)
            yield HistorySpark(classes="util-spark")
        with Vertical(classes="power"):
            yield Static("", classes="gauge-text power-text", markup=False)
            yield HistorySpark(classes="power-spark")

    def on_resize(self) -> None:
        for spark in self.query(HistorySpark):
            spark._sig = spark._drawn = None
        if self._pending is not None:
            self.show(*self._pending)

    def on_mount(self) -> None:
        if self._pending is not None:
            self.show(*self._pending)

    def show(self, dev: DeviceSnapshot, now: float,
             windows: Sequence[tuple[float, float]],
             highlight: tuple[float, float] | None = None) -> None:
        """Update from one DeviceSnapshot (kept until composed)."""
        self._pending = (dev, now, windows, highlight)
        if not self.query(".util-text"):
            return
        na = dev.na
        label = device_title(dev, dev.label or self.label)
        word = util_word(dev)
        util, power, limit = dev.util_pct, dev.power_w, dev.power_limit_w
        if util is None:
            why = na.get("util")
            util_text = f"{label} {word} {MISSING}" + (f" ({short_reason(why)})" if why else "")
        else:
            util_text = f"{label} {word} {util:3.0f} %"
            if dev.tensor_active_pct is not None:  # dcgm-exporter's tensor pipe activity
                util_text += f" · tensor {dev.tensor_active_pct:.0f} %"
        if power is None:
            why = na.get("power")
            power_text = f"power {MISSING}" + (f" ({short_reason(why)})" if why else "")
        else:
            power_text = f"power {power:.0f} W"
            power_text += f" / {limit:.0f} W" if limit else ""
            # NVML's nvmlDeviceGetPowerUsage: ~1 s; RAPL, Intel's Δenergy: one period
            power_text += power_note(dev)
        history = dev.history
        util_hist = [(h[0], h[1]) for h in history]
        power_hist = [(h[0], h[2]) for h in history]
        if limit:
            p_hi = float(limit)
        else:
            p_hi = max((p for _, p in power_hist if p is not None), default=1.0)
        if (util_text, power_text) != self._texts:
            # one line each, fixed by CSS: a new figure needs no screen layout
            old = self._texts or ("", "")
            self._texts = (util_text, power_text)
            if util_text != old[0]:
                self.query_one(".util-text", Static).update(util_text, layout=False)
            if power_text != old[1]:
                self.query_one(".power-text", Static).update(power_text, layout=False)
        self.query_one(".util-spark", HistorySpark).set_data(util_hist, now, 100.0, windows,
                                                              highlight)
        self.query_one(".power-spark", HistorySpark).set_data(power_hist, now, p_hi, windows,
                                                               highlight)


class GaugePanel(Vertical):
    """All devices of one TelemetrySnapshot; compact rows when there are many GPUs."""

    DEFAULT_CSS = """
    GaugePanel { height: auto; }
    GaugePanel > .gauge-status { height: auto; }
    GaugePanel > .gauge-status.-hidden { display: none; }
    """

    class Info(Message):
        """A new telemetry info line (e.g. why the CPU is shown instead of GPUs)."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._labels: list[str] = []
        self.info_reason: str | None = None
        self._status_text: str | None = "telemetry: starting"
        self._drawn_at: float | None = None  # ``now`` of the last drawn update
        self._drawn_key: tuple | None = None  # what else it showed (see ``show``)

    def _set_status(self, status: Static, text: str) -> None:
        """Update the status line only when its text changes (its height is auto, so a
        change lays the screen out; the same text every tick must not)."""
        if text != self._status_text:
            self._status_text = text
            status.update(text)

    def compose(self) -> ComposeResult:
        yield Static("telemetry: starting", classes="gauge-status", markup=False)

    def show(self, snap: TelemetrySnapshot | None, now: float,
             windows: Sequence[tuple[float, float]] = (),
             highlight: tuple[float, float] | None = None, *, with_data: bool = False) -> None:
        """Update from a TelemetrySnapshot (None = no sampler); ``highlight``: the
        selected probe's (t_send, t_end); ``with_data``: the same frame draws new probes.
        An update less than ``MIN_REDRAW_S`` (``WITH_DATA_S`` with data) after the last
        drawn one (``now`` later, on the same clock) that changes neither the devices,
        the status nor the selection is skipped: the next one draws it."""
        devices = snap.devices if snap is not None else ()
        key = (snap is None, snap.available if snap is not None else None,
               snap.reason if snap is not None else None,
               tuple(d.label for d in devices), highlight)
        last = self._drawn_at
        if (key == self._drawn_key and last is not None
                and 0.0 < now - last < (WITH_DATA_S if with_data else MIN_REDRAW_S)):
            return
        self._drawn_at, self._drawn_key = now, key
        status = self.query_one(".gauge-status", Static)
        if snap is None:
            self._set_status(status, "telemetry off")
            status.remove_class("-hidden")
        elif not snap.available or not devices:
            reason = snap.reason or "no devices"
            # "no GPU source: ..." (a remote target without a GPU page) says it all
            self._set_status(status, reason if reason.startswith("no GPU source")
                             else f"telemetry unavailable: {reason}")
            status.remove_class("-hidden")
        else:
            reason = snap.reason
            status.set_class(not reason, "-hidden")
            if reason:
                self._set_status(status, reason)
            if reason and reason != self.info_reason:
                self.info_reason = reason
                self.post_message(self.Info(reason))
        # "why CPU" is an info line: hidden on narrow screens (the app notifies it once)
        status.set_class(bool(devices) and snap is not None and snap.available, "-info")
        labels = [d.label for d in devices]
        if labels != self._labels:
            for g in self.query(DeviceGauge):
                g.remove()
            compact = len(labels) > COMPACT_ABOVE
            self.mount_all([DeviceGauge(lab, classes="-compact" if compact else "")
                            for lab in labels])
            self._labels = labels
        self._fill(devices, now, windows, highlight)

    def _fill(self, devices, now, windows, highlight) -> None:
        for gauge, dev in zip(self.query(DeviceGauge), devices):
            gauge.show(dev, now, windows, highlight)
