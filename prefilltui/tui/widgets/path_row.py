"""The dashboard's path line: a disaggregated target's hops in one row, "path: router
2.1 ms 3% ▸ prefill 71 ms 85% ▸ transfer 7.0 ms 8% ▸ decode 3.1 ms 4%" (the recent
probes' medians, each hop's share of their TTFT; ``render.path.hops_row``), shortened
to fit the width.  Hidden until a probe carries hops, so a single server's layout is
unchanged.
"""

from __future__ import annotations

from typing import Sequence

from rich.text import Text
from textual.widgets import Static

from prefilltui.model.path import hop_medians
from prefilltui.model.types import ProbeResult
from prefilltui.render.path import hops_row

#: The recent probes the row reads (the verdict's window).
RECENT = 20


def path_text(results: Sequence[ProbeResult], width: int) -> str:
    """The row for ``results`` at ``width`` columns ('' when no probe carries hops)."""
    recent = [r for r in list(results)[-4 * RECENT:] if r.hops is not None][-RECENT:]
    if not recent:
        return ""
    hops_s, shares = hop_medians(recent)
    if hops_s.get("ttft_s") is None:
        problem = next((r.hops.problem for r in reversed(recent) if r.hops.problem), "")
        return f"path: hops not read ({problem})"[:width]
    return "path: " + hops_row(hops_s, shares, width - len("path: "))


class PathRow(Static):
    """One row: the path's hops (``path_text``); ``show(results)`` redraws only when
    the text changed."""

    DEFAULT_CSS = "PathRow { height: 1; display: none; } PathRow.-on { display: block; }"

    def __init__(self, **kw) -> None:
        super().__init__("", **kw)
        self.text = ""

    def show(self, results: Sequence[ProbeResult]) -> None:
        width = max(self.size.width - 2, 20) if self.size.width else 78
        text = path_text(results, width)
        self.set_class(bool(text), "-on")
        if text != self.text:
            self.text = text
            self.update(Text(text), layout=False)
