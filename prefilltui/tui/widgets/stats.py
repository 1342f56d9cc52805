"""The fit's panels: the headline (the figures always in view) and the details (the
rest of the fit, the roofline comparison and the server/probe facts), as text.

Renders a ``StatsView`` (plain data built by the app in ``tui/viewmodel.py``); no
fitting or I/O here.  Seconds are converted to ms / µs for the screen only.
"""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

from prefilltui.model.fit import TOO_NOISY, physical_ci, pin_bound_s
from prefilltui.model.roofline import MFU_LABEL
from prefilltui.model.sanitize import clean
from prefilltui.model.units import MISSING, flops, ms_short
from prefilltui.tui.textfit import unit_chunks, wrap_units
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
    return _minus(ms_short(v))


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


#: Lines the headline takes at most (``headline_text``): it fits the side panel of an
#: 80x24 terminal (9 rows, less its border) with no scrolling.
HEADLINE_LINES = 7


def stats_text(v: StatsView) -> Text:
    """The headline and the details in one text (``headline_text`` + ``detail_text``)."""
    t = headline_text(v)
    details = detail_text(v)
    if details.plain:
        t.append("\n")
        t.append_text(details)
    return t


#: The label column of a "label  value" line.
LABEL_WIDTH = 10


def _label_lines(label: str, value: str, width: int | None,
                 wrap: bool) -> list[tuple[str, str]]:
    """A "label  value" fact as (label part, value part) per screen line: the value in
    the 10-column value column; with a ``width`` it is too long for, after its label and
    one space ("achieved 0.0415 TFLOP/s est."); with ``wrap`` and too long even so, on
    lines of its own under the value column, never parting a number from its unit
    (``textfit.wrap_units``: "95%     −6,212 to" / "13,285 µs/tok" beneath)."""
    if width is None or LABEL_WIDTH + len(value) <= width:
        return [(f"{label:<{LABEL_WIDTH}}", value)]
    if not label or len(label) + 1 + len(value) <= width or not wrap:
        return [(f"{label} " if label else " " * LABEL_WIDTH, value)]
    indent = LABEL_WIDTH if len(label) < LABEL_WIDTH else len(label) + 1
    if width - indent < max(len(c) for c in unit_chunks(value)):
        # the value column too narrow for its longest piece: the label alone, the
        # value beneath it, indented
        return [(label, "")] + [("  ", part) for part in wrap_units(value, width - 2)]
    return [(f"{label:<{indent}}" if i == 0 else " " * indent, part)
            for i, part in enumerate(wrap_units(value, width - indent))]


def _liner(t: Text, width: int | None = None, *, wrap: bool = False):
    """line(label, value) and interval(ci, fmt, unit) appending to ``t``, laid out by
    ``_label_lines`` at ``width`` (None: one line each, however long)."""
    def line(label: str, value: str, style: str = "") -> None:
        for head, body in _label_lines(label, value, width, wrap):
            t.append(head, style="dim")
            t.append(body + "\n", style=style)

    def interval(ci, fmt, unit: str) -> None:
        if ci and ci[0] is not None and ci[1] is not None:
            line("  95%", _interval(ci, fmt, unit), "dim")

    return line, interval


def _paragrapher(t: Text, width: int | None):
    """para(text, style) appending ``text`` to ``t``, each of its lines wrapped at
    ``width`` (its indentation kept) without parting a number from its unit; None:
    as it is (the panel wraps it)."""
    def para(text: str, style: str = "") -> None:
        for raw in text.split("\n"):
            if width is None:
                t.append(raw + "\n", style=style)
                continue
            body = raw.lstrip(" ")
            lead = raw[:len(raw) - len(body)]
            for part in wrap_units(body, width - len(lead)):
                t.append(lead + part + "\n", style=style)

    return para


#: Text columns of the narrow (80-column) side panel: 32 less the border and padding.
HEADLINE_WIDTH = 28

#: Width of a verdict word that fits after the 10-column label in the narrow panel.
_VERDICT_BESIDE = 18


def headline_text(v: StatsView, width: int = HEADLINE_WIDTH) -> Text:
    """The figures always in view (at most ``HEADLINE_LINES`` lines, each one line:
    cut with '…' rather than wrapped): prefill throughput with its 95 % interval, the
    fixed cost (or "not pinned") with its interval, MFU or the achieved FLOP/s (or
    what they need), the roofline verdict and the "why TTFT" line, in the longest of
    its forms that fits ``width`` columns (``StatsView.why_forms``; the details show it
    whole)."""
    t = Text(no_wrap=True, overflow="ellipsis")
    line, interval = _liner(t, HEADLINE_WIDTH)
    if v.slope_s is None:
        t.append("fit: needs ≥3 probes at\n  different lengths\n", style="italic")
    else:
        if v.unresolved:  # 1/slope is no throughput yet: no number (fit.throughput_text)
            line("prefill", TOO_NOISY, "bold")
            line("  95%", "slope includes 0", "dim")
        else:
            line("prefill", f"{si(v.prefill_tokens_per_s)} tok/s", "bold")
            interval(v.prefill_tokens_per_s_ci, si, "tok/s")
        _fixed_cost(v, line, interval)
    if v.mfu is not None:
        line("MFU", f"{v.mfu * 100:.1f} %" + (" est." if v.estimate else ""), "bold")
    elif v.achieved_tflops is not None:
        # one spelling as the details, the text summary and the verdict (units.flops)
        line("achieved", flops(v.achieved_tflops * 1e12) + (" est." if v.estimate else ""))
    elif v.flops_hint:
        t.append(v.flops_hint + "\n", style="italic")
    if v.verdict:
        if len(v.verdict) <= _VERDICT_BESIDE:
            line("verdict", v.verdict, "bold")
        else:  # "MFU needs --peak-tflops": its own line
            t.append(v.verdict + "\n", style="bold")
    if v.why:
        forms = [clean(f) for f in v.why_forms] or [clean(v.why)]
        why = next((f for f in forms if len(f) <= width), forms[-1])
        t.append(f"{why}\n", style="italic")
    t.rstrip()
    return t


