""""Why is TTFT high right now?": one verdict over the recent probes and, where the
server tells them, the users' own requests; each cause quotes the numbers behind it.
Pure; shared by the sweep summary, the TUI, the exporter and the fleet view.

Whose TTFT: the users' (``whose == "users"``) when a users' window with requests is
given (``UsersEvidence.users_now``: the OTLP spans or the server's /metrics histograms)
and their TTFT rose beyond the reference (``users_before``'s TTFT p50, else the
expectation at their median prompt) by more than ``USERS_RISE`` of it and its
uncertainty; otherwise the probes'.

Nothing is named unless TTFT is above its expectation beyond the expectation's
uncertainty (``above``): the median excess of the recent probes (or of the last
``NOW_PROBES``, so an onset shows before it owns the median) over the expected TTFT
exceeds ``margin_s`` (the fit line's 95 % interval at the probe's length plus the 95 %
spread of a median of k probes around it, at least ``MIN_QUEUE_S``), or a probe still
in flight is that late (``in_flight_age_s``), or the users' TTFT p50 rose by more than
``USERS_RISE`` of its reference and the 95 % uncertainty of the two windows' p50s.  Below that the answer is "nothing stands out" with the
expected TTFT at each length (``expected``), or, on an idle server with no users'
requests, says so.  Without any expectation (no fit, no baseline, no users' reference)
the causes are judged on the server's own split alone, as before.

Causes, each with its test and the seconds of TTFT it explains (the verdict is the
cause that explains most; a change in the users' traffic, ``cache_hit_drop`` or
``prompts_longer``, comes first when it holds, since the queueing or blocking it brings
is its consequence; the others that hold are listed after it):

- ``queueing``: the server's queue time is at least ``SHARE`` of TTFT (and 5 ms), or
  requests are waiting (``waiting_now``, the gauge as read now, else the probes'
  median), or the users' queue share is at least ``SHARE``; explains the queue time.
- ``head_of_line``: a long prompt was in prefill ahead of the probe (the background
  load's prompts, a user's request whose prefill interval covers the probe's wait, or
  the decodes froze longer than the probe's own prefill should take); explains TTFT
  above the expected TTFT.
- ``slow_prefill``: prefill is slower than the expectation (server prefill or TTFT
  minus the fixed cost at least 1/``SLOW`` x the expected), or the MFU verdict says
  "wrong"; explains the extra prefill time.
- ``prefix_cache``: probes sent after a prefix that should be cached (``--depth``)
  got no cached tokens from the server; explains the prefix's prefill time.
- ``overhead``: client/network/TLS/gateway time (TTFT - the server's own time) is at
  least ``SHARE`` of TTFT (and 20 ms); explains it.
- ``prompts_longer``: the users' median prompt grew by at least ``LONGER`` x; explains
  the grown prompt's prefill at the expectation's slope.
- ``cache_hit_drop``: the users' prefix-cache hit rate fell by at least ``HIT_DROP``
  (0..1); explains the prefill of the prompt share no longer cached.

"not_enough_data" (fewer than 3 recent probes and no users' data, or no split and no
expectation) and "none" (nothing stands out) are valid answers.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Literal, Sequence

from prefilltui.model.diagnosis.ttft_breakdown import probe_parts
from prefilltui.model.fit import LinearFit
from prefilltui.model.fit import finite_median
from prefilltui.model.types import ProbeResult
from prefilltui.model.units import duration, ms
from prefilltui.model.users import UserRequest, UsersEvidence, UsersWindow

Cause = Literal["queueing", "head_of_line", "slow_prefill", "prefix_cache", "overhead",
                "none", "not_enough_data", "prompts_longer", "cache_hit_drop"]
#: Every verdict, in the order the exporter's state set lists them (new ones at the end).
CAUSES: tuple[Cause, ...] = ("queueing", "head_of_line", "slow_prefill", "prefix_cache",
                             "overhead", "none", "not_enough_data", "prompts_longer",
                             "cache_hit_drop")
#: Words for each cause (the headline's first words).
WORDS = {"queueing": "queueing", "head_of_line": "head-of-line blocking",
         "slow_prefill": "slow prefill", "prefix_cache": "prefix cache not used",
         "overhead": "overhead (network/TLS/gateway)", "none": "nothing stands out",
         "not_enough_data": "not enough data", "prompts_longer": "users' prompts got longer",
         "cache_hit_drop": "prefix cache stopped hitting"}
#: Whose TTFT the verdict judges.
Whose = Literal["probes", "users"]

#: A part of TTFT at least this share of it is a cause; the users' TTFT p50 risen by
#: more than this share of its reference is above it.
SHARE = 0.25
#: Prefill at most this fraction of the expected throughput (1/SLOW x the time) is slow.
SLOW = 0.75
#: The users' median prompt grown by this factor is "got longer" (a 1.5x longer median
#: prompt is half as much prefill again: beyond a window's run-to-run scatter).
LONGER = 1.5
#: The users' prefix-cache hit rate fallen by this much (0..1) "stopped hitting" (20
#: points of the prompt tokens: a fifth more prefill work for the same traffic).
HIT_DROP = 0.20
#: The users' TTFT p50 risen by more than this share of its reference is above it (and
#: beyond its uncertainty): the p50 of a 30-s window of ~30 requests moved by up to
#: +-35 % between healthy windows of the fake engine (tests/fakeengine.py), and real
#: traffic is burstier, so half as much again.
USERS_RISE = 0.5
#: A probe whose wait was at least this share spent behind users' longer prompts in
#: prefill was blocked by them (head-of-line): the larger part of its TTFT.
BLOCKED = 0.5
#: Requests waiting at the server that make a line rather than one prompt ahead: more
#: than the probe itself and the one or two requests that arrive while a long prompt's
#: chunk is in prefill (head-of-line behind one prompt keeps a short queue).
LINE = 3
#: Recent probes the verdict reads, and the fewest it needs.
RECENT = 20
MIN_PROBES = 3
#: The newest probes judged on their own too ("now": 12-30 s at a 2-5 s interval), so
#: an onset is seen before it holds the median of ``RECENT``.
NOW_PROBES = 6
#: The share of a group's probes that must be above their own margin for the group to
#: be above (4 of 6): an onset moves them all, contention with users a few.
NOW_SHARE = 2 / 3
#: The users' TTFT p50 risen by more than this share of its reference with no cause in
#: sight (and the probes as expected) is called out ("no single cause found"); a rise
#: their traffic's change explains is named from ``USERS_RISE`` on.  The p50 of a 30-s
#: window moved by up to +50 % between healthy windows of the fake engine.
USERS_RISE_ALONE = 1.0
#: Least absolute size of a cause (s): below it a share is noise on a fast server.
MIN_QUEUE_S = 0.005
MIN_OVERHEAD_S = 0.020
#: 95 % two-sided normal quantile, and the standard error of a median of k normal
#: values in units of sigma/sqrt(k) (sqrt(pi/2)): the spread of the probes' median.
_Z95 = 1.96
_MEDIAN_SE = math.sqrt(math.pi / 2)


@dataclass(frozen=True, slots=True)
class Expectation:
    """What TTFT should be, to hold the recent probes against.

    fit: TTFT = a + b*n of the server at its best (the idle fit held before any change,
    ``--baseline`` or the exporter's ``baseline_run`` / ``expected_throughput``);
    source: where it comes from ("idle fit", "baseline run ..."); mfu / mfu_level: the
    current MFU and its roofline verdict level (``analysis.assess``), when known.
    """

    fit: LinearFit | None = None
    source: str = ""
    mfu: float | None = None
    mfu_level: str | None = None


@dataclass(frozen=True, slots=True)
class Evidence:
    """One cause that holds: the seconds of TTFT it explains and its numbers in words."""

    cause: Cause
    seconds: float
    text: str


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


def _med(vals: Iterable[float | int | None]) -> float | None:
    """``finite_median`` as a float."""
    m = finite_median(vals)
    return None if m is None else float(m)


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _fin(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _expected_ttft(e: Expectation | None, n: int | float | None) -> float | None:
    if e is None or e.fit is None or n is None:
        return None
    return e.fit.intercept_s + e.fit.slope_s_per_token * n


def margin_s(fit: LinearFit | None, n: float, k: int = 1) -> float:
    """The uncertainty (s) of the median TTFT of ``k`` probes at ``n`` prompt tokens
    around ``fit``'s line: the line's 95 % interval there (the intercept's and the
    slope's half-widths added: no covariance is kept, so this is the wider, safe
    bound) plus 1.96 x sqrt(pi/2) x the probes' scatter at ``n`` / sqrt(k) (the 95 %
    spread of a median of k probes); at least ``MIN_QUEUE_S``.  The scatter at ``n`` is
    the fit's own noise model (``LinearFit.noise_sd_s``): for the robust fit, the
    relative scatter of every probe (those that met another request ahead, which normal
    traffic brings, included) x (the expected TTFT + the noise floor s0), so a short
    length is not held to the long probes' milliseconds; for OLS, the residual s.d.
    ``inf`` without a usable interval (a fit of 3 probes at start-up: nothing is named
    on it)."""
    if fit is None:
        return math.inf
    lo, hi = fit.intercept_ci
    slo, shi = fit.slope_ci
    half = (hi - lo) / 2 + max(0.0, n) * (shi - slo) / 2
    spread = _Z95 * _MEDIAN_SE * fit.noise_sd_s(n) / math.sqrt(max(1, k))
    m = half + spread
    return max(m, MIN_QUEUE_S) if math.isfinite(m) else math.inf


def throughput_expectation(tokens_per_s: float, intercept: LinearFit | None, source: str
                           ) -> LinearFit | None:
    """A line for an expected throughput alone (the exporter's ``expected_throughput``:
    slope 1/``tokens_per_s``, taken as exact) with ``intercept``'s fixed cost and its
    interval and scatter (the held idle fit's); None without an intercept or a positive
    throughput.  ``source`` names it in the method field."""
    if intercept is None or not tokens_per_s or not math.isfinite(tokens_per_s) or tokens_per_s <= 0:
        return None
    b = 1.0 / tokens_per_s
    return replace(intercept, slope_s_per_token=b, slope_ci=(b, b), prefill_tokens_per_s=tokens_per_s,
                   prefill_tokens_per_s_ci=(tokens_per_s, tokens_per_s), method=source,
                   c_s_per_token2=None, c_ci=None, knee_tokens=None, slope_se=0.0)


#: Probes a fit needs before it is held as the expectation (below, its interval is too
#: wide to judge by: ``margin_s`` is large anyway, but a fit on a handful of probes can
#: be off by more than its interval says).
HOLD_PROBES = 10


@dataclass
class HeldExpectation:
    """The expectation an incident cannot move (issue 30 item 5).

    ``baseline``: a fixed line (``--baseline RUN``, the exporter's ``baseline_run`` or
    ``expected_throughput``), never replaced.  Without one, ``offer(fit)`` holds the first
    fit of at least ``HOLD_PROBES`` probes with a bounded throughput interval, and
    afterwards replaces it only by one that expects a lower TTFT at both ends of the
    held fit's lengths (the server at its best: an incident only ever makes TTFT
    higher, so it can never move the expectation; a warm-up's slow first probes are
    left behind).  ``users_before``: the users' window of the last verdict that was not
    ``above`` (so an incident stops its updates), via ``observe``.  Not thread-safe:
    one owner (a prober's thread, the app's thread).
    """

    baseline: LinearFit | None = None
    source: str = "baseline run"
    held: LinearFit | None = None
    users_before: UsersWindow | None = None
    min_probes: int = HOLD_PROBES
    _held_n: int = field(default=0, repr=False)
    _fresh: bool = field(default=True, repr=False)  # the held fit is the last offered
    _pending: deque = field(default_factory=lambda: deque(maxlen=4096), repr=False)
    _refs: deque = field(default_factory=lambda: deque(maxlen=REF_WINDOWS), repr=False)
    _joined: float = field(default=-math.inf, repr=False)

    @property
    def fit(self) -> LinearFit | None:
        return self.baseline if self.baseline is not None else self.held

    @property
    def label(self) -> str:
        """Where the expectation comes from, in words."""
        if self.baseline is not None:
            return self.source
        if self.held is None or self._fresh:
            return "idle fit"
        return f"idle fit held at {self._held_n} probes"

    def offer(self, fit: LinearFit | None) -> None:
        """A newer fit of the same server (the all-time or window fit)."""
        if self.baseline is not None or fit is None or fit is self.held:
            return
        self._fresh = False
        lo = fit.prefill_tokens_per_s_ci[0]
        if fit.n < self.min_probes or not fit.prefill_tokens_per_s or not _fin(lo) or lo <= 0:
            return
        h = self.held
        if h is not None:
            ends = (h.x_min, h.x_max) if h.x_max > h.x_min else (0.0, 1.0)
            if any(_line(fit, x) > _line(h, x) for x in ends):
                return
        self.held, self._held_n, self._fresh = fit, fit.n, True

    def observe(self, verdict: "TtftVerdict", users_now: UsersWindow | None,
                at_s: float | None = None) -> None:
        """Note the users' window judged at ``at_s`` (unix s; None: now).

        A window joins the users' reference once it is a whole window old (so the
        present window never overlaps it), no verdict since was ``above`` (an
        ``above`` verdict drops the windows noted so far: they may hold the onset), and
        its traffic is not worse than the reference's by half a cause's threshold (hit
        rate down ``HIT_DROP``/2, median prompt up (``LONGER``-1)/2): an onset too slow
        to be ``above`` at once cannot creep in either.  Windows join half a window
        apart; the reference (``users_before``) is the median, field by field, of the
        last ``REF_WINDOWS`` joined (minutes of traffic): one lucky window does not set
        it."""
        at = time.time() if at_s is None else at_s
        if verdict.above:
            self._pending.clear()
            return
        if users_now is not None and users_now.requests > 0:
            self._pending.append((at, users_now))
        while self._pending and self._pending[0][0] <= at - max(self._pending[0][1].window_s, 1.0):
            t, w = self._pending.popleft()
            spaced = t >= self._joined + max(w.window_s, 1.0) / 2  # windows half apart
            if spaced and (self.users_before is None or not _worse(w, self.users_before)):
                self._refs.append(w)
                self._joined = t
                self.users_before = _median_window(self._refs)

    def expectation(self, mfu: float | None = None, mfu_level: str | None = None
                    ) -> Expectation | None:
        if self.fit is None and mfu_level is None:
            return None
        return Expectation(self.fit, self.label, mfu, mfu_level)

    def reset(self) -> None:
        """Forget the held fit and the users' reference (the TUI's reset)."""
        self.held, self._held_n, self.users_before, self._fresh = None, 0, None, True
        self._pending.clear()
        self._refs.clear()
        self._joined = -math.inf


#: Users' windows the reference is the median of (joined half a window apart: 10
#: windows of 30 s are 2.5 min of traffic).
REF_WINDOWS = 10


def _worse(w: UsersWindow, ref: UsersWindow) -> bool:
    """``w``'s traffic is worse than ``ref``'s by half of a users' cause's threshold (the
    hit rate or the median prompt: what an onset changes; the TTFT p50 is left to
    wander, it moves by a third between healthy windows)."""
    h0, h1 = ref.prefix_cache_hit_rate, w.prefix_cache_hit_rate
    p0, p1 = ref.prompt_tokens_p50, w.prompt_tokens_p50
    return bool((_fin(h0) and _fin(h1) and h0 - h1 >= HIT_DROP / 2)
                or (_fin(p0) and _fin(p1) and p1 >= p0 * (1 + (LONGER - 1) / 2)))


def _median_window(ws: Iterable[UsersWindow]) -> UsersWindow:
    """The field-by-field median of users' windows (source, window and estimate of
    the newest; requests: the median, so the p50's error is not understated)."""
    ws = list(ws)
    last = ws[-1]

    def med(name):
        return _med(getattr(w, name) for w in ws)

    return replace(last, requests=int(med("requests") or 0), ttft_p50_s=med("ttft_p50_s"),
                   ttft_p90_s=med("ttft_p90_s"), ttft_p99_s=med("ttft_p99_s"),
                   prompt_tokens_p50=med("prompt_tokens_p50"),
                   prompt_tokens_p90=med("prompt_tokens_p90"), queue_share=med("queue_share"),
                   expected_ttft_p50_s=med("expected_ttft_p50_s"),
                   unexplained_prefill_share=med("unexplained_prefill_share"),
                   prefix_cache_hit_rate=med("prefix_cache_hit_rate"))


