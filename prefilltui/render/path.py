"""A disaggregated path in text: the hops in one row (router ▸ prefill ▸ transfer ▸
decode, each with its share of TTFT; the TUI shows the same row at 80 columns) and the
path's block of the sweep summary.  Renders model records only.
"""

from __future__ import annotations

from prefilltui.model.hops import HOP_NAMES
from prefilltui.model.path import PathSummary
from prefilltui.model.units import ms, ms_short

#: The row's separator between hops.
ARROW = " ▸ "
_SHORT = {"router": "rtr", "prefill": "pre", "transfer": "kv", "decode": "dec"}


def hops_row(hops_s: dict[str, float | None], shares: dict[str, float | None],
             width: int = 80) -> str:
    """``router 2.1 ms 3% ▸ prefill 71 ms 85% ▸ transfer 7.0 ms 8% ▸ decode 3.1 ms 4%``,
    shortened (short names, then shares only) to fit ``width`` columns; a hop nobody
    reported shows N/A."""
    def cell(h: str, name: str, with_ms: bool) -> str:
        s, share = hops_s.get(f"{h}_s"), shares.get(h)
        pct = f"{share:.0%}" if share is not None else "N/A"
        return f"{name} {ms_short(s)} ms {pct}" if with_ms else f"{name} {pct}"

    for names, with_ms in ((None, True), (_SHORT, True), (_SHORT, False)):
        row = ARROW.join(cell(h, (names or {}).get(h, h), with_ms) for h in HOP_NAMES)
        if len(row) <= width:
            return row
    return row[:width]


def path_lines(p: PathSummary) -> list[str]:
    """The sweep summary's block of a path: the URLs and roles, the hops, the two fits,
    the KV transfer's figures, the hop the verdict names, and why hops are missing."""
    roles = ", ".join(f"{k} ({v})" for k, v in p.roles.items())
    out = [f"path: {p.router} ▸ prefill {p.prefill} ▸ decode {p.decode}"
           + (f"; roles: {roles}" if roles else ""),
           f"  hops (median of {p.probes} probes, TTFT {ms_short(p.hops_s.get('ttft_s'))} ms): "
           + hops_row(p.hops_s, p.shares, 200)]
    for name, f in (("through the router", p.path_fit), ("prefill worker alone", p.prefill_fit)):
        if f is not None:
            out.append(f"  fit {name}: TTFT = {ms_short(f.intercept_s)} ms + "
                       f"{ms(f.slope_s_per_token, 4, unit=False)} ms/token x n ({f.n} probes)")
    if p.path_fit is not None and p.prefill_fit is not None:
        out.append(f"  the path adds {ms_short(p.path_fit.intercept_s - p.prefill_fit.intercept_s)}"
                   f" ms + {ms(p.path_fit.slope_s_per_token - p.prefill_fit.slope_s_per_token, 4, unit=False)}"
                   " ms/token x n to the prefill worker's line")
    kv = p.kv
    if kv.bytes_per_token is not None:
        exp = (f" vs {kv.expected_bytes_per_token:,} the model's KV needs ({kv.ratio:.2f}x, "
               f"{kv.check})" if kv.expected_bytes_per_token and kv.ratio is not None
               else " (the model's KV size per token not known)")
        rate = f", {kv.bytes_per_s / 1e9:.2f} GB/s" if kv.bytes_per_s else ""
        out.append(f"  KV transfer: {kv.bytes_per_token:,.0f} B/token{exp}{rate}")
    if kv.failed_transfers:
        out.append(f"  KV transfers failed: {kv.failed_transfers}")
    if p.verdict:
        out.append(f"  {p.verdict}")
    out += [f"  note: {x}" for x in (*p.notices, *p.problems)]
    return out
