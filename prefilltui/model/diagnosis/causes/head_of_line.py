"""``head_of_line``: a long prompt was in prefill ahead of the probe (the background
load's prompts, a user's request whose prefill interval covers the probe's wait, a
longer prompt the server's prompt-token counter counted in the probe's window while
nobody waited, or the decodes froze longer than the probe's own prefill should take); explains TTFT above
the expected TTFT.  Not named when requests wait in a line (``LINE``): that is
queueing, not one prompt ahead."""

from __future__ import annotations

from typing import Sequence

from prefilltui.model.diagnosis.causes.base import (
    MIN_QUEUE_S, SHARE, Context, Evidence, Rule, expected_ttft, finite, median,
)
from prefilltui.model.diagnosis.expectation import Expectation, line_at, margin_s
from prefilltui.model.types import ProbeResult
from prefilltui.model.units import duration
from prefilltui.model.users import UserRequest

#: A probe whose wait was at least this share spent behind users' longer prompts in
#: prefill was blocked by them (head-of-line): the larger part of its TTFT.
BLOCKED = 0.5
#: Requests waiting at the server that make a line rather than one prompt ahead: more
#: than the probe itself and the one or two requests that arrive while a long prompt's
#: chunk is in prefill (head-of-line behind one prompt keeps a short queue).
LINE = 3


def blocked(ok: Sequence[ProbeResult], reqs: Sequence[UserRequest]) -> dict[int, tuple[float, int]]:
    """Probes (index into ``ok``) that waited behind users' longer prompts: the seconds
    of users' prefill (spans' [arrival + queue, + prefill]) between the probe's send
    and its first token, of requests that arrived before it with more prompt tokens,
    when that is at least ``BLOCKED`` of its TTFT (in a long queue other prompts are
    in prefill too, for a small part of the wait); with the longest such prompt."""
    out: dict[int, tuple[float, int]] = {}
    first = min((r.started_at for r in ok if r.started_at), default=0.0)
    spans = [(u.prefill_start_s, u.prefill_end_s, u.arrival_s, u.prompt_tokens) for u in reqs
             if finite(u.prefill_start_s) and finite(u.prefill_end_s) and u.prompt_tokens
             and u.prefill_end_s > first]
    if not spans:
        return out
    for i, r in enumerate(ok):
        s = r.started_at
        if not s or not r.tokens:
            continue
        e = s + r.ttft_s
        over, longest = 0.0, 0
        for ps, pe, arr, n in spans:
            if arr <= s and n > r.tokens and pe > s and ps < e:
                over += min(pe, e) - max(ps, s)
                longest = max(longest, n)
        over = min(over, r.ttft_s)  # several at once: the wait at most
        if over >= max(BLOCKED * r.ttft_s, MIN_QUEUE_S):
            out[i] = (over, longest)
    return out


def counted_ahead(ok: Sequence[ProbeResult], expect: Expectation | None,
                  wait: float | None) -> dict[int, tuple[float, int]]:
    """Probes (index into ``ok``) held by a longer prompt that the server's own
    prompt-token counter shows in their /metrics window (``window_prompt_tokens`` less
    the probe's own) while no line waited (fewer than ``LINE``), their TTFT above its
    single-probe margin by ``SHARE`` of it: (seconds above the expectation, the other
    prompts' tokens).  A step that prefills an 8k prompt without chunking holds every
    request that arrives meanwhile "in queue" with nobody else waiting (the headline
    read "queueing: queue 473 ms of TTFT 551 ms (86 %), 0 waiting, 2 running"); the
    counter tells it from a queue where no span names the long prompt (a span comes
    when its request ends, often after the probe is judged)."""
    out: dict[int, tuple[float, int]] = {}
    fit = expect.fit if expect is not None else None
    if fit is None or (wait or 0) >= LINE:
        return out
    for i, r in enumerate(ok):
        n = r.tokens
        if not n or r.window_prompt_tokens is None or not finite(r.ttft_s):
            continue
        other = r.window_prompt_tokens - n
        extra = r.ttft_s - line_at(fit, n)
        if other > n and extra > margin_s(fit, n, 1) and extra >= SHARE * r.ttft_s:
            out[i] = (extra, other)
    return out


def judge(ctx: Context) -> Evidence | None:
    ok, expect, blocked = ctx.probes, ctx.expect, ctx.blocked
    queue = next((e for e in ctx.found if e.cause == "queueing"), None)
    if queue is not None and queue.seconds > 0 and (ctx.waiting or 0) >= LINE:
        # requests waiting beyond the probe and one step's arrivals: a line
        return None  # requests wait in line: queueing (above), not one prompt ahead
    hits = []
    for i, r in enumerate(ok):
        exp = expected_ttft(expect, r.tokens)
        # the probe's own prefill: the server's figure, else the expectation's
        own = r.server_prefill_s
        if own is None and exp is not None and expect is not None:
            own = exp - expect.fit.intercept_s
        ahead = r.load_ahead_tokens or 0
        froze = (r.decode_stall_s is not None and own is not None
                 and r.decode_stall_s > 1.5 * own + 2 * (r.decode_gap_s or 0.0) + 0.01)
        if ahead > (r.tokens or 0) or (ahead > 0 and exp is not None and r.ttft_s > 1.5 * exp):
            # a prompt ahead: TTFT above the expectation is its doing
            hits.append((r, exp, ahead, max(0.0, r.ttft_s - exp) if exp is not None else None, 0))
        elif i in blocked:
            # a user's longer prompt was in prefill while this probe waited for its turn
            over, n = blocked[i]
            extra = max(0.0, r.ttft_s - exp) if exp is not None else over
            hits.append((r, exp, 0, extra, n))
        elif i in ctx.counted:
            # the server counted a longer prompt in this probe's window, nobody waiting
            extra, other = ctx.counted[i]
            hits.append((r, exp, 0, extra, 0, other))
        elif froze:
            # the decodes froze longer than this prefill: the rest was another prefill
            hits.append((r, exp, 0, r.decode_stall_s - own, 0))
    if len(hits) < max(1, len(ok) // 3):
        return None
    extra = median(h[3] for h in hits)
    ttft = median(h[0].ttft_s for h in hits)
    ahead = median(h[2] for h in hits if h[2])
    users = median(h[4] for h in hits if h[4])
    other = median(h[5] for h in hits if len(h) > 5)
    stall = median(h[0].decode_stall_s for h in hits)
    if ahead:
        what = f"a median {ahead:,.0f} prompt tokens in prefill ahead of the probe"
    elif users:
        what = (f"users' long prompts (median {users:,.0f} tokens) in prefill when the probe "
                "was sent")
    elif other:
        wait = median(h[0].server_waiting for h in hits)
        what = (f"a median {other:,.0f} other prompt tokens prefilled while the probe waited "
                f"(the server's prompt-token counter), {wait or 0:,.0f} waiting: a long "
                "prompt held the batch")
    else:
        what = f"decodes froze {duration(stall)}, longer than the probe's own prefill"
    exp = median(h[1] for h in hits)
    vs = f" vs {duration(exp)} expected ({expect.source})" if exp is not None and expect else ""
    if extra is None:  # no expectation: the stall or the ahead tokens alone
        extra = stall or 0.0
    if ttft and extra < SHARE * ttft:
        return None
    return Evidence("head_of_line", extra, f"{what} in {len(hits)} of {len(ok)} probes; "
                    f"TTFT {duration(ttft)}{vs}")


RULE = Rule("head_of_line", judge)