def _line(fit: LinearFit, x: float) -> float:
    return fit.intercept_s + fit.slope_s_per_token * x


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
    ok = [r for r in results if r.ok and not r.warmup and _fin(r.ttft_s)][-recent:]
    users = users_now if users_now is not None and users_now.requests > 0 else None
    reqs = [u for u in ev.user_requests if isinstance(u, UserRequest)]
    if waiting_now is not None and not (math.isfinite(waiting_now) and waiting_now >= 0):
        waiting_now = None
    if in_flight_age_s is not None and not (math.isfinite(in_flight_age_s) and in_flight_age_s >= 0):
        in_flight_age_s = None
    # idle: the server says who else is there (a users' window) and nobody is
    idle = (users_now is not None and users_now.source != "none" and users is None
            and not reqs and not (waiting_now or 0)
            and not (_med(r.server_waiting for r in ok) or 0))
    expected = _expected_rows(ok, expect)
    if len(ok) < MIN_PROBES and (users is None or expect is None or expect.fit is None):
        return TtftVerdict("not_enough_data", f"not enough data: {len(ok)} recent probe(s), "
                           f"{MIN_PROBES} needed", (), _med(r.ttft_s for r in ok), len(ok),
                           idle=idle, expected=expected)
    ttft = _med(r.ttft_s for r in ok) or 0.0
    judge = _Judge(ok, expect, in_flight_age_s, users, users_before, reqs,
                   newest_ok=bool(ok) and results[-1] is ok[-1])
    gated = judge.has_reference
    above = judge.above
    whose: Whose = "users" if judge.users_above else "probes"
    # the probes the causes read: the newest ones when only they are above
    pr = judge.probes
    parts = [probe_parts(r) for r in pr]
    pttft = _med(r.ttft_s for r in pr) or ttft
    wait = waiting_now if waiting_now is not None else _med(r.server_waiting for r in pr)
    found: list[Evidence] = []
    blocked = _blocked(pr, reqs)
    if above or not gated:
        if pr:
            queue = _queueing(pr, parts, pttft, expect, wait, waiting_now is not None, judge)
            found += [e for e in (
                # requests waiting beyond the probe and one step's arrivals: a line,
                # not one prompt ahead
                queue, _head_of_line(pr, expect, blocked, queue is not None and queue.seconds > 0
                                     and (wait or 0) >= LINE),
                _slow_prefill(pr, parts, expect, wait, blocked),
                _prefix_cache(pr, expect), _overhead(pr, parts, pttft)) if e is not None]
        if users is not None and judge.users_above:
            found += [e for e in (_users_queueing(users, wait, found),) if e is not None]
        found.sort(key=lambda e: e.seconds, reverse=True)
        if users is not None and judge.users_above:
            root = [e for e in (_cache_hit_drop(users, users_before, expect),
                                _prompts_longer(users, users_before, expect, found))
                    if e is not None]
            # a change in the users' traffic that explains a good share of their rise
            # is the cause of the queueing or blocking it brings: first
            rise = judge.users_rise
            first = [e for e in root if e.seconds >= SHARE * rise and "p90 prompt grew" not in e.text]
            found = (sorted(first, key=lambda e: e.seconds, reverse=True)
                     + sorted([e for e in root if e not in first] + found,
                              key=lambda e: e.seconds, reverse=True))
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
                     if (v := _med(getattr(p, k) for p in parts)) is not None)
    exp = _med(_expected_ttft(expect, r.tokens) for r in ok)
    pm = f" ± {duration(judge.margin)}" if _fin(judge.margin) else ""
    vs = f"; {duration(exp)} expected ({expect.source}){pm}" if exp is not None and expect else ""
    where = " on an idle server (no users' requests, nothing waiting)" if idle else ""
    if above:
        ratio = f", TTFT {judge.ratio:.1f}x the expected" if _fin(judge.ratio) else ""
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
        e = _expected_ttft(expect, n)
        if _fin(e):
            out.append((n, float(e), margin_s(expect.fit, n, by[n])))
    return tuple(out)


