"""``overhead``: client/network/TLS/gateway time (TTFT - the server's own time) is at
least ``SHARE`` of TTFT (and ``MIN_OVERHEAD_S``); explains it."""

from __future__ import annotations

from prefilltui.model.diagnosis.causes.base import SHARE, Context, Evidence, Rule, median, pct
from prefilltui.model.units import duration

#: Least absolute size of the overhead cause (s): below it a share is noise on a fast
#: server.
MIN_OVERHEAD_S = 0.020


def judge(ctx: Context) -> Evidence | None:
    ok, parts, ttft = ctx.probes, ctx.parts, ctx.ttft_s
    o = median(p.overhead_s for p in parts)
    if o is None or o < max(SHARE * ttft, MIN_OVERHEAD_S):
        return None
    conn = median(r.connect_s for r in ok)
    extra = f"; new connections {duration(conn)} each" if conn is not None else ""
    return Evidence("overhead", o, f"TTFT - server time {duration(o)} of TTFT {duration(ttft)} "
                    f"({pct(o / ttft)}): network, TLS or a gateway{extra}")


RULE = Rule("overhead", judge)
