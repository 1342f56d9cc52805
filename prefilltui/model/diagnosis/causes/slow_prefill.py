"""``slow_prefill``: prefill is slower than the expectation (the server's prefill, or
TTFT minus the fixed cost, at least 1/``SLOW`` x the expected), or the MFU verdict says
"wrong"; explains the extra prefill time.  TTFT minus the fixed cost is read as the
slowdown factor over the lengths that show prefill (``slowdown``), and not at all when
those disagree once the held line has seen healthy groups (a burst of contention, not
prefill).  Probes sent after a prefix (the prefix cache's) and probes that waited
behind a longer prompt (head-of-line's) are left to their own causes."""

from __future__ import annotations

from prefilltui.model.diagnosis.causes.base import (
    MIN_PROBES, Context, Evidence, Rule, after_prefix, expected_ttft, median,
)
from prefilltui.model.diagnosis.slowdown import slowdown

#: Prefill at most this fraction of the expected throughput (1/SLOW x the time) is slow.
SLOW = 0.75


def judge(ctx: Context) -> Evidence | None:
    ok, parts, expect, wait, blocked = ctx.probes, ctx.parts, ctx.expect, ctx.waiting, ctx.blocked
    if expect is not None and expect.mfu_level == "wrong" and expect.mfu is not None:
        pre = median(p.prefill_s for p in parts) or median(r.ttft_s for r in ok) or 0.0
        return Evidence("slow_prefill", pre * 0.5, f"MFU {expect.mfu:.1%} of peak: far below "
                        "what the hardware does (roofline verdict)")
    if expect is None or expect.fit is None or expect.fit.slope_s_per_token <= 0:
        return None
    b = expect.fit.slope_s_per_token
    # probes sent after a prefix (--depth) prefill it too when it is not cached: the
    # prefix-cache cause speaks for them
    # probes that waited behind a user's longer prompt: head-of-line speaks for them
    keep = [i for i, r in enumerate(ok) if not after_prefix(r) and i not in blocked
            and i not in ctx.counted]
    ok, parts = [ok[i] for i in keep], [parts[i] for i in keep]
    if len(ok) < MIN_PROBES:
        return None
    rows = [(p.prefill_s, r.tokens) for p, r in zip(parts, ok)
            if p.prefill_s is not None and r.tokens]
    if len(rows) >= MIN_PROBES:  # the server's own prefill time against the expected
        # expected prefill: the expected TTFT less the overhead outside the server (the
        # fixed cost is partly the server's own), never below b x n
        over = median(p.overhead_s for p in parts) or 0.0
        exp = [(pre, max(b * n, expect.fit.intercept_s + b * n - over)) for pre, n in rows]
        ratio = median(pre / e for pre, e in exp if e > 0)
        extra = median(pre - e for pre, e in exp)
        what = "server prefill"
    else:  # TTFT above the expected line, per probe: only when nothing else explains it
        waiting = wait
        if (waiting or 0) >= 1 or any(r.load_ahead_tokens for r in ok):
            return None  # TTFT holds queueing or a prompt ahead: not the prefill's speed
        pts = [(r.ttft_s, expected_ttft(expect, r.tokens), r.tokens) for r in ok]
        got = ctx.slowdown or slowdown(ok, expect.fit)
        if got is None and expect.fit.group_scatter:
            return None  # the long probes do not agree on a slowdown: a burst, not prefill
        ratio = got[0] if got is not None else median(
            (t - expect.fit.intercept_s) / (e - expect.fit.intercept_s)
            for t, e, _ in pts if e is not None and e > expect.fit.intercept_s)
        extra = median(t - e for t, e, _ in pts if e is not None)
        what = ("TTFT minus the fixed cost" if waiting is not None
                else "TTFT minus the fixed cost (no server metrics: queueing not excluded)")
    if ratio is None or extra is None or ratio < 1 / SLOW:
        return None
    tps = 1.0 / b
    return Evidence("slow_prefill", extra, f"{what} {ratio:.2f}x the expected ({tps:,.0f} "
                    f"prompt tok/s from the {expect.source}; now ≈ {tps / ratio:,.0f} tok/s)")


RULE = Rule("slow_prefill", judge)
