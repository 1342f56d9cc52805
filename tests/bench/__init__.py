"""prefilltui's own benchmarks: fidelity, overhead and footprint in one table.

    python -m tests.bench [--quick] [--json] [--soak-seconds S] [--only NAME,...]
    make bench ARGS='--quick'

Every figure is a ratio or a difference measured within one run on this machine
(absolute times on a shared machine mean little across runs).  Each bench module
exposes ``run(opts) -> list[Row]``; ``__main__`` runs them in order and prints one
aligned table (metric, value, target, pass/fail).  See docs/performance.md.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Row:
    """One line of the table.  ``ok`` is True/False against the target, None when the
    figure has no target (information) or was skipped (``value`` then says why)."""

    section: str
    metric: str
    value: str
    target: str = ""
    ok: bool | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return {True: "pass", False: "FAIL", None: "-"}[self.ok]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdict"] = self.verdict
        return d


def skipped(section: str, metric: str, why: str, target: str = "") -> Row:
    return Row(section, metric, f"skipped: {why}", target, None)


def quantile(xs: list[float], q: float) -> float:
    """Linear-interpolated quantile (q in [0, 1]).  Raises ValueError on empty input."""
    if not xs:
        raise ValueError("no data")
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def ms(seconds: float, digits: int = 2) -> str:
    """Seconds -> "x.xx ms" (ms only on screen)."""
    return f"{seconds * 1e3:.{digits}f} ms"


def format_table(rows: list[Row]) -> str:
    """One aligned text table, a blank line between sections."""
    head = ("metric", "value", "target", "result")
    cells = [(r.metric, r.value, r.target, r.verdict) for r in rows]
    w = [max(len(c[i]) for c in cells + [head]) for i in range(4)]
    line = lambda c: "  ".join(c[i].ljust(w[i]) for i in range(4)).rstrip()  # noqa: E731
    out = [line(head), "  ".join("-" * x for x in w)]
    prev = None
    for r, c in zip(rows, cells):
        if prev is not None and r.section != prev:
            out.append("")
        prev = r.section
        out.append(line(c))
    return "\n".join(out)


def print_rows(rows: list[Row]) -> int:
    """Print a bench's table, then its first row's data (the figures behind it); 0, the
    bench's exit status."""
    print(format_table(rows))
    print(rows[0].data)
    return 0