def detail_text(v: StatsView, width: int | None = None) -> Text:
    """Everything else, one fact per line: the slope, R², the fixed cost's notes, TTFT
    percentiles, warnings, achieved FLOP/s and the MFU's count, the verdict's sentence,
    the server, model and tokens, the TTFT breakdown, the cache, the notes (under load;
    why TTFT in full).  ``width``: the panel's text columns, each fact wrapped to them
    here, a number never parted from its unit (None: the panel wraps at words)."""
    t = Text(no_wrap=False, overflow="fold")
    line, interval = _liner(t, width, wrap=True)
    para = _paragrapher(t, width)
    if v.fit_counts:  # what the title's "n 14 of 16 ok" leaves out, and why
        para(v.fit_counts, "dim")
    if v.slope_s is not None:
        line("slope", f"{_us(v.slope_s)} µs/tok")
        interval(v.slope_ci, _us, "µs/tok")
        if v.unresolved:
            para("too noisy yet: slope 95%\n  includes 0", "bold")
        if v.r2 is not None:
            line("R²", f"{v.r2:.3f}")
        if v.quadratic_note:
            para(v.quadratic_note, "dim")
        _fixed_cost_notes(v, line)
    if v.pct_all is not None:
        line("TTFT ms", "p50/p90/p99", "dim")
        n, *q = v.pct_all
        line(f" all {n}", "/".join(_q(x) for x in q))
        if v.pct_len is not None:
            tok, n, *q = v.pct_len
            line(f" {tok} ×{n}", "/".join(_q(x) for x in q))
    for warning in v.warnings:
        para(warning, "bold")
    if v.mfu is not None:
        if v.achieved_tflops is not None:
            est = " est." if v.estimate else ""
            line("achieved", f"{flops(v.achieved_tflops * 1e12)}{est}")
        # the count behind the headline's MFU named (model/roofline/flops.py)
        para(MFU_LABEL, "dim")
    if v.flops_from and v.achieved_tflops is not None:
        para(v.flops_from, "dim")
    facts = " · ".join(x for x in (v.server_kind, v.device) if x)
    if facts:
        para(facts, "dim")
    model = short_model(v.model)
    if model:
        para(model, "dim")
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
        para(f"⚠ cached tokens in {v.cached_probes} probe(s)"
             + (f", last {v.last_cached_tokens}" if v.last_cached_tokens else ""), "bold")
    for note in v.notes:
        para(clean(note, multiline=True), "italic")
    if v.why:
        para(clean(v.why, multiline=True), "italic")
    t.rstrip()
    return t


def _q(v: float) -> str:
    """A percentile in ms, no unit: 34.1, 612, 6,120."""
    return ms_short(v)


def _pinned(v: StatsView) -> bool:
    """Whether the fixed cost is pinned (``core.intercept``; judged from its interval
    when the summary did not say)."""
    ci = v.intercept_ci
    if v.fixed_pinned is not None:
        return v.fixed_pinned
    return bool(v.intercept_s is not None and ci and ci[0] is not None
                and ci[1] is not None and (ci[1] - ci[0]) / 2 <= pin_bound_s(v.intercept_s))


def _fixed_cost(v: StatsView, line, interval) -> None:
    """The fixed cost as the fit allows: a value when pinned (never below 0: a
    negative one reads 0), else "not pinned"; its interval (cut at 0) beneath."""
    a = v.intercept_s
    ci = physical_ci(v.intercept_ci)  # shown cut at 0: a fixed cost is never negative
    if not _pinned(v):
        line("intercept", "not pinned", "bold")
    elif a is not None and a < 0:
        line("intercept", "0.0 ms")
    else:
        line("intercept", f"{_ms(a)} ms")
    interval(ci, _ms, "ms")


