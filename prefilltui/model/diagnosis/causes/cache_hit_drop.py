"""``cache_hit_drop``: the users' prefix-cache hit rate fell by at least ``HIT_DROP``
(0..1) from their reference window; explains the prefill of the prompt share no longer
cached (at the expectation's slope, else the users' TTFT p50 rise).  The same prefix
cached in longer prompts lowers the rate too: that is ``prompts_longer``'s.  A change in
the users' traffic: named first when it explains ``SHARE`` of their rise, unless long
uncached prompts lowered the rate (``DILUTED``)."""

from __future__ import annotations

from dataclasses import replace

from prefilltui.model.diagnosis.causes.base import Context, Evidence, Rule, finite, pct
from prefilltui.model.diagnosis.causes.prompts_longer import LONGER
from prefilltui.model.units import duration

#: The users' prefix-cache hit rate fallen by this much (0..1) "stopped hitting" (20
#: points of the prompt tokens: a fifth more prefill work for the same traffic).
HIT_DROP = 0.20
#: The words that say the users' p90 prompt grew by ``LONGER`` x as well (``leads``).
DILUTED = "p90 prompt grew"


def judge(ctx: Context) -> Evidence | None:
    users, before, expect = ctx.users, ctx.users_before, ctx.expect
    known = before is not None and ctx.cache_off
    if users is None and known:
        # the users' /metrics window since the restart has no counts yet: their
        # traffic as before, none of it cached
        users = replace(before, prefix_cache_hit_rate=None)
    if users is None or before is None:
        return None
    h0, h1 = before.prefix_cache_hit_rate, users.prefix_cache_hit_rate
    off = ""
    if not finite(h1) and known:
        # the server says its cache is off: nothing hits, though the users' windows since
        # its restart have no counts yet (and vLLM's spans count no cached tokens)
        h1, off = 0.0, " (the server's prefix cache is off)"
    if not (finite(h0) and finite(h1)) or h0 - h1 < HIT_DROP:
        return None
    p0, p1 = before.prompt_tokens_p50, users.prompt_tokens_p50
    n = p1 if finite(p1) else p0
    lost = None  # cached tokens per median prompt lost (a longer prompt's lower rate is not)
    if finite(p0) and finite(p1):
        lost = h0 * p0 - h1 * p1
        if lost < HIT_DROP * p0:
            return None  # the same prefix cached, in longer prompts: prompts_longer's
    b = expect.fit.slope_s_per_token if expect is not None and expect.fit is not None else None
    if b and lost is not None:
        secs = lost * b
    elif b and finite(n):
        secs = (h0 - h1) * n * b
    else:
        secs = max(0.0, (users.ttft_p50_s or 0) - (before.ttft_p50_s or 0))
    cost = (f"; ≈ {duration(secs)} more prefill per request at their median {n:,.0f}-token "
            f"prompt" if b and finite(n) else "")
    q0, q1 = before.prompt_tokens_p90, users.prompt_tokens_p90
    diluted = finite(q0) and finite(q1) and q0 > 0 and q1 >= LONGER * q0
    why = (f" (the users' {DILUTED} {q0:,.0f} → {q1:,.0f} tokens: long uncached prompts "
           "lower the rate too)" if diluted else "")
    return Evidence("cache_hit_drop", secs, f"users' prefix-cache hit rate {pct(h0)} → "
                    f"{pct(h1)}{off}{cost}{why}")


def leads(e: Evidence) -> bool:
    """Whether the drop may be named first: not when the users' p90 prompt grew too (long
    uncached prompts lowered the rate: the prompts, not the cache, changed)."""
    return DILUTED not in e.text


RULE = Rule("cache_hit_drop", judge, reads="users", change=True, leads=leads)
