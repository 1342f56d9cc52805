"""Stats panel: the fit, roofline comparison and the server/probe facts, as text.

Renders a ``StatsView`` (plain data built by the app in ``tui/viewmodel.py``); no
fitting or I/O here.  Seconds are converted to ms / µs for the screen only.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from prefilltui.model.intercept import physical_ci, pin_bound_s
from prefilltui.model.roofline import MFU_LABEL
from prefilltui.model.sanitize import clean
from prefilltui.model.units import MISSING
from prefilltui.tui.viewmodel import StatsView


def si(v: float | None, digits: int = 1) -> str:
    """12345 -> '12.3k'; None -> MISSING ("N/A")."""
    if v is None:
        return MISSING
    a = abs(v)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:.{digits}f}{suffix}"
    return f"{v:.{digits if a < 100 else 0}f}"


def _minus(text: str) -> str:
    """A leading '-' as a typographic minus sign (U+2212)."""
    return "\u2212" + text[1:] if text.startswith("-") else text


def _ms(v: float | None) -> str:
    """Seconds as ms (no unit): 0.0123 -> '12.3', 1.234 -> '1,234'."""
    if v is None:
        return MISSING
    ms = v * 1e3
    return _minus(f"{ms:.1f}" if abs(ms) < 100 else f"{ms:,.0f}")


def _us(v: float | None) -> str:
    """Seconds per token as µs (no unit): 44.7e-6 -> '44.7', 6.775e-3 -> '6,775'."""
    if v is None:
        return MISSING
    us = v * 1e6
    return _minus(f"{us:,.0f}" if abs(us) >= 100 else f"{us:#.3g}")


def _interval(ci: tuple[float, float], fmt, unit: str) -> str:
    """'95% lo–hi unit'; ' to ' instead of the dash when a bound is negative."""
    lo, hi = ci
    sep = "–" if lo >= 0 and hi >= 0 else " to "
    return f"{fmt(lo)}{sep}{fmt(hi)} {unit}"


#: longest model name shown: fits the narrow (80-column) panel's 27 text columns
MODEL_CHARS = 26


def short_model(name: str | None, width: int = MODEL_CHARS) -> str | None:
    """Model id as shown: file name without directory and ``.gguf``, ellipsised to
    ``width`` characters ('/m/SmolLM2-135M-Instruct.Q4_1.gguf' ->
    'SmolLM2-135M-Instruct.Q4_1')."""
    if not name:
        return None
    base = name.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    if base.lower().endswith(".gguf"):
        base = base[:-5]
    return base if len(base) <= width else base[: width - 1] + "…"


def stats_text(v: StatsView) -> Text:
    """The panel's content (one fact per line, label then value)."""
    t = Text(no_wrap=False, overflow="fold")

    def line(label: str, value: str, style: str = "") -> None:
        t.append(f"{label:<10}", style="dim")
        t.append(value + "\n", style=style)

    def interval(ci, fmt, unit: str) -> None:
        if ci and ci[0] is not None and ci[1] is not None:
            line("  95%", _interval(ci, fmt, unit), "dim")

    if v.slope_s is None:
        t.append("fit: needs ≥3 probes at\n  different lengths\n", style="italic")
    else:
        _intercept_lines(v, line, interval)
        line("slope", f"{_us(v.slope_s)} µs/tok")
        interval(v.slope_ci, _us, "µs/tok")
        line("prefill", f"{si(v.prefill_tokens_per_s)} tok/s", "bold")
        interval(v.prefill_tokens_per_s_ci, si, "tok/s")
        if v.unresolved:
            t.append("too noisy yet: slope 95%\n  includes 0\n", style="bold")
        if v.r2 is not None:
            line("R²", f"{v.r2:.3f}")
        if v.quadratic_note:
            t.append(v.quadratic_note + "\n", style="dim")
    if v.pct_all is not None:
        line("TTFT ms", "p50/p90/p99", "dim")
        n, *q = v.pct_all
        line(f" all {n}", "/".join(_q(x) for x in q))
        if v.pct_len is not None:
            tok, n, *q = v.pct_len
            line(f" {tok} ×{n}", "/".join(_q(x) for x in q))
    for warning in v.warnings:
        t.append(warning + "\n", style="bold")
    if v.achieved_tflops is not None:
        # always TFLOP/s (as the roofline notes and the text summary)
        est = " est." if v.estimate else ""
        line("achieved", f"{v.achieved_tflops:.3g} TFLOP/s{est}")
    if v.mfu is not None:
        # the count behind it named (model/flops.py): MFU_LABEL, on its own line to fit 27 columns
        t.append(MFU_LABEL + "\n", style="dim")
        line("", f"{v.mfu * 100:.1f} %" + (" est." if v.estimate else ""), "bold")
    if v.verdict:
        line("verdict", v.verdict, "bold")
    facts = " · ".join(x for x in (v.server_kind, v.device) if x)
    if facts:
        t.append(facts + "\n", style="dim")
    model = short_model(v.model)
    if model:
        t.append(model + "\n", style="dim")
    if v.requested is not None:
        counted = MISSING if v.counted is None else str(v.counted)
        counted += " est." if v.counted is not None and v.counted_estimated else ""
        line("tokens", f"{v.requested} req → {counted}")
    if v.overhead_s is not None or v.queue_s is not None or v.prefill_s is not None:
        def ms(x: float | None) -> str:
            return MISSING if x is None else f"{_ms(x)} ms"

        line("overhead", ms(v.overhead_s))
        line("queue", ms(v.queue_s) + (" (est.)" if v.queue_estimated else ""))
        line("prefill", ms(v.prefill_s))
    if v.cache_counted and not v.cached_probes:
        # a miss proven by the server's own count (usage or /metrics), not by TTFT
        line("cache", f"0 hits, server-counted on {v.cache_counted}/{v.ok_probes}")
    if v.cached_probes:
        t.append(f"⚠ cached tokens in {v.cached_probes} probe(s)"
                 + (f", last {v.last_cached_tokens}" if v.last_cached_tokens else "")
                 + "\n", style="bold")
    for note in v.notes:
        t.append(clean(note, multiline=True) + "\n", style="italic")
    t.rstrip()
    return t


