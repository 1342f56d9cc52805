"""``queueing``: the server's queue time is at least ``SHARE`` of TTFT (and
``MIN_QUEUE_S``), or requests are waiting (the gauge as read now, else the probes'
median), or the users' queue share is at least ``SHARE``; explains the queue time.

Two rules of one cause: ``judge`` reads the probes, ``judge_users`` the users' window
(their spans' time in queue, or the histograms'), asked only when the probes' found no
queue."""

from __future__ import annotations

from prefilltui.model.diagnosis.causes.base import (
    MIN_QUEUE_S, SHARE, Context, Evidence, Rule, expected_ttft, finite, median, pct,
)
from prefilltui.model.units import duration


def judge(ctx: Context) -> Evidence | None:
    ok, parts, ttft, expect, wait = ctx.probes, ctx.parts, ctx.ttft_s, ctx.expect, ctx.waiting
    q = median(p.queue_s for p in parts)
    run = median(r.server_running for r in ok)
    wword = "waiting now" if ctx.waiting_now else "waiting"
    load = ""
    if wait is not None or run is not None:
        load = f", {wait or 0:,.0f} {wword}, {run or 0:g} running"
    if ctx.late_s > 0 and wait is not None and wait >= 1:
        # the probe in flight is the news: completed probes predate the queue
        return Evidence("queueing", ctx.late_s, f"{wait:,.0f} requests {wword} at the server; "
                        f"{ctx.late}")
    if q is not None and q >= max(SHARE * ttft, MIN_QUEUE_S):
        src = {p.queue_source for p in parts if p.queue_s is not None}
        est = " (estimated: TTFT - prefill - idle overhead)" if src <= {"estimated", "idle"} else ""
        return Evidence("queueing", q, f"queue {duration(q)} of TTFT {duration(ttft)} "
                        f"({pct(q / ttft)}){est}{load}")
    if wait is not None and wait >= 1 and q is None:
        # requests wait at the server but its queue time is not this probe's own (several
        # requests finished in the window): what TTFT has beyond the expectation
        extra = median(max(0.0, r.ttft_s - e) for r in ok
                       if (e := expected_ttft(expect, r.tokens)) is not None)
        if extra is not None:
            if extra < SHARE * ttft:
                return None
            return Evidence("queueing", extra, f"{wait:,.0f} requests {wword} at the server; "
                            f"TTFT {duration(ttft)}, {duration(extra)} above the {expect.source} "
                            f"(the server's queue time is not attributable to one request)"
                            + load.replace(f", {wait or 0:,.0f} {wword}", ""))
        return Evidence("queueing", 0.0, f"{wait:,.0f} requests {wword} at the server (no "
                        f"queue time of this probe's own: its share of TTFT {duration(ttft)} "
                        f"is unknown){load}")
    return None


def judge_users(ctx: Context) -> Evidence | None:
    """The users' queue share of TTFT (their spans' time in queue, or the histograms')."""
    users, wait = ctx.users, ctx.waiting
    if users is None or any(e.cause == "queueing" for e in ctx.found):
        return None
    q = users.queue_share
    if not finite(q) or q < SHARE or not finite(users.ttft_p50_s):
        return None
    now = f"; {wait:,.0f} waiting now" if wait else ""
    return Evidence("queueing", q * users.ttft_p50_s, f"users' time in queue {pct(q)} of their "
                    f"TTFT (p50 {duration(users.ttft_p50_s)}){now}")


RULE = Rule("queueing", judge)
USERS_RULE = Rule("queueing", judge_users, reads="users")
