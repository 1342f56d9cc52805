"""``prefix_cache``: probes sent after a prefix that should be cached (``--depth``) got
no cached tokens from the server (at least half of them); explains the prefix's prefill
time at the expectation's slope."""

from __future__ import annotations

from prefilltui.model.diagnosis.causes.base import Context, Evidence, Rule, after_prefix, median
from prefilltui.model.units import duration


def judge(ctx: Context) -> Evidence | None:
    ok, expect = ctx.probes, ctx.expect
    after = [r for r in ok if after_prefix(r)]
    miss = [r for r in after if not r.cached_tokens]
    if not after or len(miss) * 2 < len(after):
        return None
    depth = int(median(r.depth.depth for r in miss) or 0)
    b = expect.fit.slope_s_per_token if expect is not None and expect.fit is not None else None
    saved = depth * b if b else 0.0
    cost = f" (≈ {duration(saved)} of prefill it should have saved)" if b else ""
    return Evidence("prefix_cache", saved, f"{len(miss)} of {len(after)} probes sent after a "
                    f"{depth:,}-token prefix got 0 cached tokens from the server{cost}")


RULE = Rule("prefix_cache", judge)