class _Judge:
    """Is TTFT above its expectation beyond the uncertainty?  The probes' (the recent
    ones, or the newest ``NOW_PROBES``), the probe in flight, the users'."""

    def __init__(self, ok, expect: Expectation | None, in_flight_age_s: float | None,
                 users: UsersWindow | None, users_before: UsersWindow | None,
                 reqs: Sequence[UserRequest] = (), newest_ok: bool = True) -> None:
        self.expect, self.probes, self.ratio, self.margin = expect, list(ok), math.nan, math.inf
        self.late = ""
        self.late_s = 0.0
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
            if best is not None:
                _, self.probes, self.margin, self.ratio = best
                self.probes_above = True
        if fit is not None and in_flight_age_s is not None:
            lens = [r.tokens for r in ok if r.tokens] or [fit.x_max]
            worst = max(_line(fit, n) for n in lens)
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
        if users is not None and _fin(users.ttft_p50_s):
            if users_before is not None and users_before.requests and _fin(users_before.ttft_p50_s):
                self.users_ref, self.users_ref_src = users_before.ttft_p50_s, "before"
            else:
                e = users.expected_ttft_p50_s
                if not _fin(e):
                    e = _expected_ttft(expect, users.prompt_tokens_p50)
                if _fin(e):
                    self.users_ref, self.users_ref_src = e, "expected at their median prompt"
        self.users_rise = (users.ttft_p50_s - self.users_ref) if self.users_ref is not None else 0.0
        self.users_margin = max(USERS_RISE * (self.users_ref or 0.0), MIN_QUEUE_S,
                                _users_p50_margin(users, users_before if self.users_ref_src
                                                  == "before" else None, reqs))
        self.users_above = self.users_ref is not None and self.users_rise > self.users_margin

    @staticmethod
    def _excess(group, fit: LinearFit):
        """(median excess, its margin, median ratio) of ``group`` over ``fit``; the
        excess is None unless at least ``NOW_SHARE`` of the probes are above their own
        single-probe margin too (a few probes that met a user's prompt ahead do not
        move a small group's median by themselves)."""
        xs = [(r.ttft_s - _line(fit, r.tokens), margin_s(fit, r.tokens, len(group)),
               r.ttft_s / _line(fit, r.tokens) if _line(fit, r.tokens) > 0 else None,
               margin_s(fit, r.tokens, 1))
              for r in group if r.tokens]
        each = sum(1 for x, _, _, m1 in xs if x > m1)
        x = _med(x for x, _, _, _ in xs) if xs and each >= NOW_SHARE * len(xs) else None
        return x, _med(m for _, m, _, _ in xs), _med(q for _, _, q, _ in xs)

    @property
    def has_reference(self) -> bool:
        return (self.expect is not None and self.expect.fit is not None) or self.users_ref is not None

    @property
    def above(self) -> bool:
        return self.probes_above or bool(self.late) or self.users_above

    def words(self, ttft: float) -> str:
        """Whose TTFT, against what."""
        u = self.users
        if u is not None and _fin(u.ttft_p50_s):
            est = " (bucket estimate)" if u.estimate else ""
            ref = ""
            if self.users_ref is not None:
                ref = (f", was {duration(self.users_ref)}" if self.users_ref_src == "before"
                       else f", {duration(self.users_ref)} {self.users_ref_src}")
            return (f"users' TTFT p50 {duration(u.ttft_p50_s)}{est}{ref} over {u.requests:,} "
                    f"requests")
        exp = _med(_expected_ttft(self.expect, r.tokens) for r in self.probes)
        src = f", {duration(exp)} expected ({self.expect.source})" if exp is not None else ""
        return f"probes' TTFT {duration(ttft)}{src}"