def _fixed_cost_notes(v: StatsView, line) -> None:
    """What the headline's fixed cost leaves out: what would pin it, the fit's own
    negative value, "within noise", the server-side fixed cost."""
    a = v.intercept_s
    ci = physical_ci(v.intercept_ci)
    if not _pinned(v):
        line("intercept", "add short prompts/repeats", "italic")  # fits the 27-column panel
    elif a is not None and a < 0:
        line("intercept", f"≈0: fit {_ms(a)} ms", "italic")
    elif ci and ci[0] is not None and ci[1] is not None and ci[0] <= 0:
        line("intercept", "≈0: within noise", "italic")
    if v.server_fixed_s is not None:
        line("intercept", f"server {_ms(v.server_fixed_s)} ms")


def stats_title(v: StatsView, width: int | None = None) -> str:
    """Border title: which fit, over what, from how many of the ok probes ("robust fit ·
    all · n 36 of 45 ok": the status line counts 45 ok, and warm-ups, cache hits and
    probes under load are left out of the fit; the details say which, ``fit_counts``).
    The longest form that fits ``width`` columns (None: the longest): without the
    scope (the status line names it), then "fit n 36 of 45 ok"."""
    which = "window" if v.which == "window" else "all"
    n = f"n {v.n:,} of {v.ok_probes:,} ok"
    forms = (f"{v.method} fit · {which} · {n}", f"{v.method} fit · {n}", f"fit {n}")
    return next((f for f in forms if width is None or len(f) <= width), forms[-1])


class _TextPanel(Static):
    """A panel of text from a StatsView; ``show(view)`` redraws only when the text
    changed, and lays the screen out again only when it needs another number of lines
    than it has now (its height is auto; new figures on the same lines only need a
    repaint)."""

    DEFAULT_CSS = "_TextPanel { height: auto; }"
    _spans: list = []
    _plain: str | None = None
    view: StatsView | None = None

    def text_of(self, view: StatsView) -> Text:  # pragma: no cover - subclasses
        raise NotImplementedError

    def show(self, view: StatsView) -> None:
        self.view = view
        text = self.text_of(view)
        if text.plain != self._plain or text.spans != self._spans:
            self._plain, self._spans = text.plain, list(text.spans)
            self.update(text, layout=False)
            if self._hidden():
                return  # showing it again lays the screen out with this text
            rows = self._line_count()
            if rows is None or rows != self.content_size.height:
                self.refresh(layout=True)

    def _hidden(self) -> bool:
        """True when this panel or a box around it is ``display: none`` (the details at
        80x24 until ``d``): it takes no lines, so a new text needs no screen layout (one
        on every probe was the idle app's largest cost: 14 ms of 19 ms per redraw)."""
        return self.is_mounted and not all(n.display for n in self.ancestors_with_self)

    def _line_count(self) -> int | None:
        """Lines the current text takes at the current width, measured the way the
        layout measures it; None before the first layout."""
        width = self.content_size.width if self.is_mounted else 0
        if width <= 0:
            return None
        self.clear_cached_dimensions()
        return self.get_content_height(self.content_size, self.content_size, width)


class Headline(_TextPanel):
    """The figures always in view (``headline_text``, at the panel's width: 28 columns
    in an 80-column terminal, 40 from 120)."""

    DEFAULT_CSS = "Headline { height: auto; text-wrap: nowrap; text-overflow: ellipsis; }"

    def text_of(self, view: StatsView) -> Text:
        width = self.content_size.width if self.is_mounted else 0
        return headline_text(view, width if width > 0 else HEADLINE_WIDTH)

    def on_resize(self) -> None:
        if self.view is not None:  # another width may fit a longer form of a line
            self.show(self.view)


class StatsPanel(_TextPanel):
    """The details below the headline, or in their own panel (``detail_text``, laid
    out at the panel's width: 27 columns beside the plot in an 80- or 100-column
    terminal, 39 from 120)."""

    DEFAULT_CSS = "StatsPanel { height: auto; }"

    def text_of(self, view: StatsView) -> Text:
        width = self.content_size.width if self.is_mounted else 0
        return detail_text(view, width if width > 0 else None)

    def on_resize(self) -> None:
        if self.view is not None:  # the facts wrapped again at the new width
            self.show(self.view)


class DetailsBox(VerticalScroll):
    """The details' scrolling box.  It says when some of them are out of sight: a
    ``Hint`` message with "↓ more (scroll)" (lines below), "↕ more (scroll)" (above and
    below), "↑ more (scroll)" (above) or "" (all in view, or the box hidden), posted
    when that changes; the dashboard puts it in the fit panel's bottom border."""

    class Hint(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    _hint = ""

    def hint(self) -> str:
        """What is out of sight now (see the class docstring)."""
        if not self.is_mounted or not all(n.display for n in self.ancestors_with_self):
            return ""
        most = self.max_scroll_y
        if most <= 0 or self.size.height <= 0:
            return ""
        y = round(self.scroll_y)
        arrow = "↓" if y <= 0 else "↑" if y >= most else "↕"
        return f"{arrow} more (scroll)"

    def _check(self) -> None:
        text = self.hint()
        if text != self._hint:
            self._hint = text
            self.post_message(self.Hint(text))

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self._check()

    def watch_virtual_size(self) -> None:
        self._check()

    def on_resize(self) -> None:
        self._check()

    def on_show(self) -> None:
        self._check()

    def on_hide(self) -> None:
        self._check()
