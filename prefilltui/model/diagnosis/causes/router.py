"""``router``: on a disaggregated path, the client's TTFT less every worker's hop (the
prefill worker's TTFT, the transfer, the decode worker's time: ``model.path.split_hops``)
is at least ``SHARE`` of TTFT (and ``MIN_QUEUE_S``): the router (its queue, its picks,
its calls to the workers) and the network around it; explains that time.
"""

from __future__ import annotations

from prefilltui.model.diagnosis.causes.base import (
    MIN_QUEUE_S, SHARE, Context, Evidence, Rule, median, pct,
)
from prefilltui.model.units import duration


def judge(ctx: Context) -> Evidence | None:
    hops = [r.hops for r in ctx.probes if r.hops is not None and r.hops.problem is None]
    t = median(h.router_s for h in hops)
    if t is None or t < max(SHARE * ctx.ttft_s, MIN_QUEUE_S):
        return None
    return Evidence("router", t, f"the path minus its workers' hops is {duration(t)} of TTFT "
                    f"{duration(ctx.ttft_s)} ({pct(t / ctx.ttft_s)}): the router and the "
                    "network around it")


RULE = Rule("router", judge)
