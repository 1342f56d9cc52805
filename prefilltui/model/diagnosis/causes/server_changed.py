"""``server_changed``: the server behind the URL changed (it restarted, another server
answers, its stated config changed: ``model.server_change``) less than ``RECENT_S``
ago, and TTFT is above its expectation since.  Named first, with what changed, and
the finding it explains after it ("the server restarted 40 s ago; prefix caching True
→ False; since then users' prefix-cache hit rate 62% → 0%"): a redeploy to a replica
without the prefix cache was named "users' prompts got longer", which they were not.
"Several replicas behind one URL" is no moment of change and is not named here."""

from __future__ import annotations

import time

from prefilltui.model.diagnosis.causes.base import Context, Evidence, Rule
from prefilltui.model.server_change import change_words

#: How long after a change it is named as the cause (s): long enough for the users'
#: windows after it to show what it did, short enough that a later, unrelated
#: incident is not put on it.
RECENT_S = 300.0


def newest(ctx: Context, now_s: float):
    """The newest change (not "replicas") at most ``RECENT_S`` old, or None."""
    cs = [c for c in ctx.server_changes if c.kind != "replicas" and 0 <= now_s - c.at_s <= RECENT_S]
    return max(cs, key=lambda c: c.at_s) if cs else None


def judge(ctx: Context) -> Evidence | None:
    now = time.time()
    c = newest(ctx, now)
    if c is None:
        return None
    words = change_words([c], now) or ""
    # what it explains: the strongest finding since, or the users' rise
    top = max(ctx.found, key=lambda e: e.seconds, default=None)
    secs = max(top.seconds if top is not None else 0.0, ctx.users_rise_s, 0.0)
    since = f"; since then {top.text}" if top is not None else ""
    return Evidence("server_changed", secs, words + since)


RULE = Rule("server_changed", judge, reads="either", change=True)
