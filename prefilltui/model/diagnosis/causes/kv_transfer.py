"""``kv_transfer``: on a disaggregated path, the KV transfer between the prefill and the
decode worker is at least ``SHARE`` of TTFT (and ``MIN_QUEUE_S``), or transfers failed
in the probes' windows; explains the transfer's median seconds (with failures: the
median of the failed probes' transfer and decode hops, since a decode worker whose
transfer failed recomputes the prompt itself, vLLM's ``kv_load_failure_policy``
"recompute", and ``decode_admission`` leaves those probes to this rule).

The transfer's time and bytes are the workers' own counters around each probe
(``model.path.split_hops``: vLLM ``vllm:nixl_xfer_time_seconds``,
``vllm:nixl_bytes_transferred``, ``vllm:nixl_num_failed_transfers``; SGLang
``sglang:kv_transfer_latency_ms``, ``sglang:num_transfer_failed_reqs_total``).  The rate
is quoted in GB/s, against the link's when the probes' window states it.  A probe
without hops (a single server) gives nothing here.
"""

from __future__ import annotations

from prefilltui.model.diagnosis.causes.base import (
    MIN_QUEUE_S, SHARE, Context, Evidence, Rule, median, pct,
)
from prefilltui.model.units import duration


def judge(ctx: Context) -> Evidence | None:
    hops = [r.hops for r in ctx.probes if r.hops is not None and r.hops.problem is None]
    if not hops:
        return None
    t = median(h.transfer_s for h in hops)
    failed = sum(h.failed_transfers or 0 for h in hops)
    moved = [(h.kv_bytes, h.transfer_s) for h in hops
             if h.kv_bytes is not None and h.transfer_s and not h.failed_transfers]
    rate = ""
    if moved:
        gbs = sum(b for b, _ in moved) / sum(s for _, s in moved) / 1e9
        rate = f", {gbs:.2f} GB/s (the link's rate not stated)"
    if failed:
        lost = median((h.transfer_s or 0.0) + h.decode_s for h in hops
                      if h.failed_transfers and h.decode_s is not None)
        return Evidence("kv_transfer", lost or t or 0.0, f"{failed} KV transfer(s) failed in "
                        f"{len(hops)} probes' windows (the decode worker recomputes the prompt: "
                        f"{duration(lost)} after the prefill of TTFT {duration(ctx.ttft_s)})"
                        f"{rate}" if lost is not None else
                        f"{failed} KV transfer(s) failed in {len(hops)} probes' windows")
    if t is None or t < max(SHARE * ctx.ttft_s, MIN_QUEUE_S):
        return None
    return Evidence("kv_transfer", t, f"KV transfer {duration(t)} of TTFT "
                    f"{duration(ctx.ttft_s)} ({pct(t / ctx.ttft_s)}){rate}")


RULE = Rule("kv_transfer", judge)
