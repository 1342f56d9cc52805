"""Probe log: the last probes in a DataTable (time, tokens, TTFT, energy, status).

Selecting a row (enter / click) posts ``ProbeLog.Selected`` with the probe so the app
can show its full message.  Bounded: the oldest rows are removed beyond ``max_rows``.

Cheap per probe: the app adds the rows of each tick in one ``add_results`` call, and a
new row changes only the table's scrollable (virtual) size, never its box (its height
is fixed by CSS), so the screen is not laid out again for it: the scrollbars are
updated here and the view follows the newest row in the same frame.
"""

from __future__ import annotations

import time

from textual.geometry import Size
from textual.message import Message
from textual.reactive import Reactive
from textual.widgets import DataTable

from prefilltui.core.types import ProbeResult


def probe_status(r: ProbeResult) -> str:
    """A short status word: ok / warm-up / cache N / burst / error kind."""
    if not r.ok:
        return r.error_kind or "failed"
    if r.warmup:
        return "warm-up"
    if r.cache_hit:
        return f"cached {r.cached_tokens}"
    return "burst" if r.burst else "ok"


def probe_message(r: ProbeResult) -> str:
    """The full description shown when a row is selected."""
    when = time.strftime("%H:%M:%S", time.localtime(r.started_at)) if r.started_at else "?"
    head = f"probe #{r.seq} at {when}: {r.requested_tokens} tokens requested"
    if r.prompt_tokens is not None:
        head += f", {r.prompt_tokens} counted"
    if r.ok:
        ttft = f"{r.ttft_s * 1e3:.1f} ms" if r.ttft_s is not None else "—"
        head += f"; TTFT {ttft}"
        if r.server_prefill_s is not None:
            head += f", server prefill {r.server_prefill_s * 1e3:.1f} ms"
        if r.power_peak_w is not None:
            head += f", peak {r.power_peak_w:.0f} W"
        return head
    msg = r.error_message or "no message"
    status = f" (HTTP {r.http_status})" if r.http_status else ""
    return f"{head}; failed: {r.error_kind}{status}: {msg}"


class ProbeLog(DataTable):
    """The last ``max_rows`` probes, newest at the bottom (followed like a log
    unless the cursor was moved up)."""

    class Selected(Message):
        def __init__(self, result: ProbeResult) -> None:
            super().__init__()
            self.result = result

    #: Widget.virtual_size with layout=False: see the module docstring and
    #: ``watch_virtual_size`` (a screen layout per probe row cost ~10 ms).
    virtual_size = Reactive(Size(0, 0), layout=False)

    def __init__(self, *, max_rows: int = 200, **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kw)
        self.max_rows = max_rows
        self._results: dict[str, ProbeResult] = {}
        self._order: list[str] = []
        self.follow = True
        self._follow_pending = False
        self._added = 0  # rows ever added (unique row keys)

    def watch_virtual_size(self, old: Size, new: Size) -> None:
        """Rows were added or removed: update the scrollbars (a visibility change still
        lays the screen out, once) and follow the newest row."""
        if not self.is_mounted or not self.container_size:
            return
        scroll_update = getattr(self, "_scroll_update", None)
        if scroll_update is None:  # a Textual without it: fall back to a layout
            self.refresh(layout=True)
        else:
            scroll_update(new)
        if self._follow_pending:
            self._follow_pending = False
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)

    def on_mount(self) -> None:
        self.add_column("time", key="time")
        self.add_column("tokens", key="tokens")
        self.add_column("TTFT ms", key="ttft")
        self.add_column("J", key="energy")
        self.add_column("status", key="status")

    def add_result(self, r: ProbeResult) -> None:
        """One probe (see ``add_results``)."""
        self.add_results([r])

    def add_results(self, results: list[ProbeResult]) -> None:
        """Append rows (oldest first), drop the oldest beyond ``max_rows`` and follow
        the newest like a log unless the user moved the cursor up to read one."""
        if not results:
            return
        self.follow = not self.has_focus or self.cursor_row >= self.row_count - 2
        for r in results[-self.max_rows:]:
            key = f"p{r.seq}-{self._added}-{id(r)}"
            self._added += 1
            when = (time.strftime("%H:%M:%S", time.localtime(r.started_at))
                    if r.started_at else "—")
            tokens = r.tokens if r.tokens is not None else r.requested_tokens
            ttft = f"{r.ttft_s * 1e3:8.1f}" if (r.ok and r.ttft_s is not None) else "       —"
            energy = f"{r.energy_j:6.1f}" if r.energy_j is not None else "     —"
            self.add_row(when, f"{tokens:>6}", ttft, energy, probe_status(r), key=key)
            self._results[key] = r
            self._order.append(key)
        if len(self._order) > self.max_rows:
            drop = len(self._order) - self.max_rows
            for old in self._order[:drop]:
                self._results.pop(old, None)
                self.remove_row(old)
            del self._order[:drop]
        # the virtual size changes on the table's next idle (watch_virtual_size scrolls
        # then); when it does not (the log is full) scroll now if scrolled away
        self._follow_pending = self.follow
        if self.follow and self.scroll_y < self.max_scroll_y:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)

    def clear_log(self) -> None:
        self.clear()
        self._results.clear()
        self._order.clear()
        self._follow_pending = False

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        r = self._results.get(event.row_key.value)
        if r is not None:
            self.post_message(self.Selected(r))
