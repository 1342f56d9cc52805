"""The fleet overview: one row per target, the worst first; Enter opens a dashboard.

``FleetScreen(feeds)`` is the default screen of ``prefilltui URL URL ...`` /
``prefilltui --config targets.toml``.  A top line counts the targets by health and
states the monitor's own load; the table (``widgets.fleet_table``) has one row per
target (``model.fleet.rows.fleet_row`` over its live summary); the pane below says, for
the target under the cursor, its URL, GPU source, the alert rules that hold, the
verdict and the advisor's lines; notifications go to the message line above the
footer (never a toast over the table).

Cost: rows are rebuilt at most ``rate_hz`` times a second and only while the overview
is on screen; a target's summary is recomputed only when it has new probes (the
``LiveSummary`` cache), so 100 targets cost one summary per probe, not per redraw.
"""

from __future__ import annotations

import itertools
import time
from typing import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from prefilltui.model.fleet import SORT_KEYS, FleetLoad, FleetRow, fleet_row, sort_rows
from prefilltui.model.sanitize import clean
from prefilltui.model.units import MISSING
from prefilltui.render.fleet import short_time, si
from prefilltui.tui.feed import TargetFeed
from prefilltui.tui.help import FLEET_HELP_TEXT, HelpScreen
from prefilltui.tui.widgets.fleet_table import FleetTable
from prefilltui.tui.widgets.message_line import MessageLine, Severity