def _p50_se(w: UsersWindow | None) -> float:
    """The standard error (s) of a users' window's TTFT p50: sqrt(pi/2) x sigma /
    sqrt(requests), sigma estimated from the p90 - p50 spread (1.2816 sigma for a normal
    distribution; the users' TTFT has a longer tail, so this errs wide); 0 without it."""
    if w is None or not w.requests or not (_fin(w.ttft_p90_s) and _fin(w.ttft_p50_s)):
        return 0.0
    sigma = max(0.0, w.ttft_p90_s - w.ttft_p50_s) / 1.2816
    return _MEDIAN_SE * sigma / math.sqrt(w.requests)


def _users_p50_margin(now: UsersWindow, before: UsersWindow | None,
                      reqs: Sequence[UserRequest] = ()) -> float:
    """The 95 % uncertainty (s) of the users' TTFT p50 rise: both windows' p50 errors
    (``_p50_se``), or, where the spans are at hand, the present window's
    distribution-free 95 % interval of the median of ``reqs``' TTFT (order statistics
    k/2 +- 1.96 sqrt(k)/2) with the reference's (a median of windows: ``_p50_se``)."""
    m = _Z95 * math.hypot(_p50_se(now), _p50_se(before))
    t = sorted(u.ttft_s for u in reqs if _fin(u.ttft_s))
    k = len(t)
    if k >= 5:
        lo = max(0, math.floor(k / 2 - _Z95 * math.sqrt(k) / 2))
        hi = min(k - 1, math.ceil(k / 2 + _Z95 * math.sqrt(k) / 2))
        half = (t[hi] - t[lo]) / 2
        m = math.hypot(half, _Z95 * _p50_se(before))
    return m


