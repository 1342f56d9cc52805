"""Probe log: the last probes in a DataTable (time, tokens, TTFT, energy, status).

Selecting a row (enter / click) posts ``ProbeLog.Selected`` with the probe so the app
can show its full message.  Bounded: the oldest rows are removed beyond ``max_rows``.
"""

from __future__ import annotations

import time

from textual.message import Message
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

    def __init__(self, *, max_rows: int = 200, **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kw)
        self.max_rows = max_rows
        self._results: dict[str, ProbeResult] = {}
        self._order: list[str] = []
        self.follow = True

    def on_mount(self) -> None:
        self.add_column("time", key="time")
        self.add_column("tokens", key="tokens")
        self.add_column("TTFT ms", key="ttft")
        self.add_column("J", key="energy")
        self.add_column("status", key="status")

    def add_result(self, r: ProbeResult) -> None:
        # follow new rows like a log unless the user moved the cursor up to read one
        self.follow = not self.has_focus or self.cursor_row >= self.row_count - 2
        key = f"p{r.seq}-{len(self._order)}-{id(r)}"
        when = time.strftime("%H:%M:%S", time.localtime(r.started_at)) if r.started_at else "—"
        tokens = r.tokens if r.tokens is not None else r.requested_tokens
        ttft = f"{r.ttft_s * 1e3:8.1f}" if (r.ok and r.ttft_s is not None) else "       —"
        energy = f"{r.energy_j:6.1f}" if r.energy_j is not None else "     —"
        self.add_row(when, f"{tokens:>6}", ttft, energy, probe_status(r), key=key)
        self._results[key] = r
        self._order.append(key)
        while len(self._order) > self.max_rows:
            old = self._order.pop(0)
            self._results.pop(old, None)
            self.remove_row(old)
        if self.follow:
            self.scroll_end(animate=False, immediate=False)

    def clear_log(self) -> None:
        self.clear()
        self._results.clear()
        self._order.clear()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        r = self._results.get(event.row_key.value)
        if r is not None:
            self.post_message(self.Selected(r))