class FleetScreen(Screen[None]):
    """The overview (see the module docstring).  ``clock``: perf_counter-compatible
    (unused here; the feeds keep wall-clock ages); ``load``: the fleet's own load
    (``FleetLoad``, stated in the top line and the help); ``ref_tokens``: the TTFT column's prompt length.
    ``say``: a notification on its message line (the app's ``notify``)."""

    BINDINGS = [
        Binding("s", "sort", "Sort"),
        Binding("S", "reverse", "Reverse", show=False),
        Binding("w", "toggle_window", "Window"),
        Binding("t", "app.next_theme", "Theme"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "app.quit_app", "Quit"),
    ]
    DEFAULT_CSS = """
    FleetScreen { layout: vertical; }
    FleetScreen #fleet-status { height: 1; padding: 0 1; background: $panel; }
    FleetScreen #fleet { height: 1fr; min-height: 4; scrollbar-size-vertical: 1; }
    FleetScreen #fleet-detail {
        height: auto; max-height: 9; padding: 0 1;
        border-top: solid $primary 40%; background: $surface;
    }
    """

    def __init__(self, feeds: list[TargetFeed], *, clock: Callable[[], float] = time.perf_counter,
                 load: FleetLoad | None = None, ref_tokens: int = 1024,
                 rate_hz: float = 4.0) -> None:
        super().__init__()
        self.feeds = feeds
        self.clock = clock
        self.load = load
        self.ref_tokens = ref_tokens
        self.rate_hz = rate_hz
        self.scope = "window"  # the overview judges the recent fit (w: all-time)
        self.sort_key = "worst"
        self.reverse = False
        self.rows: list[FleetRow] = []
        self._dirty = True
        self._next_full = 0.0  # time.monotonic() of the next rebuild for the ages
        self._status_text = ""
        self._detail_text = ""
        self.rebuilds = 0  # how many times the rows were rebuilt (tests, bench)
        #: feed index -> (feed version, whole second of "now", scope, row): a row is
        #: rebuilt when its target changed or the second (its age) turned
        self._cache: dict[int, tuple[int, int, str, FleetRow]] = {}
        self.messages = MessageLine(id="messages")

    def compose(self) -> ComposeResult:
        yield Static("", id="fleet-status")
        yield FleetTable(id="fleet", ref_tokens=self.ref_tokens)
        yield Static("", id="fleet-detail", markup=False)
        yield self.messages
        yield Footer(compact=True)

    def say(self, text: str, *, severity: Severity = "information", title: str = "",
            timeout: float | None = None) -> None:
        """A notification on the overview's message line (never a toast over the
        table)."""
        self.messages.say(text, severity=severity, title=title, timeout=timeout)

    def on_mount(self) -> None:
        self.query_one(FleetTable).focus()
        self.set_interval(1.0 / self.rate_hz, self._tick)
        self.refresh_rows()

    # -- data
    def feed_changed(self, feed: TargetFeed) -> None:
        """A probe or a state change of ``feed`` (called by the app): redraw on the next
        tick."""
        self._dirty = True

    def _tick(self) -> None:
        if self.app.screen is not self:
            return  # a dashboard is open over the overview: nothing to draw here
        now = time.monotonic()
        if self._dirty or now >= self._next_full:
            self.refresh_rows()

    def refresh_rows(self) -> None:
        """Rebuild every row (cheap: summaries are cached per probe), sort, redraw."""
        self._dirty = False
        self._next_full = time.monotonic() + 1.0  # ages tick once a second
        self.rebuilds += 1
        rows = [self._cached_row(f) for f in self.feeds]
        self.rows = sort_rows(rows, self.sort_key, self.reverse)
        table = self.query_one(FleetTable)
        table.sort_key, table.reverse = self.sort_key, self.reverse
        table.set_rows(self.rows)
        self._update_status()
        self._update_detail()

    def _cached_row(self, feed: TargetFeed) -> FleetRow:
        key = (feed.version, int(feed.clock()), self.scope)
        got = self._cache.get(feed.index)
        if got is not None and got[:3] == key:
            return got[3]
        row = self._row(feed)
        self._cache[feed.index] = (*key, row)
        return row

    def _row(self, feed: TargetFeed) -> FleetRow:
        cfg = feed.config
        snap = feed.telemetry()
        summary = feed.summary(which=self.scope)
        return fleet_row(
            feed.index, cfg.label, feed.state, summary, feed.recent, now=feed.clock(),
            detail=feed.state_detail, last_probe_at=feed.last_probe_at,
            spark=[v for _, v in feed.spark.points], baseline_tok_s=cfg.baseline_tok_s,
            baseline_source=cfg.baseline_source, ref_tokens=self.ref_tokens,
            results=_last(feed.results, 20), gpu=gpu_cell(snap), in_flight_s=feed.in_flight_s,
            hang_after_s=cfg.hang_after_s, interval_s=cfg.interval_s,
            baseline_roofline=cfg.baseline_roofline)

    # -- text
    def _update_status(self) -> None:
        counts: dict[str, int] = {}
        for r in self.rows:
            word = ("down" if r.health.word == "down" else "warn" if r.health.unhealthy
                    else "wait" if r.tok_s is None and r.state in ("waiting", "connecting")
                    else "ok")
            counts[word] = counts.get(word, 0) + 1
        parts = [f"[b]{len(self.rows)} targets[/b]"]
        for word, style in (("ok", "$success"), ("warn", "$warning"), ("down", "$error"),
                            ("wait", "$foreground 60%")):
            if counts.get(word):
                parts.append(f"[{style}]{counts[word]} {word}[/]")
        if self.load is not None:  # the monitor's own load, always in sight
            parts.append(f"load {_escape(self.load.short())}")
        sort = ("worst first" if self.sort_key == "worst" and not self.reverse
                else f"by {self.sort_key}" + (" ▲" if self.reverse else ""))
        parts.append(f"{'window' if self.scope == 'window' else 'all-time'} fit, {sort}")
        text = "  ".join(parts)
        if text != self._status_text:
            self._status_text = text
            self.query_one("#fleet-status", Static).update(text)

    def _update_detail(self) -> None:
        table = self.query_one(FleetTable)
        row = table.current()
        text = self.detail_text(row) if row is not None else "no targets"
        if text != self._detail_text:
            self._detail_text = text
            self.query_one("#fleet-detail", Static).update(text)

    def detail_text(self, row: FleetRow) -> str:
        """The pane under the table: the target, its rules, verdict and advice."""
        feed = self.feeds[row.index]
        cfg = feed.config
        head = [clean(row.label)]
        if cfg.url and cfg.url != cfg.label:
            head.append(clean(cfg.url))
        kind = " · ".join(x for x in (row.kind, _model(row.model)) if x)
        if kind:
            head.append(kind)
        lines = ["  ".join(head), f"GPU: {clean(cfg.gpu_source or MISSING)}"]
        if feed.state in ("retrying", "failed", "connecting") and feed.state_detail:
            lines.append(f"{feed.state}: {clean(feed.state_detail)}")
        elif feed.state == "waiting":
            lines.append("waiting for its staggered start")
        for f in row.health.findings:
            mark = {"critical": "✖", "warning": "▲", "info": "·"}[f.severity]
            lines.append(f"{mark} {f.rule}: {clean(f.text)}")
        for advice in feed.advice(feed.summary(which=self.scope)):
            lines.append(f"advice: {clean(advice.text)}")
        if row.tok_s is not None:
            lines.append(f"prefill {si(row.tok_s)} tok/s · TTFT@{row.ref_tokens} "
                         f"{short_time(row.ttft_ref_s)} · verdict: {clean(row.verdict_text)}")
        return "\n".join(lines)

    # -- actions and messages
    def on_fleet_table_selected(self, message: FleetTable.Selected) -> None:
        self.app.open_dashboard(message.index)

    def on_fleet_table_highlighted(self, message: FleetTable.Highlighted) -> None:
        self._update_detail()

    def on_fleet_table_sort_by(self, message: FleetTable.SortBy) -> None:
        if message.key == self.sort_key:
            self.reverse = not self.reverse
        else:
            self.sort_key, self.reverse = message.key, False
        self.refresh_rows()

    def on_screen_resume(self) -> None:
        self.refresh_rows()

    def action_open(self) -> None:
        self.query_one(FleetTable).action_select_cursor()

    def action_sort(self) -> None:
        i = SORT_KEYS.index(self.sort_key)
        self.sort_key, self.reverse = SORT_KEYS[(i + 1) % len(SORT_KEYS)], False
        self.refresh_rows()

    def action_reverse(self) -> None:
        self.reverse = not self.reverse
        self.refresh_rows()

    def action_toggle_window(self) -> None:
        self.scope = "all" if self.scope == "window" else "window"
        self.refresh_rows()

    def action_help(self) -> None:
        if not isinstance(self.app.screen, HelpScreen):
            self.app.push_screen(HelpScreen([f"load: {self.load.line()}"] if self.load
                                            else [], text=FLEET_HELP_TEXT))

    def flush(self) -> None:
        self.refresh_rows()