def _users_queueing(users: UsersWindow, wait: float | None, found) -> Evidence | None:
    """The users' queue share of TTFT (their spans' time in queue, or the histograms')."""
    if any(e.cause == "queueing" for e in found):
        return None
    q = users.queue_share
    if not _fin(q) or q < SHARE or not _fin(users.ttft_p50_s):
        return None
    now = f"; {wait:,.0f} waiting now" if wait else ""
    return Evidence("queueing", q * users.ttft_p50_s, f"users' time in queue {_pct(q)} of their "
                    f"TTFT (p50 {duration(users.ttft_p50_s)}){now}")


def _cache_hit_drop(users: UsersWindow, before: UsersWindow | None,
                    expect: Expectation | None) -> Evidence | None:
    if before is None:
        return None
    h0, h1 = before.prefix_cache_hit_rate, users.prefix_cache_hit_rate
    if not (_fin(h0) and _fin(h1)) or h0 - h1 < HIT_DROP:
        return None
    p0, p1 = before.prompt_tokens_p50, users.prompt_tokens_p50
    n = p1 if _fin(p1) else p0
    lost = None  # cached tokens per median prompt lost (a longer prompt's lower rate is not)
    if _fin(p0) and _fin(p1):
        lost = h0 * p0 - h1 * p1
        if lost < HIT_DROP * p0:
            return None  # the same prefix cached, in longer prompts: prompts_longer's
    b = expect.fit.slope_s_per_token if expect is not None and expect.fit is not None else None
    if b and lost is not None:
        secs = lost * b
    elif b and _fin(n):
        secs = (h0 - h1) * n * b
    else:
        secs = max(0.0, (users.ttft_p50_s or 0) - (before.ttft_p50_s or 0))
    cost = (f"; ≈ {duration(secs)} more prefill per request at their median {n:,.0f}-token "
            f"prompt" if b and _fin(n) else "")
    q0, q1 = before.prompt_tokens_p90, users.prompt_tokens_p90
    diluted = _fin(q0) and _fin(q1) and q0 > 0 and q1 >= LONGER * q0
    why = (f" (the users' p90 prompt grew {q0:,.0f} → {q1:,.0f} tokens: long uncached prompts "
           "lower the rate too)" if diluted else "")
    return Evidence("cache_hit_drop", secs, f"users' prefix-cache hit rate {_pct(h0)} → "
                    f"{_pct(h1)}{cost}{why}")


