"""``decode_admission``: on a disaggregated path, the decode worker's own time to its
first token (its TTFT less the KV transfer: waiting to be admitted, deferred, and the
first decode step) is at least ``SHARE`` of TTFT (and ``MIN_QUEUE_S``); explains that
time.  Quotes requests deferred at the decode worker when its gauge showed any (vLLM
``vllm:num_requests_waiting_by_reason{reason="deferred"}``: "deferred by transient
constraints (LoRA budget, KV transfer, blocked status)", ``vllm/v1/metrics/loggers.py``).
"""

from __future__ import annotations

from prefilltui.model.diagnosis.causes.base import (
    MIN_QUEUE_S, SHARE, Context, Evidence, Rule, median, pct,
)
from prefilltui.model.units import duration


def judge(ctx: Context) -> Evidence | None:
    # a probe whose transfer failed is the transfer's (the decode worker recomputed)
    hops = [r.hops for r in ctx.probes if r.hops is not None and r.hops.problem is None
            and not r.hops.failed_transfers]
    d = median(h.decode_s for h in hops)
    if d is None or d < max(SHARE * ctx.ttft_s, MIN_QUEUE_S):
        return None
    deferred = max((h.deferred for h in hops if h.deferred is not None), default=None)
    said = f"; {deferred:,.0f} deferred at the decode worker" if deferred else ""
    return Evidence("decode_admission", d, f"the decode worker took {duration(d)} of TTFT "
                    f"{duration(ctx.ttft_s)} ({pct(d / ctx.ttft_s)}) after the transfer"
                    f"{said}")


RULE = Rule("decode_admission", judge)
