""""Why is TTFT high right now?": one verdict over the recent probes and, where the
server tells them, the users' own requests; each cause quotes the numbers behind it.
Pure; shared by the sweep summary, the TUI, the exporter and the fleet view.

Whose TTFT: the users' (``whose == "users"``) when a users' window with requests is
given (``UsersEvidence.users_now``: the OTLP spans or the server's /metrics histograms)
and their TTFT rose beyond its reference (``judge``); otherwise the probes'.

Nothing is named unless TTFT is above its expectation beyond the expectation's
uncertainty (``above``, ``judge.Judge``).  Below that the answer is "nothing stands
out" with the expected TTFT at each length (``expected``), or, on an idle server with
no users' requests, says so.  Without any expectation (no fit, no baseline, no users'
reference) the causes are judged on the server's own split alone.

Causes: one rule each in ``causes/`` (its test, the seconds of TTFT it explains and
its thresholds), asked in the registry's order (``causes.RULES``).  The verdict is the
cause that explains most; a change in the users' traffic (``cache_hit_drop``,
``prompts_longer``) that explains ``SHARE`` of their rise comes first, since the
queueing or blocking it brings is its consequence; the others that hold are listed
after it.  "not_enough_data" (fewer than ``MIN_PROBES`` recent probes and no users'
data, or no split and no expectation) and "none" (nothing stands out) are valid
answers.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, Sequence

from prefilltui.model.diagnosis.causes import (
    BLOCKED, CAUSES, HIT_DROP, LINE, LONGER, MIN_OVERHEAD_S, MIN_PROBES, MIN_QUEUE_S, RULES,
    SHARE, SLOW, WORDS, Cause, Context, Evidence, blocked, cache_turned_off, counted_ahead,
)
from prefilltui.model.diagnosis.expectation import (
    Expectation, expected_ttft, expected_words, finite, margin_s, median, throughput_expectation,
)
from prefilltui.model.diagnosis.held import HOLD_PROBES, REF_WINDOWS, HeldExpectation
from prefilltui.model.diagnosis.judge import (
    NOW_PROBES, NOW_SHARE, USERS_RISE, USERS_RISE_ALONE, Judge,
)
from prefilltui.model.diagnosis.ttft_breakdown import probe_parts
from prefilltui.model.types import ProbeResult
from prefilltui.model.units import duration
from prefilltui.model.users import UserRequest, UsersEvidence

#: Whose TTFT the verdict judges.
Whose = Literal["probes", "users"]
#: Recent probes the verdict reads.
RECENT = 20
#: The judge's old private name (kept for its importers).
_Judge = Judge

__all__ = [
    "BLOCKED", "CAUSES", "Cause", "Evidence", "Expectation", "HIT_DROP", "HOLD_PROBES",
    "HeldExpectation", "Judge", "LINE", "LONGER", "MIN_OVERHEAD_S", "MIN_PROBES", "MIN_QUEUE_S",
    "NOW_PROBES", "NOW_SHARE", "RECENT", "REF_WINDOWS", "SHARE", "SLOW", "TtftVerdict",
    "USERS_RISE", "USERS_RISE_ALONE", "WORDS", "Whose", "expected_words", "margin_s",
    "throughput_expectation", "ttft_verdict",
]


@dataclass(frozen=True, slots=True)
class TtftVerdict:
    """The answer: ``cause`` (the strongest), ``headline`` (its words and evidence),
    every cause that holds strongest first (``evidence``), the median TTFT and the
    probes read.

    whose: "probes" or "users" (whose TTFT is judged); above: TTFT is above its
    expectation beyond the uncertainty (a cause may be named; False: the summary states
    the expectation, not an alarm); idle: no users' requests and nothing waiting;
    expected: (prompt tokens, expected TTFT s, its uncertainty s) at each recent
    probe length, ascending; judged: whose TTFT and its reference, in words.
    """

    cause: Cause
    headline: str
    evidence: tuple[Evidence, ...]
    ttft_s: float | None
    probes: int
    whose: Whose = "probes"
    above: bool = False
    idle: bool = False
    expected: tuple[tuple[int, float, float], ...] = ()
    judged: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def ttft_verdict(results: Sequence[ProbeResult], expect: Expectation | None = None, *,
                 recent: int = RECENT, users_evidence: UsersEvidence | None = None,
                 in_flight_age_s: float | None = None,
                 waiting_now: float | None = None) -> TtftVerdict:
    """The verdict over the last ``recent`` ok, non-warm-up probes (see the module
    docstring).

    users_evidence: what the users' requests tell (``model.users.UsersEvidence``: their
    window now, ``users_now``, and its reference, ``users_before``, the window before
    the change; their recent requests from their spans, ``user_requests``: prefill
    intervals, for head-of-line); None: nothing known about them.  in_flight_age_s:
    how long the probe in flight has waited (s; None: none in flight); waiting_now:
    the server's waiting gauge as read now (requests).  All optional: without them the
    verdict reads the probes alone.  Never raises for bad data.
    """
    ev = users_evidence if users_evidence is not None else UsersEvidence()
    users_now, users_before = ev.users_now, ev.users_before
    results = results if isinstance(results, (list, tuple)) else list(results)
    ok = [r for r in results if r.ok and not r.warmup and finite(r.ttft_s)][-recent:]
    users = users_now if users_now is not None and users_now.requests > 0 else None
    reqs = [u for u in ev.user_requests if isinstance(u, UserRequest)]
    if waiting_now is not None and not (math.isfinite(waiting_now) and waiting_now >= 0):
        waiting_now = None
    if in_flight_age_s is not None and not (math.isfinite(in_flight_age_s) and in_flight_age_s >= 0):
        in_flight_age_s = None
    # idle: the server says who else is there (a users' window) and nobody is
    idle = (users_now is not None and users_now.source != "none" and users is None
            and not reqs and not (waiting_now or 0)
            and not (median(r.server_waiting for r in ok) or 0))
    expected = _expected_rows(ok, expect)
    if len(ok) < MIN_PROBES and (users is None or expect is None or expect.fit is None):
        return TtftVerdict("not_enough_data", f"not enough data: {len(ok)} recent probe(s), "
                           f"{MIN_PROBES} needed", (), median(r.ttft_s for r in ok), len(ok),
                           idle=idle, expected=expected)
    ttft = median(r.ttft_s for r in ok) or 0.0
    judge = Judge(ok, expect, in_flight_age_s, users, users_before, reqs,
                  newest_ok=bool(ok) and results[-1] is ok[-1])
    users = judge.users  # the newest requests' window when they alone show the change
    gated = judge.has_reference
    # a change that turned off the cache the users hit is above by the server's own word
    now = time.time()
    off = cache_turned_off(ev.server_changes, users_before, now)
    above = judge.above or off is not None
    whose: Whose = "users" if judge.users_above or off is not None else "probes"
    # the probes the causes read: the newest ones when only they are above
    pr = judge.probes
    parts = [probe_parts(r) for r in pr]
    pttft = median(r.ttft_s for r in pr) or ttft
    wait = waiting_now if waiting_now is not None else median(r.server_waiting for r in pr)
    found: list[Evidence] = []
    if above or not gated:
        ctx = Context(pr, parts, pttft, expect, waiting=wait, waiting_now=waiting_now is not None,
                      users=users, users_before=users_before, user_requests=reqs,
                      blocked=blocked(pr, reqs), late=judge.late, late_s=judge.late_s,
                      users_rise_s=judge.users_rise, counted=counted_ahead(pr, expect, wait),
                      slowdown=judge.slowdown, server_changes=ev.server_changes,
                      now_s=now, cache_off=off is not None)
        found = _ask(ctx, (users is not None and judge.users_above) or off is not None)
    judged = judge.words(ttft)
    if (not found and above and not judge.probes_above and not judge.late
            and judge.users_rise <= USERS_RISE_ALONE * (judge.users_ref or 0.0)):
        above = False  # the users' TTFT alone, within what their windows move, no cause
    if found:
        top = found[0]
        return TtftVerdict(top.cause, f"{WORDS[top.cause]}: {top.text}", tuple(found),
                           ttft, len(ok), whose, above, idle, expected, judged)
    split = any(getattr(p, k) is not None for p in parts for k in ("queue_s", "prefill_s", "overhead_s"))
    if not split and not gated:
        return TtftVerdict("not_enough_data",
                           f"not enough data: TTFT {duration(ttft)}, but the server reports no "
                           "queue or prefill time (/metrics, llama.cpp timings) and there is no "
                           "idle fit or --baseline to hold it against", (), ttft, len(ok),
                           whose, above, idle, expected, judged)
    bits = ", ".join(f"{k.removesuffix('_s')} {duration(v)}" for k in
                     ("queue_s", "prefill_s", "overhead_s")
                     if (v := median(getattr(p, k) for p in parts)) is not None)
    exp = median(expected_ttft(expect, r.tokens) for r in ok)
    pm = f" ± {duration(judge.margin)}" if finite(judge.margin) else ""
    vs = f"; {duration(exp)} expected ({expect.source}){pm}" if exp is not None and expect else ""
    where = " on an idle server (no users' requests, nothing waiting)" if idle else ""
    if above:
        ratio = f", TTFT {judge.ratio:.1f}x the expected" if finite(judge.ratio) else ""
        head = f"no single cause found{where}{ratio}"
        if judge.late:
            head += f"; {judge.late}"
    else:
        head = "nothing stands out" + (" (idle server, no users' requests)" if idle else "")
    if whose == "users" or (users is not None and not above):
        return TtftVerdict("none", f"{head}: {judged}" + (f"; probes' TTFT {duration(ttft)}"
                           + vs if ok else ""), (), ttft, len(ok), whose, above, idle,
                           expected, judged)
    return TtftVerdict("none", f"{head}: TTFT {duration(ttft)}"
                       + (f" = {bits}" if bits else "") + vs, (), ttft, len(ok), whose,
                       above, idle, expected, judged)


def _expected_rows(ok, expect: Expectation | None) -> tuple[tuple[int, float, float], ...]:
    """(tokens, expected TTFT, uncertainty of one probe's median there) per length."""
    if expect is None or expect.fit is None:
        return ()
    by: dict[int, int] = {}
    for r in ok:
        if r.tokens:
            by[int(r.tokens)] = by.get(int(r.tokens), 0) + 1
    out = []
    for n in sorted(by):
        e = expected_ttft(expect, n)
        if finite(e):
            out.append((n, float(e), margin_s(expect.fit, n, by[n])))
    return tuple(out)


def _ask(ctx: Context, users: bool) -> list[Evidence]:
    """Every rule's finding (the users' rules only when ``users``: their TTFT is above
    its reference), strongest first; a users' traffic change that explains ``SHARE`` of
    their rise (``Context.users_rise_s``) before all (its queueing or blocking is its
    consequence), the rest after it.  Ties keep the registry's order."""
    found: list[Evidence] = []
    changes = []
    for rule in RULES:
        asked = {"probes": bool(ctx.probes), "users": users, "either": bool(ctx.probes) or users}
        if not asked[rule.reads]:
            continue
        e = rule.judge(replace(ctx, found=tuple(found + [c for c, _ in changes])))
        if e is not None:
            if rule.change:
                changes.append((e, rule))
            else:
                found.append(e)
    found.sort(key=lambda e: e.seconds, reverse=True)
    if ctx.counted and (ctx.waiting or 0) < LINE:
        # probes that waited while nobody else did, behind a longer prompt the server
        # counted meanwhile: one step held the batch, not a queue
        found.sort(key=lambda e: e.cause != "head_of_line")
    if not changes:
        return found
    first = [e for e, rule in changes if e.seconds >= SHARE * ctx.users_rise_s and rule.leads(e)]
    out = (sorted(first, key=lambda e: e.seconds, reverse=True)
           + sorted([e for e, _ in changes if e not in first] + found,
                    key=lambda e: e.seconds, reverse=True))
    # a change of the server is what the rest happened after: it leads
    return sorted(out, key=lambda e: e.cause != "server_changed")