def _prompts_longer(users: UsersWindow, before: UsersWindow | None,
                    expect: Expectation | None, found) -> Evidence | None:
    if before is None:
        return None
    p0, p1 = before.prompt_tokens_p50, users.prompt_tokens_p50
    if not (_fin(p0) and _fin(p1)) or p0 <= 0 or p1 < LONGER * p0:
        return None
    b = expect.fit.slope_s_per_token if expect is not None and expect.fit is not None else None
    secs = (p1 - p0) * b if b else max(0.0, (users.ttft_p50_s or 0) - (before.ttft_p50_s or 0))
    slow = next((e for e in found if e.cause == "slow_prefill"), None)
    per = ("prefill per token slower too (slow prefill, below)" if slow is not None
           else "prefill per token unchanged")
    cost = f" (≈ {duration(secs)} more prefill each)" if b else ""
    return Evidence("prompts_longer", secs, f"users' median prompt {p0:,.0f} → {p1:,.0f} "
                    f"tokens{cost}; {per}")


def _queueing(ok, parts, ttft: float, expect: Expectation | None, wait: float | None,
              now: bool, judge: "_Judge") -> Evidence | None:
    q = _med(p.queue_s for p in parts)
    run = _med(r.server_running for r in ok)
    wword = "waiting now" if now else "waiting"
    load = ""
    if wait is not None or run is not None:
        load = f", {wait or 0:,.0f} {wword}, {run or 0:g} running"
    if judge.late_s > 0 and wait is not None and wait >= 1:
        # the probe in flight is the news: completed probes predate the queue
        return Evidence("queueing", judge.late_s, f"{wait:,.0f} requests {wword} at the server; "
                        f"{judge.late}")
    if q is not None and q >= max(SHARE * ttft, MIN_QUEUE_S):
        src = {p.queue_source for p in parts if p.queue_s is not None}
        est = " (estimated: TTFT - prefill - idle overhead)" if src <= {"estimated", "idle"} else ""
        return Evidence("queueing", q, f"queue {duration(q)} of TTFT {duration(ttft)} "
                        f"({_pct(q / ttft)}){est}{load}")
    if wait is not None and wait >= 1 and q is None:
        # requests wait at the server but its queue time is not this probe's own (several
        # requests finished in the window): what TTFT has beyond the expectation
        extra = _med(max(0.0, r.ttft_s - e) for r in ok
                     if (e := _expected_ttft(expect, r.tokens)) is not None)
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


