"""The dashboard's objective line: the worst TTFT objective in one row (``--slo``).

"SLO 2 s p99: prompts ≤ 5.9k tokens meet it now, est. (95 % 5.6k–6.2k); users' p99
1.4 s, 99.2 % within, 43 % of the budget left over 25 min", in the longest form that
fits the width (``render.slo.slo_line_forms``), "+N" when more objectives are set.
Hidden without an objective, so the layout without ``--slo`` is unchanged.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from prefilltui.model.sanitize import clean
from prefilltui.render.slo import slo_line_forms, worst_first


def slo_text(statuses, width: int) -> str:
    """The worst objective's line at ``width`` columns ('' without one): the longest
    form that fits with the "(+N)" of the others, else the shortest cut with '…'."""
    if not statuses:
        return ""
    ranked = worst_first(statuses)
    more = f" (+{len(ranked) - 1})" if len(ranked) > 1 else ""
    forms = [clean(f) + more for f in slo_line_forms(ranked[0])]
    fits = next((f for f in forms if len(f) <= width), None)
    if fits is not None:
        return fits
    last = forms[-1]
    return last[: max(width - 1, 0)] + "…"


class SloRow(Static):
    """One row: the worst objective (``slo_text``); ``show(statuses)`` redraws only
    when the text changed."""

    DEFAULT_CSS = "SloRow { height: 1; display: none; } SloRow.-on { display: block; }"

    def __init__(self, **kw) -> None:
        super().__init__("", **kw)
        self.text = ""

    def show(self, statuses) -> None:
        width = max(self.size.width - 2, 20) if self.size.width else 78
        text = slo_text(statuses, width)
        self.set_class(bool(text), "-on")
        burning = any(st.burn is not None and st.burn.burning for st in statuses)
        self.set_class(burning, "-burning")
        if text != self.text:
            self.text = text
            self.update(Text(text), layout=False)
