"""The ``?`` help screen: every key, what the plot marks mean, where data goes."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HELP_TEXT = """\
[b]prefilltui[/b] — live prefill monitor

[b]Keys[/b]
  space   pause / resume probing
  r       reset the fit (and the plotted points)
  w       toggle all-time / sliding-window fit
  b       burst: one probe at the longest allowed length
  + / -   widen / narrow the sweep range (longest prompt ×2 / ÷2)
  e       export the run: CSV + JSON summary beside the run file
  c       cache check: is the server's prefix cache serving prompts?
  t       next theme
  ?       this help           q  quit (every probe is already on disk)

[b]Plot[/b]  TTFT (ms) against prompt tokens as the server counts them.
  •  probe in the fit      ◆  newest probe       ─  fit line
  ×  warm-up (not in fit)  ○  cache hit (not in fit)
  roofline lines: expected TTFT at the hardware's peak and at 50 %
  (shown when the peak is known: a catalog GPU or --peak-tflops).
  Failed probes are not plotted; they are in the probe log.

[b]Gauges[/b]  utilization and power per device over the last 60 s;
  tinted columns are probe request windows, so a long prefill's spike
  lines up with its probe.  N/A means the device does not report it.

press escape, q or ? to close
"""


class HelpScreen(ModalScreen[None]):
    """Modal help; any of escape / q / ? closes it."""

    BINDINGS = [
        Binding("escape", "dismiss_help", "Close"),
        Binding("q", "dismiss_help", "Close", show=False),
        Binding("question_mark", "dismiss_help", "Close", show=False),
    ]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 80; max-width: 100%; height: auto; max-height: 100%;
        background: $panel; border: round $primary; padding: 0 1;
    }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(HELP_TEXT, id="help-text")

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