def _q(v: float) -> str:
    """A percentile in ms, no unit: 34.1, 612, 6,120."""
    ms = v * 1e3
    return f"{ms:.1f}" if ms < 100 else f"{ms:,.0f}"


def _intercept_lines(v: StatsView, line, interval) -> None:
    """The fixed cost as the fit allows: a value when pinned (never below 0: a
    negative one reads 0 with the fit's value beside it), else "not pinned" with its
    interval; the server-side fixed cost beneath when the server reports times."""
    ci = v.intercept_ci
    pinned = v.fixed_pinned
    if pinned is None and v.intercept_s is not None:
        pinned = bool(ci and ci[0] is not None and ci[1] is not None
                      and (ci[1] - ci[0]) / 2 <= pin_bound_s(v.intercept_s))
    a = v.intercept_s
    ci = physical_ci(ci)  # shown cut at 0: a fixed cost is never negative
    if not pinned:
        line("intercept", "not pinned", "bold")
        interval(ci, _ms, "ms")
        line("", "add short prompts/repeats", "italic")  # fits the 27-column panel
    elif a is not None and a < 0:
        line("intercept", "0.0 ms")
        interval(ci, _ms, "ms")
        line("", f"≈0: fit {_ms(a)} ms", "italic")
    else:
        line("intercept", f"{_ms(a)} ms")
        interval(ci, _ms, "ms")
        if ci and ci[0] is not None and ci[1] is not None and ci[0] <= 0:
            line("", "≈0: within noise", "italic")
    if v.server_fixed_s is not None:
        line("  server", f"{_ms(v.server_fixed_s)} ms")


def stats_title(v: StatsView) -> str:
    """Border title: which fit, over what, from how many probes."""
    which = "window" if v.which == "window" else "all"
    return f"{v.method} fit · {which} · n {v.n}"


class StatsPanel(Static):
    """Shows a StatsView; call ``show(view)``."""

    DEFAULT_CSS = "StatsPanel { height: auto; }"
    _spans: list = []

    def show(self, view: StatsView) -> None:
        """Update; an unchanged text is not redrawn (no layout, no terminal bytes), and
        the screen is laid out again only when the text needs another number of lines
        than the panel has now (its height is auto; new figures on the same lines only
        need a repaint)."""
        self.view = view
        text = stats_text(view)
        if text.plain != getattr(self, "_plain", None) or text.spans != self._spans:
            self._plain, self._spans = text.plain, list(text.spans)
            self.update(text, layout=False)
            rows = self._line_count()
            if rows is None or rows != self.content_size.height:
                self.refresh(layout=True)

    def _line_count(self) -> int | None:
        """Lines the current text takes at the current width, measured the way the
        layout measures it; None before the first layout."""
        width = self.content_size.width if self.is_mounted else 0
        if width <= 0:
            return None
        self.clear_cached_dimensions()
        return self.get_content_height(self.content_size, self.content_size, width)
