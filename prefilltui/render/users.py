"""The users' window in words: the lines the TUI's stats panel and the sweep's text
summary show (``users_lines``), and its JSON object (``users_json``, docs/schema.md).

Milliseconds on screen, seconds in JSON.  A metrics-sourced window says its quantiles
are bucket estimates ("~" and "bucket estimates"); a figure nobody measured is N/A.
"""

from __future__ import annotations

from prefilltui.model.units import MISSING, ms
from prefilltui.model.users import UsersWindow


def _pct(v: float | None) -> str:
    return MISSING if v is None else f"{v * 100:.0f} %"


def _tok(v: float | None) -> str:
    return MISSING if v is None else f"{v:,.0f}"


def unexplained_words(share: float) -> str:
    """The users' prefill against the fit's slope, by the sign of the unexplained share
    (1 - slope x uncached tokens / prefill time): "30 % of users' prefill unexplained by
    the fit" above 0; below, the fit expects more prefill than they took, so their
    prefill ran faster than it (1 / (1 - share) x its rate: -0.47 is 47 % faster), which
    cache hits the spans do not count would do: "users' prefill 47 % faster than the
    fit (cache hits?)"."""
    pct = round(share * 100)
    if pct < 0:
        return f"users' prefill {-pct} % faster than the fit (cache hits?)"
    return f"{max(pct, 0)} % of users' prefill unexplained by the fit"


def users_lines(w: UsersWindow | None, *, matched: str | None = None) -> list[str]:
    """The users' window as short lines (``[]`` for None or source "none").
    ``matched``: how the probes' own spans went ("probes' spans 9/10"), when known."""
    if w is None or w.source == "none":
        return []
    mark = "~" if w.estimate else ""

    def q_ms(v: float | None) -> str:
        return MISSING if v is None else mark + ms(v)

    def q_tok(v: float | None) -> str:
        return MISSING if v is None else mark + _tok(v)

    src = "from /metrics, bucket estimates" if w.estimate else "from the server's traces"
    head = f"users: {w.requests} request(s) in {w.window_s:.0f} s ({src})"
    if not w.requests:
        return [head + (f"; {matched}" if matched else "")]
    lines = [head,
             f"users' TTFT p50 {q_ms(w.ttft_p50_s)} p90 {q_ms(w.ttft_p90_s)} "
             f"p99 {q_ms(w.ttft_p99_s)}; fit expects {ms(w.expected_ttft_p50_s)}",
             f"users' prompts p50 {q_tok(w.prompt_tokens_p50)} p90 "
             f"{q_tok(w.prompt_tokens_p90)} tok; queue {_pct(w.queue_share)} of TTFT"]
    extra = []
    if w.prefix_cache_hit_rate is not None:
        extra.append(f"prefix cache hits {_pct(w.prefix_cache_hit_rate)}")
    if w.unexplained_prefill_share is not None:
        extra.append(unexplained_words(w.unexplained_prefill_share))
    if w.waiting is not None:
        extra.append(f"{w.waiting:.0f} waiting now")
    if matched:
        extra.append(matched)
    if extra:
        lines.append("; ".join(extra))
    return lines
