"""``prompts_longer``: the users' median prompt grew by at least ``LONGER`` x over
their reference window; explains the grown prompt's prefill at the expectation's
slope (else the users' TTFT p50 rise).  A change in the users' traffic: named first
when it explains ``SHARE`` of their rise."""

from __future__ import annotations

from prefilltui.model.diagnosis.causes.base import Context, Evidence, Rule, finite
from prefilltui.model.units import duration

#: The users' median prompt grown by this factor is "got longer" (a 1.5x longer median
#: prompt is half as much prefill again: beyond a window's run-to-run scatter).
LONGER = 1.5


def judge(ctx: Context) -> Evidence | None:
    users, before, expect = ctx.users, ctx.users_before, ctx.expect
    if users is None or before is None:
        return None
    p0, p1 = before.prompt_tokens_p50, users.prompt_tokens_p50
    if not (finite(p0) and finite(p1)) or p0 <= 0 or p1 < LONGER * p0:
        return None
    b = expect.fit.slope_s_per_token if expect is not None and expect.fit is not None else None
    # the added prefill from the mean prompt where the median is a bucket estimate: the
    # buckets bound it coarsely (≈ 218 ms read for a true 109 ms from vLLM's buckets)
    m0, m1 = before.prompt_tokens_mean, users.prompt_tokens_mean
    grown = (m1 - m0 if (users.estimate or before.estimate) and finite(m0) and finite(m1)
             else p1 - p0)
    secs = max(0.0, grown) * b if b else max(0.0, (users.ttft_p50_s or 0) - (before.ttft_p50_s or 0))
    slow = next((e for e in ctx.found if e.cause == "slow_prefill"), None)
    per = ("prefill per token slower too (slow prefill, below)" if slow is not None
           else "prefill per token unchanged")
    cost = f" (≈ {duration(secs)} more prefill each)" if b else ""
    if b and grown != p1 - p0:
        cost = (f" (≈ {duration(secs)} more prefill each: their mean prompt {m0:,.0f} → "
                f"{m1:,.0f} tokens)")
    return Evidence("prompts_longer", secs, f"users' median prompt {p0:,.0f} → {p1:,.0f} "
                    f"tokens{cost}; {per}")


RULE = Rule("prompts_longer", judge, reads="users", change=True)
