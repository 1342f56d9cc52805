"""The matrix: every incident x world (the exporter at 2 s and 5 s, the TUI), each
world's two observers (spans, /metrics only), scored; and its markdown table.

``run_world(incident, observer, interval_s)`` is cached per process, so the unit
test's rows and the table share one run of each world.
"""

from __future__ import annotations

import functools

from tests.incidents.scenarios import INCIDENTS, SCORED_S, World
from tests.incidents.score import Score, score

#: (observer, interval s or None for the TUI's own pacing)
WORLDS: tuple[tuple[str, float | None], ...] = (("exporter", 2.0), ("exporter", 5.0),
                                                ("tui", None))
SOURCES = ("traces", "metrics")


def column(observer: str, source: str, interval_s: float | None) -> str:
    """A column's name: "exporter/traces/2s", "tui/metrics"."""
    return f"{observer}/{source}" + (f"/{interval_s:g}s" if interval_s else "")


COLUMNS = tuple(column(o, s, i) for o, i in WORLDS for s in SOURCES)


@functools.lru_cache(maxsize=None)
def run_world(incident: str, observer: str, interval_s: float | None) -> tuple[dict, dict]:
    """One world run: ({column: Score}, truth)."""
    inc = INCIDENTS[incident]()
    w = World(inc, observer, interval_s=interval_s or 2.0)
    observers = w.run()
    truth = inc.truth(w)
    end = inc.duration_s if inc.cause == "none" else inc.onset_s + SCORED_S
    out = {}
    for o in observers:
        col = column(observer, o.source, interval_s)
        out[col] = score(incident, col, inc.cause, o.judgements, inc.onset_s, end, truth)
    return out, truth


def cell(incident: str, col: str) -> Score:
    """The score of one row and column (its world run once per process)."""
    for o, i in WORLDS:
        for s in SOURCES:
            if column(o, s, i) == col:
                return run_world(incident, o, i)[0][col]
    raise KeyError(col)


def truth_text(incident: str) -> str:
    _, truth = run_world(incident, *WORLDS[0])
    parts = []
    for k, v in truth.items():
        if v is None:
            continue
        if k.endswith("_s"):
            parts.append(f"{k} {v * 1000:,.0f} ms")
        elif k.startswith("hit") or k.endswith("share"):
            parts.append(f"{k} {v * 100:.0f}%")
        else:
            parts.append(f"{k} {v:,.4g}")
    return "; ".join(parts) or "-"


def table(incidents: tuple[str, ...] = tuple(INCIDENTS), columns: tuple[str, ...] = COLUMNS) -> str:
    """The markdown table: rows incidents, columns observer/source/interval."""
    head = "| incident | truth | " + " | ".join(columns) + " |"
    rule = "|---|---|" + "---|" * len(columns)
    rows = [head, rule]
    for name in incidents:
        inc = INCIDENTS[name]()
        cells = []
        for col in columns:
            s = cell(name, col)
            cells.append(("✔ " if s.passed else "✘ ") + s.cell())
        rows.append(f"| {inc.name} (`{inc.cause}`) | {truth_text(name)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)