def _last(results, n: int) -> tuple:
    """The last ``n`` of a deque without copying it whole."""
    return tuple(itertools.islice(reversed(results), n))[::-1]


def gpu_cell(snap) -> str | None:
    """The GPU column: utilization and power of the target's GPU source ("no GPU src"
    when it has none)."""
    if snap is None:
        return None
    devs = [d for d in snap.devices if d.util_pct is not None or d.power_w is not None]
    if snap.kind == "none" or not snap.devices:
        return "no GPU src" if (snap.reason or "").startswith("no GPU source") else None
    if not devs:
        return MISSING
    if snap.kind == "cpu":
        u = devs[0].util_pct
        return f"CPU {u:.0f}%" if u is not None else "CPU"
    utils = [d.util_pct for d in devs if d.util_pct is not None]
    power = [d.power_w for d in devs if d.power_w is not None]
    text = f"{sum(utils) / len(utils):.0f}%" if utils else MISSING
    if power:
        text += f" {sum(power):.0f}W"
    return text + (f" ×{len(devs)}" if len(devs) > 1 else "")


def _model(name: str | None) -> str | None:
    if not name:
        return None
    base = clean(name).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    return base[:-5] if base.lower().endswith(".gguf") else base


def _escape(text: str) -> str:
    return clean(text).replace("[", r"\[")
