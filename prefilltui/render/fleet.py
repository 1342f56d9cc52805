"""The fleet overview's columns and cells, as text: one home for the TUI's overview
table and ``prefilltui status``'s text table.

``COLUMNS`` lists every column with its width and priority; ``layout(width)`` picks the
columns that fit a terminal width, most important first (80 columns: target, status,
prefill ± interval, fixed cost, MFU, verdict, TTFT at the reference length, probes /
failures, last probe age; wider: the trend, queue, cache proof, GPU and model);
``cell(row, key)`` is one cell's text and a style name ("ok", "warn", "bad", "dim" or
"") that the TUI maps to theme colours.  Milliseconds only here, on screen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

from prefilltui.model.fleet import FleetRow
from prefilltui.model.sanitize import clean
from prefilltui.model.units import MISSING, ms

Style = Literal["ok", "warn", "bad", "dim", "bold", ""]
SPARK = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True, slots=True)
class Column:
    """key; title; width (characters); priority (0: always shown, higher: dropped first
    on a narrow terminal); align "<" or ">"; sort: the ``model.fleet.rows.SORT_KEYS`` key a
    click on its title orders by (None: not sortable)."""

    key: str
    title: str
    width: int
    priority: int
    align: str = "<"
    sort: str | None = None


COLUMNS: tuple[Column, ...] = (
    Column("target", "target", 12, 0, "<", "name"),
    Column("status", "status", 6, 0, "<", None),
    Column("prefill", "prefill tok/s", 13, 0, ">", "prefill"),
    Column("fixed", "fixed", 6, 1, ">", "fixed"),
    Column("mfu", "MFU", 5, 1, ">", "mfu"),
    Column("verdict", "verdict", 8, 0, "<", "worst"),
    Column("ttft", "TTFT@1k", 7, 1, ">", "ttft"),
    Column("probes", "probes", 7, 2, ">", "failed"),
    Column("age", "age", 4, 2, ">", "age"),
    Column("trend", "trend", 10, 3, "<", None),
    Column("queue", "queue", 6, 4, ">", None),
    Column("cache", "cache", 6, 4, "<", None),
    Column("gpu", "GPU", 11, 5, "<", None),
    Column("model", "model", 16, 6, "<", None),
)
#: The target column grows to this many characters when there is room, then the model.
TARGET_MAX = 28
MODEL_MAX = 40


def layout(width: int, columns: Sequence[Column] = COLUMNS) -> list[tuple[Column, int]]:
    """The columns that fit ``width`` characters (one space between columns), in
    ``columns``' order, dropping the highest priorities first; the target column takes
    what is left, up to ``TARGET_MAX``, then the model column, up to ``MODEL_MAX``."""
    chosen = list(columns)
    for prio in sorted({c.priority for c in columns}, reverse=True):
        if _span(chosen) <= width or prio == 0:
            break
        chosen = [c for c in chosen if c.priority != prio]
    out = [(c, c.width) for c in chosen]
    spare = width - _span(chosen)
    for key, most in (("target", TARGET_MAX), ("model", MODEL_MAX)):
        for i, (c, w) in enumerate(out):
            if c.key == key and spare > 0:
                grown = min(most, w + spare)
                spare -= grown - w
                out[i] = (c, grown)
    return out


def _span(cols: Sequence[Column]) -> int:
    return sum(c.width for c in cols) + max(0, len(cols) - 1)


def ref_title(ref_tokens: int) -> str:
    """"TTFT@1k" for 1024 tokens, "TTFT@512" for 512."""
    if ref_tokens % 1024 == 0:
        return f"TTFT@{ref_tokens // 1024}k"
    if ref_tokens % 1000 == 0:
        return f"TTFT@{ref_tokens // 1000}k"
    return f"TTFT@{ref_tokens}"


def fit(text: str, width: int, align: str = "<") -> str:
    """``text`` cut (with …) or padded to ``width``."""
    if len(text) > width:
        text = text[: max(0, width - 1)] + "…" if width > 0 else ""
    return text.rjust(width) if align == ">" else text.ljust(width)


def si(v: float | None) -> str:
    """22345 -> '22.3k', 1.2e6 -> '1.20M', 950 -> '950'; None -> N/A."""
    if v is None or not math.isfinite(v):
        return MISSING
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            x = v / div
            return f"{x:.2f}{suffix}" if x < 10 else f"{x:.1f}{suffix}" if x < 100 else f"{x:.0f}{suffix}"
    return f"{v:.0f}" if abs(v) >= 10 else f"{v:.1f}"


def short_time(s: float | None) -> str:
    """0.0123 -> '12ms', 1.234 -> '1.23s', 75 -> '75.0s'; None -> N/A."""
    if s is None or not math.isfinite(s):
        return MISSING
    if s < 1:
        return ms(s, 1 if s < 0.01 else 0, unit=False) + "ms"
    return f"{s:.2f}s" if s < 10 else f"{s:.1f}s"


def age(s: float | None) -> str:
    """Seconds since: '4s', '12m', '3h', '2d'; None -> N/A."""
    if s is None:
        return MISSING
    for div, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if s >= div:
            return f"{s / div:.0f}{unit}"
    return f"{s:.0f}s"


def sparkline(values: Sequence[float], width: int) -> str:
    """The last ``width`` values as ▁..█ between their own min and max."""
    vals = [v for v in values if v is not None and math.isfinite(v)][-width:]
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    if hi - lo <= 1e-9 * max(abs(hi), 1.0):
        return SPARK[3] * len(vals)
    return "".join(SPARK[min(7, int((v - lo) / (hi - lo) * 7.999))] for v in vals)


def status(row: FleetRow) -> tuple[str, Style]:
    h = row.health
    if h.word in ("down", "hung"):
        return f"✖ {h.word}", "bad"
    if h.unhealthy:
        return "▲ warn", "warn"
    if row.state == "waiting":
        return "… wait", "dim"
    if row.state == "connecting" and not row.probes:
        return "◌ conn", "dim"
    if row.state == "paused":
        return "‖ pause", "dim"
    return "● ok", "ok"


def cell(row: FleetRow, key: str, width: int = 12) -> tuple[str, Style]:
    """One cell of ``row``: its text and style name (see the module docstring).

    Raises:
        KeyError: an unknown column key.
    """
    if key == "target":
        return clean(row.label), ""
    if key == "status":
        return status(row)
    if key == "prefill":
        if row.tok_s is None:
            return MISSING, "dim"
        hw = row.half_width_pct
        pm = "" if hw is None else (" ±∞" if hw == math.inf else f" ±{hw:.0f}%")
        return si(row.tok_s) + pm, "bold"
    if key == "fixed":
        if row.fixed_s is None:
            return ("wide" if row.tok_s is not None else MISSING), "dim"
        return short_time(row.fixed_s), ""
    if key == "mfu":
        if row.mfu is None:
            return MISSING, "dim"
        pct = row.mfu * 100
        return (f"{pct:.1f}%" if pct < 10 else f"{pct:.0f}%"), ""
    if key == "verdict":
        style: Style = {"healthy": "ok", "wrong": "bad", "below": "warn", "check": "bad",
                        "failed": "bad"}.get(row.verdict, "dim")
        return row.verdict, style
    if key == "ttft":
        return short_time(row.ttft_ref_s), ""
    if key == "probes":
        return f"{row.probes}/{row.failed}", "bad" if row.failed and row.probes == row.failed \
            else ("warn" if row.failed else "")
    if key == "age":
        return age(row.age_s), "warn" if row.age_s is not None and row.age_s > 120 else "dim"
    if key == "trend":
        return sparkline(row.spark, width), "dim"
    if key == "queue":
        if row.waiting:
            return f"{row.waiting:g} wait", "warn"
        return short_time(row.queue_s), "dim" if row.queue_s is None else ""
    if key == "cache":
        if row.cache_hits:
            return f"{row.cache_hits} hit", "warn"
        if row.ok_probes and row.cache_counted >= row.ok_probes:
            return "0 ✓", "ok"
        if row.cache_counted:
            return f"0 {row.cache_counted}/{row.ok_probes}", ""
        return ("0 ?" if row.ok_probes else MISSING), "dim"
    if key == "gpu":
        return (row.gpu or MISSING), "dim" if not row.gpu or row.gpu.startswith("no ") else ""
    if key == "model":
        return _short_model(row.model), "dim"
    raise KeyError(key)


def figures(row: FleetRow) -> str:
    """The compact cells the table cannot spell out, in words (``prefilltui status``'s
    block per target): "prefill 310 tok/s (interval not bounded yet) · probes 7 ok / 0
    failed · cache hits 0 (the server counted every miss)".  The prefill part only
    with a fit, the cache part only after an ok probe."""
    out = []
    if row.tok_s is not None and math.isfinite(row.tok_s):
        hw = row.half_width_pct
        pm = ("" if hw is None else " (interval not bounded yet)" if hw == math.inf
              else f" ± {hw:.0f} % (95 % interval)")
        out.append(f"prefill {row.tok_s:,.0f} tok/s{pm}")
    out.append(f"probes {row.probes - row.failed:,} ok / {row.failed:,} failed")
    if row.cache_hits:
        out.append(f"cache hits {row.cache_hits:,} (prefix-cache hits among the probes)")
    elif row.ok_probes:
        if row.cache_counted >= row.ok_probes:
            proof = "the server counted every miss"
        elif row.cache_counted:
            proof = f"counted by the server on {row.cache_counted} of {row.ok_probes} probes"
        else:
            proof = "not proven: the server reports no cached-token count"
        out.append(f"cache hits 0 ({proof})")
    return " · ".join(out)


def _short_model(name: str | None) -> str:
    if not name:
        return MISSING
    base = clean(name).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    return base[:-5] if base.lower().endswith(".gguf") else base


def header(cols: Sequence[tuple[Column, int]], ref_tokens: int = 1024) -> str:
    return " ".join(fit(ref_title(ref_tokens) if c.key == "ttft" else c.title, w, c.align)
                    for c, w in cols)


def row_text(row: FleetRow, cols: Sequence[tuple[Column, int]]) -> str:
    """The row as plain text (``status --format text``)."""
    return " ".join(fit(cell(row, c.key, w)[0], w, c.align) for c, w in cols)


def table(rows: Sequence[FleetRow], width: int = 100, ref_tokens: int = 1024,
          without: tuple[str, ...] = ("age", "trend")) -> list[str]:
    """The overview as plain text lines: a header, then one line per row; ``without``:
    columns left out (a one-off snapshot has no age or trend)."""
    cols = layout(width, [c for c in COLUMNS if c.key not in without])
    return [header(cols, ref_tokens)] + [row_text(r, cols) for r in rows]
