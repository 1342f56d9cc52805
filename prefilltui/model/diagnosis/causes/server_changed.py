"""``server_changed``: the server behind the URL changed (it restarted, another server
answers, its stated config changed: ``model.server_change``) less than ``RECENT_S``
ago, and TTFT is above its expectation since.  Named first, with what changed, and
the finding it explains after it ("the server restarted 40 s ago; prefix caching True
→ False; since then users' prefix-cache hit rate 62% → 0%"): a redeploy to a replica
without the prefix cache was named "users' prompts got longer", which they were not.
"Several replicas behind one URL" is no moment of change and is not named here."""

from __future__ import annotations

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


#: Stated facts that turn the prefix cache off, each with the value that does
#: (vLLM ``enable_prefix_caching`` in ``cache_config_info``, SGLang
#: ``disable_radix_cache`` in ``/server_info``, TGI ``prefix_caching`` in ``/info``).
CACHE_OFF = {"enable_prefix_caching": ("False", False), "prefix_caching": ("False", False),
             "disable_radix_cache": ("True", True)}


def cache_turned_off(changes, before, now_s: float) -> tuple[float, float] | None:
    """(the users' hit rate before, the seconds of prefill per request it saved) when
    a change in the last ``RECENT_S`` turned the prefix cache off and the users'
    reference ``before`` hit it: the server says its hit rate is now 0, so this is
    known before the users' windows after it show it (their counters restart from 0,
    and vLLM's spans count no cached tokens); None otherwise."""
    if before is None or not before.prefix_cache_hit_rate:
        return None
    for c in changes:
        if c.kind == "replicas" or not 0 <= now_s - c.at_s <= RECENT_S:
            continue
        if any(k in CACHE_OFF and a in CACHE_OFF[k] for k, _b, a in c.changed):
            p = before.prompt_tokens_mean or before.prompt_tokens_p50 or 0.0
            return before.prefix_cache_hit_rate, p
    return None


def judge(ctx: Context) -> Evidence | None:
    now = ctx.now_s
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
