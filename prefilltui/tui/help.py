"""The ``?`` help screen: every key, what the plot marks mean, where data goes.

Fits 80x24 as is; the telemetry details (full N/A reasons) that the app passes in
scroll above a close hint that stays visible.  A notification that comes while the
help is open (an export that finished) is shown on a message line of its own above the
hint, never over the text.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from prefilltui.model.units import MISSING
from prefilltui.tui.textfit import tilde
from prefilltui.tui.widgets.gauges import device_measures
from prefilltui.tui.widgets.message_line import MessageLine, Severity

if TYPE_CHECKING:
    from prefilltui.tui.feed import FeedConfig
    from prefilltui.tui.widgets.message_line import Notice

HELP_TEXT = """\
[b]prefilltui[/b] — live prefill monitor
[b]Keys[/b]
 space  pause / resume probing         r  reset fit, counts, percentiles
 w      all-time / sliding-window fit  b  burst now, also paused (below)
 + / -  widen / narrow the sweep range (longest prompt ×2 / ÷2)
 d      more: the fit's details (in place of the plot below 28 rows)
 e / s  export CSV + JSON / save the screen as SVG (beside the run file)
 c      cache check: is the server's prefix cache serving prompts?
 t      next theme                     ?  this help
 l      background load on / off (only with --load: see docs/load.md)
 q      quit (Ctrl-C too; every probe is already on disk)
[b]Plot[/b]  TTFT (ms) against prompt tokens as the server counts them
 •  probe in the fit      ◆  newest probe       ─  fit line
 ×  warm-up (not in fit)  ○  cache hit (not in fit)  +  a user's request
 ▴  under load (a fit of its own)
 roofline lines: expected TTFT at the peak and at 50 % (catalog GPU or
 --peak-tflops).  Failed probes are only in the probe log.
[b]Fit[/b]  TTFT = intercept + slope × tokens, 95 % intervals below each;
 prefill = 1/slope.  queue (est.) = inferred, not reported by the server.
[b]Gauges[/b]  utilization and power over the last 60 s; tinted columns are
 probe request windows, strongest for the probe under the log's cursor.
 Probes idle between (pacing, below) so each spike is its own; a burst
 probes the longest length back to back long enough for the sensor to
 register it.  N/A: the device does not report it (why: below)."""

FLEET_HELP_TEXT = """\
[b]prefilltui[/b] — fleet overview: one row per target, the worst first
[b]Keys[/b]
 ↑ ↓ PgUp PgDn  move          enter  open the target's dashboard (esc back)
 s / S  next sort column / reverse  (a click on a column title sorts by it)
 w      window / all-time fit   t  next theme   ?  this help   q  quit
[b]Columns[/b]
 status   ● ok · ▲ warn / ✖ down: the exporter's alert rules on what this
          monitor measured (thresholds of deploy/prefilltui-alerts.yml)
 prefill  prompt tokens/s of the fit, ± half its 95 % interval
 fixed    the fit's fixed cost (wide: its interval is too wide to pin it)
 MFU      model FLOPs utilization (estimate; needs the GPU and the params)
 verdict  why TTFT is high when a cause stands out (queueing, HoL blk,
          slow, no cache, overhead, longer, hit drop), else the roofline verdict
 TTFT@1k  the fit's TTFT at the reference prompt length (--ref-tokens)
 probes   probes / failed     age  since the last probe ended
 trend    prefill throughput over the session      queue  median queue
 cache    prefix-cache hits among the probes (0 ✓: the server counted
          every miss; 0 ?: it reports no cached-token count)
 GPU      from the target's GPU page, this machine's NVML for a local
          target, else "no GPU source" (never this machine's GPU)
[b]Load[/b]  each target probes one at a time, its probe starts spaced by the
 interval; the targets start staggered over one interval (top line)."""

CLOSE_HINT = "escape, q or ? closes this help · Ctrl-C quits"


class HelpScreen(ModalScreen[None]):
    """Modal help; any of escape / q / ? closes it.  ``details``: extra lines (the
    telemetry's full N/A reasons) shown after the help text.  ``say``: a notification
    on the help's message line (the app's ``notify``)."""

    BINDINGS = [
        Binding("escape", "dismiss_help", "Close"),
        Binding("q", "dismiss_help", "Close", show=False),
        Binding("question_mark", "dismiss_help", "Close", show=False),
    ]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Vertical {
        width: 80; max-width: 100%; height: auto; max-height: 100%;
        background: $panel; border: round $primary; padding: 0 1;
    }
    /* the text scrolls in what the box leaves beside its foot (the message line, when
       it shows something, and the close hint), so a short terminal still shows both */
    HelpScreen VerticalScroll {
        height: auto; max-height: 100%; scrollbar-size-vertical: 1;
    }
    HelpScreen #help-foot { dock: bottom; height: auto; }
    HelpScreen #help-messages.-warning { color: $warning; }
    HelpScreen #help-messages.-error { color: $error; }
    HelpScreen #help-close { height: 1; color: $foreground 70%; text-style: italic; }
    """

    def __init__(self, details: list[str] = (), text: str = HELP_TEXT) -> None:
        super().__init__()
        self.details = list(details)
        self.text = text
        self.messages = MessageLine(collapse=True, id="help-messages")

    def compose(self) -> ComposeResult:
        with Vertical():
            with VerticalScroll():
                yield Static(self.text, id="help-text")
                if self.details:
                    yield Static("\n".join(self.details), id="help-details", markup=False)
            with Vertical(id="help-foot"):
                yield self.messages
                yield Static(CLOSE_HINT, id="help-close", markup=False)

    def say(self, text: str, *, severity: Severity = "information", title: str = "",
            timeout: float | None = None) -> None:
        """A notification on the help's own line (never a toast over the text)."""
        self.messages.say(text, severity=severity, title=title, timeout=timeout)

    def action_dismiss_help(self) -> None:
        self.dismiss(None)


def dashboard_details(config: FeedConfig, messages: Iterable[Notice] = ()) -> list[str]:
    """The help's extra lines for a dashboard: the pacing, where the GPU readings come
    from, what each device's gauges measure (``device_measures``), the telemetry's full
    N/A reasons (the gauges show short ones), then the
    recent notifications in full (``MessageLine.history``: newest last)."""
    lines = []
    pacing = config.pacing
    if pacing is not None:
        burst = (f"; burst ≥ {pacing.burst_min_s:.1f} s" if pacing.burst_min_s > 0 else "")
        lines.append(f"pacing: {pacing.describe()}{burst}")
    if config.gpu_source:
        lines.append(f"GPU readings: {config.gpu_source}")
    sampler = config.sampler
    if sampler is not None:
        try:
            snap = sampler.snapshot()
        except Exception as exc:
            lines.append(f"telemetry failed: {exc}")
        else:
            if snap.reason:
                lines.append(f"telemetry: {snap.reason}")
            for dev in snap.devices:
                measures = device_measures(dev)  # what its util and power figures are
                if measures:
                    lines.append(measures)
                for metric, why in dev.na.items():
                    lines.append(f"{dev.label} {metric} {MISSING}: {why}")
    said = list(messages)
    if said:
        lines.append("recent messages:")
        lines += [f" {time.strftime('%H:%M:%S', time.localtime(n.at))}  {tilde(n.line)}"
                  for n in said[-12:]]
    return lines
