"""Is TTFT above its expectation beyond the uncertainty?  The verdict names no cause
unless it is.

The probes': the median excess of the recent probes (or of the last ``NOW_PROBES``, so
an onset shows before it owns the median) over the expected TTFT exceeds ``margin_s``
(the fit line's 95 % interval at the probe's length plus the 95 % spread of a median of
k probes around it, at least ``MIN_QUEUE_S``), with ``NOW_SHARE`` of them above their
own margin; or a probe still in flight is that late (``in_flight_age_s``).  The
users': their TTFT p50 rose beyond the reference (``users_before``'s TTFT p50, else the
expectation at their median prompt) by more than ``USERS_RISE`` of it and the 95 %
uncertainty of the two windows' p50s, or the newest of their requests alone are
(``USERS_NOW``: a change shows there before it owns the window's median).

Once the held line has seen healthy groups of probes (``LinearFit.group_scatter``), a
group is above only past what those did, and prefill slower than the line by a
factor (``slowdown.slowdown`` over the newest ``SLOW_GROUP``, the lengths that show
prefill) is above too.  Pure.  Seconds in data.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from prefilltui.model.diagnosis.causes import MIN_PROBES
from prefilltui.model.diagnosis.expectation import (
    MEDIAN_SE, MIN_QUEUE_S, Z95, Expectation, expected_ttft, finite, line_at, margin_s, median,
)
from prefilltui.model.diagnosis.slowdown import SLOW_GROUP, SLOW_MIN, SLOW_UNSEEN, slowdown
from prefilltui.model.fit import LinearFit
from prefilltui.model.units import duration
from prefilltui.model.users import UserRequest, UsersWindow, in_window, users_window

#: The newest probes judged on their own too ("now": 12-30 s at a 2-5 s interval), so
#: an onset is seen before it holds the median of the verdict's ``RECENT``.
NOW_PROBES = 6
#: The share of a group's probes that must be above their own margin for the group to
#: be above (4 of 6): an onset moves them all, contention with users a few.
NOW_SHARE = 2 / 3
#: The users' TTFT p50 risen by more than this share of its reference is above it (and
#: beyond its uncertainty): the p50 of a 30-s window of ~30 requests moved by up to
#: +-35 % between healthy windows of the fake engine (tests/fakeengine.py), and real
#: traffic is burstier, so half as much again.
USERS_RISE = 0.5
#: The users' TTFT p50 risen by more than this share of its reference with no cause in
#: sight (and the probes as expected) is called out ("no single cause found"); a rise
#: their traffic's change explains is named from ``USERS_RISE`` on.  The p50 of a 30-s
#: window moved by up to +50 % between healthy windows of the fake engine.
USERS_RISE_ALONE = 1.0
#: The newest users' requests judged on their own (s, and the fewest): at 0.5 requests
#: a second, 20 s hold 10.  They are above when five in six or more are above the
#: reference by more than ``USERS_RISE`` (a healthy request is that far above the
#: reference's median about one time in six: five of six by chance ~1 in 2,000 looks).
USERS_NOW_S = 20.0
USERS_NOW = 6
#: ... or, with at least this many, when five in eight or more are past the reference's
#: p90 and their median past the 50 % rise (five of eight past a healthy p90 by chance:
#: about one look in 2,000).
USERS_TAIL = 8


class Judge:
    """Is TTFT above its expectation beyond the uncertainty?  The probes' (the recent
    ones, or the newest ``NOW_PROBES``), the probe in flight, the users'.

    What it found: ``probes`` (the group the causes read), ``probes_above``, ``margin``
    / ``ratio`` (s; the group's median TTFT over the expected), ``late`` / ``late_s``
    (the probe in flight or the newest that is late: words, s over the expected),
    ``users_ref`` / ``users_ref_src`` (the users' reference p50 s and what it is),
    ``users_rise`` / ``users_margin`` (s) and ``users_above``; ``users`` (the window
    judged: the newest requests' when they alone show the change, ``users_fast``);
    ``slowdown`` (the probes' prefill slowdown factor and its half-width, when it
    holds); ``above``: any of them.
    """

    def __init__(self, ok, expect: Expectation | None, in_flight_age_s: float | None,
                 users: UsersWindow | None, users_before: UsersWindow | None,
                 reqs: Sequence[UserRequest] = (), newest_ok: bool = True) -> None:
        self.expect, self.probes, self.ratio, self.margin = expect, list(ok), math.nan, math.inf
        self.late = ""
        self.late_s = 0.0
        self.slowdown: tuple[float, float] | None = None
        fit = expect.fit if expect is not None else None
        self.probes_above = False
        if fit is not None and ok:
            # the window, and its newest probes (the older ones may predate an onset):
            # the one further above its margin is read (the window on a tie)
            best = None
            for group in (ok, ok[-NOW_PROBES:]):
                if len(group) < MIN_PROBES:
                    continue
                x, m, ratio = self._excess(group, fit)
                if group is ok:
                    self.margin, self.ratio = m if m is not None else math.inf, ratio
                if x is not None and m is not None and x > m and m > 0:
                    if best is None or x / m > best[0]:
                        best = (x / m, group, m, ratio)
            # prefill slower than the line, read where prefill shows: the median excess
            # over every length missed a 2x slower prefill
            for group in (ok[-SLOW_GROUP:], ok):
                seen = fit.group_scatter_for(len(group))
                # before healthy groups were seen, a stricter bar of its own
                bar = seen[1] if seen is not None and finite(seen[1]) else SLOW_UNSEEN
                got = slowdown(group, fit)
                if got is not None and got[0] - 1 > got[1] and got[0] > max(bar, SLOW_MIN):
                    self.slowdown = got
                    if best is None:
                        best = (0.0, group, self.margin, got[0])
                    break
            if best is not None:
                _, self.probes, self.margin, self.ratio = best
                self.probes_above = True
        if fit is not None and in_flight_age_s is not None:
            lens = [r.tokens for r in ok if r.tokens] or [fit.x_max]
            worst = max(line_at(fit, n) for n in lens)
            m = max(margin_s(fit, n, 1) for n in lens)
            last = ok[-1].ttft_s if ok and newest_ok else None
            if in_flight_age_s - worst > m and in_flight_age_s > 2 * worst:
                self.late_s = in_flight_age_s - worst
                self.late = (f"a probe in flight {duration(in_flight_age_s)}, ≤ "
                             f"{duration(worst)} expected at the longest length")
            elif last is not None and in_flight_age_s < last and last - worst > m \
                    and last > 2 * worst:
                # the probe in flight has just begun and the newest to complete waited
                # that long: in a queue probes complete rarely, and each new one is young
                # for a second (the real vLLM's exporter said "none" for a scrape after
                # every probe that came out of the queue)
                self.late_s = last - worst
                self.late = (f"the last probe took {duration(last)}, ≤ {duration(worst)} "
                             f"expected at the longest length (the next in flight "
                             f"{duration(in_flight_age_s)})")
        self.users, self.users_before = users, users_before
        self.users_ref, self.users_ref_src = None, ""
        if users is not None and finite(users.ttft_p50_s):
            if users_before is not None and users_before.requests and finite(users_before.ttft_p50_s):
                self.users_ref, self.users_ref_src = users_before.ttft_p50_s, "before"
            else:
                e = users.expected_ttft_p50_s
                if not finite(e):
                    e = expected_ttft(expect, users.prompt_tokens_p50)
                if finite(e):
                    self.users_ref, self.users_ref_src = e, "expected at their median prompt"
        self.users_rise = (users.ttft_p50_s - self.users_ref) if self.users_ref is not None else 0.0
        self.users_margin = max(USERS_RISE * (self.users_ref or 0.0), MIN_QUEUE_S,
                                _users_p50_margin(users, users_before if self.users_ref_src
                                                  == "before" else None, reqs))
        self.users_above = self.users_ref is not None and self.users_rise > self.users_margin
        self.users_fast = False
        recent = _users_recent(reqs, users, expect)
        if not self.users_above and self.users_ref is not None and recent is not None:
            end = max(u.finished_s for u in reqs)
            t = [u.ttft_s for u in in_window(reqs, end, USERS_NOW_S) if finite(u.ttft_s)]
            bar = (1 + USERS_RISE) * self.users_ref
            p90 = (users_before.ttft_p90_s if self.users_ref_src == "before"
                   and users_before is not None and finite(users_before.ttft_p90_s) else None)
            most = len(t) >= USERS_NOW and sum(1 for x in t if x > bar) * 6 >= len(t) * 5
            # a change that moves most requests but not all (a cache that stops hitting
            # slows the 70 % with a shared prefix, not the rest): five in eight or more
            # past the reference's p90 (a healthy one is, one time in ten), the median
            # past the bar
            tail = (p90 is not None and len(t) >= USERS_TAIL and median(t) > bar
                    and sum(1 for x in t if x > p90) * 8 >= len(t) * 5)
            if (most or tail) and finite(recent.ttft_p50_s):
                self.users, self.users_fast = recent, True
                self.users_rise = recent.ttft_p50_s - self.users_ref
                self.users_above = self.users_rise > USERS_RISE * self.users_ref

    @staticmethod
    def _excess(group, fit: LinearFit):
        """(median excess, its margin, median ratio) of ``group`` over ``fit``; the
        excess is None unless at least ``NOW_SHARE`` of the probes are above their own
        single-probe margin too (a few probes that met a user's prompt ahead do not
        move a small group's median by themselves)."""
        xs = [(r.ttft_s - line_at(fit, r.tokens), margin_s(fit, r.tokens, len(group)),
               r.ttft_s / line_at(fit, r.tokens) if line_at(fit, r.tokens) > 0 else None,
               margin_s(fit, r.tokens, 1))
              for r in group if r.tokens]
        each = sum(1 for x, _, _, m1 in xs if x > m1)
        x = median(x for x, _, _, _ in xs) if xs and each >= NOW_SHARE * len(xs) else None
        ratio = median(q for _, _, q, _ in xs)
        seen = fit.group_scatter_for(len(group))
        if x is not None and seen is not None and finite(ratio) and ratio - 1 <= seen[0]:
            x = None  # no further above than healthy groups of this size went
        return x, median(m for _, m, _, _ in xs), ratio

    @property
    def has_reference(self) -> bool:
        return (self.expect is not None and self.expect.fit is not None) or self.users_ref is not None

    @property
    def above(self) -> bool:
        return self.probes_above or bool(self.late) or self.users_above

    def words(self, ttft: float) -> str:
        """Whose TTFT, against what."""
        u = self.users
        if u is not None and finite(u.ttft_p50_s):
            est = " (bucket estimate)" if u.estimate else ""
            ref = ""
            if self.users_ref is not None:
                ref = (f", was {duration(self.users_ref)}" if self.users_ref_src == "before"
                       else f", {duration(self.users_ref)} {self.users_ref_src}")
            return (f"users' TTFT p50 {duration(u.ttft_p50_s)}{est}{ref} over {u.requests:,} "
                    f"requests")
        exp = median(expected_ttft(self.expect, r.tokens) for r in self.probes)
        src = f", {duration(exp)} expected ({self.expect.source})" if exp is not None else ""
        return f"probes' TTFT {duration(ttft)}{src}"


def _p50_se(w: UsersWindow | None) -> float:
    """The standard error (s) of a users' window's TTFT p50: sqrt(pi/2) x sigma /
    sqrt(requests), sigma estimated from the p90 - p50 spread (1.2816 sigma for a normal
    distribution; the users' TTFT has a longer tail, so this errs wide); 0 without it."""
    if w is None or not w.requests or not (finite(w.ttft_p90_s) and finite(w.ttft_p50_s)):
        return 0.0
    sigma = max(0.0, w.ttft_p90_s - w.ttft_p50_s) / 1.2816
    return MEDIAN_SE * sigma / math.sqrt(w.requests)


def _users_p50_margin(now: UsersWindow, before: UsersWindow | None,
                      reqs: Sequence[UserRequest] = ()) -> float:
    """The 95 % uncertainty (s) of the users' TTFT p50 rise: both windows' p50 errors
    (``_p50_se``), or, where the spans are at hand, the present window's
    distribution-free 95 % interval of the median of ``reqs``' TTFT (order statistics
    k/2 +- 1.96 sqrt(k)/2) with the reference's (a median of windows: ``_p50_se``)."""
    m = Z95 * math.hypot(_p50_se(now), _p50_se(before))
    # the window's own requests: over every span kept (minutes) an onset was diluted
    if reqs and now is not None and now.window_s > 0:
        reqs = in_window(reqs, max(u.finished_s for u in reqs), now.window_s)
    t = sorted(u.ttft_s for u in reqs if finite(u.ttft_s))
    k = len(t)
    if k >= 5:
        lo = max(0, math.floor(k / 2 - Z95 * math.sqrt(k) / 2))
        hi = min(k - 1, math.ceil(k / 2 + Z95 * math.sqrt(k) / 2))
        half = (t[hi] - t[lo]) / 2
        m = math.hypot(half, Z95 * _p50_se(before))
    return m


def _users_recent(reqs: Sequence[UserRequest], users: UsersWindow | None,
                  expect: Expectation | None) -> UsersWindow | None:
    """The users' window of the spans that finished in the last ``USERS_NOW_S`` (their
    newest, ``users_window``), with what spans lack taken from ``users`` (the prefix-cache
    hit rate from /metrics counters: vLLM 0.32's spans count no cached tokens); None
    with fewer than ``USERS_NOW`` requests."""
    if users is None or not reqs:
        return None
    end = max(u.finished_s for u in reqs)
    w = users_window(reqs, now_s=end, window_s=USERS_NOW_S,
                     fit=expect.fit if expect is not None else None,
                     running=users.running, waiting=users.waiting)
    if w.requests < USERS_NOW:
        return None
    if w.prefix_cache_hit_rate is None:
        w = replace(w, prefix_cache_hit_rate=users.prefix_cache_hit_rate)
    return w