def _blocked(ok, reqs: Sequence[UserRequest]) -> dict[int, tuple[float, int]]:
    """Probes (index into ``ok``) that waited behind users' longer prompts: the seconds
    of users' prefill (spans' [arrival + queue, + prefill]) between the probe's send
    and its first token, of requests that arrived before it with more prompt tokens,
    when that is at least ``BLOCKED`` of its TTFT (in a long queue other prompts are
    in prefill too, for a small part of the wait); with the longest such prompt."""
    out: dict[int, tuple[float, int]] = {}
    first = min((r.started_at for r in ok if r.started_at), default=0.0)
    spans = [(u.prefill_start_s, u.prefill_end_s, u.arrival_s, u.prompt_tokens) for u in reqs
             if _fin(u.prefill_start_s) and _fin(u.prefill_end_s) and u.prompt_tokens
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


def _head_of_line(ok, expect: Expectation | None, blocked: dict[int, tuple[float, int]],
                  queued: bool) -> Evidence | None:
    if queued:
        return None  # requests wait in line: queueing (above), not one prompt ahead
    hits = []
    for i, r in enumerate(ok):
        exp = _expected_ttft(expect, r.tokens)
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
        elif froze:
            # the decodes froze longer than this prefill: the rest was another prefill
            hits.append((r, exp, 0, r.decode_stall_s - own, 0))
    if len(hits) < max(1, len(ok) // 3):
        return None
    extra = _med(h[3] for h in hits)
    ttft = _med(h[0].ttft_s for h in hits)
    ahead = _med(h[2] for h in hits if h[2])
    users = _med(h[4] for h in hits if h[4])
    stall = _med(h[0].decode_stall_s for h in hits)
    if ahead:
        what = f"a median {ahead:,.0f} prompt tokens in prefill ahead of the probe"
    elif users:
        what = (f"users' long prompts (median {users:,.0f} tokens) in prefill when the probe "
                "was sent")
    else:
        what = f"decodes froze {duration(stall)}, longer than the probe's own prefill"
    exp = _med(h[1] for h in hits)
    vs = f" vs {duration(exp)} expected ({expect.source})" if exp is not None and expect else ""
    if extra is None:  # no expectation: the stall or the ahead tokens alone
        extra = stall or 0.0
    if ttft and extra < SHARE * ttft:
        return None
    return Evidence("head_of_line", extra, f"{what} in {len(hits)} of {len(ok)} probes; "
                    f"TTFT {duration(ttft)}{vs}")


def _slow_prefill(ok, parts, expect: Expectation | None, wait: float | None,
                  blocked: dict[int, tuple[float, int]]) -> Evidence | None:
    if expect is not None and expect.mfu_level == "wrong" and expect.mfu is not None:
        pre = _med(p.prefill_s for p in parts) or _med(r.ttft_s for r in ok) or 0.0
        return Evidence("slow_prefill", pre * 0.5, f"MFU {expect.mfu:.1%} of peak: far below "
                        "what the hardware does (roofline verdict)")
    if expect is None or expect.fit is None or expect.fit.slope_s_per_token <= 0:
        return None
    b = expect.fit.slope_s_per_token
    # probes sent after a prefix (--depth) prefill it too when it is not cached: the
    # prefix-cache cause speaks for them
    # probes that waited behind a user's longer prompt: head-of-line speaks for them
    keep = [i for i, r in enumerate(ok) if not _after_prefix(r) and i not in blocked]
    ok, parts = [ok[i] for i in keep], [parts[i] for i in keep]
    if len(ok) < MIN_PROBES:
        return None
    rows = [(p.prefill_s, r.tokens) for p, r in zip(parts, ok)
            if p.prefill_s is not None and r.tokens]
    if len(rows) >= MIN_PROBES:  # the server's own prefill time against the expected
        # expected prefill: the expected TTFT less the overhead outside the server (the
        # fixed cost is partly the server's own), never below b x n
        over = _med(p.overhead_s for p in parts) or 0.0
        exp = [(pre, max(b * n, expect.fit.intercept_s + b * n - over)) for pre, n in rows]
        ratio = _med(pre / e for pre, e in exp if e > 0)
        extra = _med(pre - e for pre, e in exp)
        what = "server prefill"
    else:  # TTFT above the expected line, per probe: only when nothing else explains it
        waiting = wait
        if (waiting or 0) >= 1 or any(r.load_ahead_tokens for r in ok):
            return None  # TTFT holds queueing or a prompt ahead: not the prefill's speed
        pts = [(r.ttft_s, _expected_ttft(expect, r.tokens), r.tokens) for r in ok]
        ratio = _med((t - expect.fit.intercept_s) / (e - expect.fit.intercept_s)
                     for t, e, _ in pts if e is not None and e > expect.fit.intercept_s)
        extra = _med(t - e for t, e, _ in pts if e is not None)
        what = ("TTFT minus the fixed cost" if waiting is not None
                else "TTFT minus the fixed cost (no server metrics: queueing not excluded)")
    if ratio is None or extra is None or ratio < 1 / SLOW:
        return None
    tps = 1.0 / b
    return Evidence("slow_prefill", extra, f"{what} {ratio:.2f}x the expected ({tps:,.0f} "
                    f"prompt tok/s from the {expect.source}; now ≈ {tps / ratio:,.0f} tok/s)")


def _after_prefix(r: ProbeResult) -> bool:
    """A ``--depth`` probe sent after a prefix that should be cached."""
    return r.depth is not None and r.depth.depth > 0 and r.depth.role != "prefix"


def _prefix_cache(ok, expect: Expectation | None) -> Evidence | None:
    after = [r for r in ok if _after_prefix(r)]
    miss = [r for r in after if not r.cached_tokens]
    if not after or len(miss) * 2 < len(after):
        return None
    depth = int(_med(r.depth.depth for r in miss) or 0)
    b = expect.fit.slope_s_per_token if expect is not None and expect.fit is not None else None
    saved = depth * b if b else 0.0
    cost = f" (≈ {duration(saved)} of prefill it should have saved)" if b else ""
    return Evidence("prefix_cache", saved, f"{len(miss)} of {len(after)} probes sent after a "
                    f"{depth:,}-token prefix got 0 cached tokens from the server{cost}")


def _overhead(ok, parts, ttft: float) -> Evidence | None:
    o = _med(p.overhead_s for p in parts)
    if o is None or o < max(SHARE * ttft, MIN_OVERHEAD_S):
        return None
    conn = _med(r.connect_s for r in ok)
    extra = f"; new connections {duration(conn)} each" if conn is not None else ""
    return Evidence("overhead", o, f"TTFT - server time {duration(o)} of TTFT {duration(ttft)} "
                    f"({_pct(o / ttft)}): network, TLS or a gateway{extra}")


def expected_words(tokens: int, expected_s: float, margin_s: float) -> str:
    """One length's expectation on screen: "128 tok 70 ± 4 ms"; when the uncertainty is
    as large as the expected TTFT itself the fit does not pin it there, and it says so
    ("4 tok not pinned (± 12,639 ms)") instead of a value that means nothing.  ms only
    here, seconds in."""
    if not (margin_s < expected_s):  # NaN / inf included
        return f"{tokens:,} tok not pinned (± {ms(margin_s, 0)})"
    return f"{tokens:,} tok {ms(expected_s, 0, unit=False)} ± {ms(margin_s, 0)}"

