"""Typed messages that carry data from worker threads into the Textual app.

Threads (the sweep runner's, export/cache-check workers) never touch widgets: they
only ``post_message`` one of these to the app (``post_message`` is thread-safe).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.message import Message

from prefilltui.model.types import ProbeResult


class ProbeDone(Message):
    """One probe finished (ok or failed); posted from the runner's thread.  ``feed``:
    the index of the target's feed in the app."""

    def __init__(self, result: ProbeResult, feed: int = 0) -> None:
        super().__init__()
        self.result = result
        self.feed = feed


class RunnerStateChanged(Message):
    """The runner's connection state changed: one of "connecting", "probing", "idle",
    "burst", "retrying", "paused", "stopped", "done", "failed", with a detail line.
    A finished burst ("burst", "done: 3 × 1,024 tokens, 2.1 s") is an event the app
    announces, so it is never merged away.  ``feed``: the index of the target's feed."""

    def __init__(self, state: str, detail: str = "", feed: int = 0) -> None:
        super().__init__()
        self.state = state
        self.detail = detail
        self.feed = feed

    @property
    def burst_done(self) -> bool:
        return self.state == "burst" and self.detail.startswith("done: ")

    def can_replace(self, message: Message) -> bool:
        # Only the newest state matters: merge a burst of state changes.  (Textual
        # drops this, the older message, for ``message``, the next one in the queue.)
        return (isinstance(message, RunnerStateChanged) and message.feed == self.feed
                and not self.burst_done)


class ExportDone(Message):
    """The export worker wrote these files (or failed with ``error``)."""

    def __init__(self, paths: list[Path], error: str | None = None) -> None:
        super().__init__()
        self.paths = paths
        self.error = error


class CacheCheckDone(Message):
    """The cache-check worker finished: ``text`` is its one-line result."""

    def __init__(self, text: str, ok: bool = True, detail: Any = None) -> None:
        super().__init__()
        self.text = text
        self.ok = ok
        self.detail = detail
