""""Why is TTFT high?" with the users' data and the present: whose TTFT, the causes only
the users' requests show, the held expectation, the probe in flight and the waiting
gauge now; and no cause unless TTFT is above the expectation beyond its uncertainty."""

from __future__ import annotations

import random
import time

import pytest

from prefilltui.model.fit import fit_ols
from prefilltui.model.types import ProbeResult
from prefilltui.model.users import UserRequest, UsersEvidence, UsersWindow
from prefilltui.model.diagnosis import (
    CAUSES, Expectation, HeldExpectation, throughput_expectation, ttft_verdict,
)
from prefilltui.model.diagnosis.verdict import margin_s
from prefilltui.render.load_text import format_verdict
from prefilltui.tui.viewmodel import verdict_line

LENGTHS = (128, 512, 1024, 2048)
A, B = 0.02, 0.0005  # the idle server: TTFT = 20 ms + 0.5 ms x n


def line(n):
    return A + B * n


def baseline(k=40, noise=0.004, seed=1):
    """A healthy run's probes with Gaussian scatter and their fit."""
    rnd = random.Random(seed)
    xs = [LENGTHS[i % 4] for i in range(k)]
    ys = [line(n) + rnd.gauss(0, noise) for n in xs]
    return fit_ols(xs, ys)


#: the idle line itself (no scatter): the figures in words are exact against it
EXACT = fit_ols(list(LENGTHS) * 2, [line(n) for n in LENGTHS] * 2)


def probes(ttft, k=12, t0=1000.0, step=3.0, **kw):
    out = []
    for i in range(k):
        n = LENGTHS[i % 4]
        f = {key: (v(n) if callable(v) else v) for key, v in kw.items()}
        out.append(ProbeResult(seq=i + 1, requested_tokens=n, prompt_tokens=n, ok=True,
                               ttft_s=ttft(n), started_at=t0 + i * step, **f))
    return out


def test_no_cause_on_three_probes_at_start_up():
    """It said "queueing: queue 10 ms of TTFT 36 ms" on a healthy server at start-up:
    the fit of those 3 probes has too wide an interval to name anything."""
    rs = probes(lambda n: line(n) + 0.01, k=3, queue_s=0.010, server_prefill_s=lambda n: B * n,
                overhead_s=0.006, server_waiting=0)
    fit = fit_ols([r.tokens for r in rs], [r.ttft_s + (0.002 if i % 2 else -0.002)
                                          for i, r in enumerate(rs)])
    v = ttft_verdict(rs, Expectation(fit, "idle fit"))
    assert v.cause == "none" and not v.above and not v.evidence
    assert v.headline.startswith("nothing stands out")


def test_healthy_scatter_never_names_a_cause():
    """30 samples of a healthy server's recent probes against its own held fit: never a
    cause, never "no single cause found" (6 of 30 said so in the TUI)."""
    fit = baseline()
    rnd = random.Random(7)
    said = []
    for _sample in range(30):
        rs = probes(lambda n: line(n) + rnd.gauss(0, 0.004), k=20, queue_s=0.0,
                    server_prefill_s=lambda n: B * n, overhead_s=0.02, server_waiting=0)
        said.append(ttft_verdict(rs, Expectation(fit, "idle fit")))
    assert all(v.cause == "none" and not v.above for v in said), [v.headline for v in said]
    assert not any("no single cause" in v.headline for v in said)


def test_margin_is_the_line_interval_plus_the_median_spread():
    fit = baseline()  # OLS: the same noise at every length, its residual s.d.
    half = ((fit.intercept_ci[1] - fit.intercept_ci[0]) / 2
            + 1024 * (fit.slope_ci[1] - fit.slope_ci[0]) / 2)
    assert fit.noise_sd_s(1024) == fit.noise_sd_s(128) == fit.resid_std_s
    assert abs(margin_s(fit, 1024, 1) - max(0.005, half + 1.96 * 1.2533 * fit.resid_std_s)) < 1e-6
    assert margin_s(fit, 1024, 20) < margin_s(fit, 1024, 1)
    assert margin_s(fit_ols([1, 2, 3], [1, 1.5, 3.5]), 2, 1) > 0.1  # 3 probes: wide


def _slow_server_fit(rel=0.04, seed=3):
    """A robust fit of a slow server's sweep (TTFT = 12 ms + 2.4 ms x n: 1k tokens in
    2.5 s), 8 probes at each of 4 to 2,048 tokens with 4 % relative noise and 0.5 ms of
    jitter: the long probes' noise is 100 ms, the 4-token probes' 1 ms."""
    from prefilltui.model.fit import fit_robust

    rnd = random.Random(seed)
    xs = [(4, 256, 512, 1024, 2048)[i % 5] for i in range(40)]
    ys = [(0.012 + 0.0024 * n) * (1 + rnd.gauss(0, rel)) + rnd.gauss(0, 0.0005) for n in xs]
    return fit_robust(xs, ys)


def test_a_short_length_is_held_to_its_own_noise_not_the_long_probes():
    """A new user's run read "expected TTFT: 4 tok not pinned (± 108 ms)" beside an
    intercept pinned at ± 2.3 ms (the TUI: "TTFT ok: 4→?, 1k→2,444 ms"): the spread of
    the median was one absolute scatter over every length, the long probes' 100 ms.
    The robust fit's noise model, s_rel x (TTFT + s0), gives each length its own."""
    from prefilltui.model.diagnosis import expected_words
    from prefilltui.tui.viewmodel import verdict_forms

    fit = _slow_server_fit()
    assert fit.intercept_ci[1] - fit.intercept_ci[0] < 0.002  # the intercept is pinned
    s_rel, s0 = fit.rel_scatter, fit.noise_floor_s
    assert 0.03 < s_rel < 0.06 and s0 is not None
    assert fit.noise_sd_s(2048) == pytest.approx(s_rel * (fit.predict(2048) + s0))
    assert fit.noise_sd_s(4) == pytest.approx(s_rel * (fit.predict(4) + s0))
    assert fit.noise_sd_s(4) < 0.002 < 0.1 < fit.noise_sd_s(2048)
    half = (fit.intercept_ci[1] - fit.intercept_ci[0]) / 2 + 4 * (fit.slope_ci[1] - fit.slope_ci[0]) / 2
    assert margin_s(fit, 4, 4) == pytest.approx(max(0.005, half + 1.96 * 1.2533 * fit.noise_sd_s(4) / 2))
    rs = [ProbeResult(seq=i + 1, requested_tokens=n, prompt_tokens=n, ok=True,
                      ttft_s=0.012 + 0.0024 * n, started_at=1000.0 + i)
          for i, n in enumerate((4, 256, 512, 1024, 2048) * 4)]
    v = ttft_verdict(rs, Expectation(fit, "idle fit"))
    assert v.cause == "none" and not v.above
    words = [expected_words(*row) for row in v.expected]
    assert words[0] == "4 tok 21 ± 5 ms"  # was "4 tok not pinned (± 145 ms)"
    assert words[-1] == "2,048 tok 4,920 ± 342 ms"  # was ± 227: the long probes' own noise
    assert verdict_forms(v)[2] == "TTFT ok: 4→21, 2k→4,920 ms"  # was "4→?"


def test_a_fit_whose_probes_scatter_by_half_pins_no_length():
    """The same relative noise model where the probes scatter by 50 %: no length is
    pinned, the longest included ("2,045 tok 4,971 ± 2,689 ms" once read as pinned
    beside a "not pinned" 4 tok)."""
    from prefilltui.model.diagnosis import expected_words

    fit = _slow_server_fit(rel=0.5)
    rows = [(n, fit.intercept_s + fit.slope_s_per_token * n, margin_s(fit, n, 1))
            for n in (4, 2048)]
    assert [expected_words(*r).split(" (")[0] for r in rows] == ["4 tok not pinned",
                                                                "2,048 tok not pinned"]


def test_cache_hit_rate_collapse_judged_on_the_users_ttft():
    """The probes defeat the cache by design: their TTFT is as expected while the
    users' p50 rose several-fold; the verdict judges the users' and names the cache."""
    fit = EXACT
    rs = probes(line, k=20, queue_s=0.0, server_prefill_s=lambda n: B * n, overhead_s=0.02,
                server_waiting=0)
    before = UsersWindow("traces", 30.0, 60, ttft_p50_s=0.40, prompt_tokens_p50=2000,
                         prefix_cache_hit_rate=0.62, queue_share=0.02)
    now = UsersWindow("traces", 30.0, 55, ttft_p50_s=1.05, prompt_tokens_p50=2000,
                      prefix_cache_hit_rate=0.0, queue_share=0.03)
    v = ttft_verdict(rs, Expectation(fit, "idle fit"),
                     users_evidence=UsersEvidence(users_now=now, users_before=before))
    assert v.whose == "users" and v.above and v.cause == "cache_hit_drop"
    assert "users' prefix-cache hit rate 62% → 0%" in v.headline
    assert "≈ 620 ms more prefill per request at their median 2,000-token prompt" in v.headline
    assert "users' TTFT p50 1,050 ms, was 400 ms over 55 requests" in v.judged
    assert format_verdict(v)[0].startswith("why is users' TTFT high? prefix cache stopped hitting")


def test_users_prompts_got_longer_prefill_per_token_unchanged():
    fit = EXACT
    rs = probes(line, k=20, queue_s=0.0, server_prefill_s=lambda n: B * n, overhead_s=0.02,
                server_waiting=0)
    before = UsersWindow("traces", 30.0, 50, ttft_p50_s=0.47, prompt_tokens_p50=900,
                         prefix_cache_hit_rate=0.0)
    now = UsersWindow("traces", 30.0, 40, ttft_p50_s=3.07, prompt_tokens_p50=6100,
                      prefix_cache_hit_rate=0.0)
    v = ttft_verdict(rs, Expectation(fit, "idle fit"),
                     users_evidence=UsersEvidence(users_now=now, users_before=before))
    assert v.cause == "prompts_longer" and v.whose == "users"
    assert ("users' median prompt 900 → 6,100 tokens (≈ 2,600 ms more prefill each); "
            "prefill per token unchanged") in v.headline


def test_head_of_line_from_the_users_spans():
    """A user's 8k prompt in prefill when each probe was sent: head-of-line, with the
    users' prompt length, not "queueing" (0 waiting) or "no single cause found"."""
    fit = baseline()
    rs = probes(lambda n: line(n) + 1.5, k=12, queue_s=0.0, server_waiting=0,
                server_prefill_s=lambda n: B * n + 1.5, overhead_s=0.02)
    users = [UserRequest(arrival_s=r.started_at - 0.5, prompt_tokens=8192, ttft_s=4.0,
                         queue_s=0.0, prefill_s=4.0) for r in rs]
    now = UsersWindow("traces", 30.0, 12, ttft_p50_s=4.0, prompt_tokens_p50=8192)
    v = ttft_verdict(rs, Expectation(fit, "idle fit"),
                     users_evidence=UsersEvidence(users_now=now, users_before=now,
                                                  user_requests=users))
    assert v.cause == "head_of_line", v.headline
    assert "users' long prompts (median 8,192 tokens) in prefill when the probe was sent in " \
           "12 of 12 probes" in v.headline
    assert "slow_prefill" not in [e.cause for e in v.evidence]


def test_a_probe_in_flight_and_the_waiting_gauge_now():
    """In a queue probes rarely complete: the completed ones predate the onset (as
    expected), the one in flight for 12 s and the 52 waiting now are the evidence."""
    fit = baseline()
    rs = probes(line, k=20, queue_s=0.0, server_prefill_s=lambda n: B * n, overhead_s=0.02,
                server_waiting=1)
    v = ttft_verdict(rs, Expectation(fit, "idle fit"), in_flight_age_s=12.0, waiting_now=52)
    assert v.cause == "queueing" and v.above
    assert "52 requests waiting now at the server; a probe in flight 12.0 s" in v.headline
    # the same probes without the present: nothing stands out
    assert ttft_verdict(rs, Expectation(fit, "idle fit")).cause == "none"


def test_the_probe_out_of_the_queue_while_the_next_is_young():
    """In a queue a probe completes rarely; the next starts at once and is young for a
    second.  The real vLLM's exporter then said "none" for a scrape after every probe
    that came out of the queue (tests/integration/test_vllm_incidents.py): the newest
    probe, 11.6 s where ≤ 1.04 s was expected, is the evidence until the next is late or
    on time."""
    fit = baseline()
    rs = probes(line, k=20, queue_s=0.0, server_prefill_s=lambda n: B * n, overhead_s=0.02,
                server_waiting=0)
    rs[-1].ttft_s, rs[-1].server_waiting = 11.6, 6  # the one out of the queue
    v = ttft_verdict(rs, Expectation(fit, "idle fit"), in_flight_age_s=0.3, waiting_now=6)
    assert v.cause == "queueing" and v.above, v.headline
    assert ("6 requests waiting now at the server; the last probe took 11.6 s, ≤ 1,043 ms "
            "expected at the longest length (the next in flight 300 ms)") in v.headline
    # one slow probe of 20 in a finished run (sweep, report: nothing in flight) is not
    # "now"; nor when the one in flight is older than it (its own age speaks), nor when
    # the newest came back on time
    assert ttft_verdict(rs, Expectation(fit, "idle fit"), waiting_now=6).cause == "none"
    late = ttft_verdict(rs, Expectation(fit, "idle fit"), in_flight_age_s=0.5, waiting_now=0)
    assert late.cause == "none" and late.above and "the last probe took 11.6 s" in late.headline
    on_time = rs + probes(line, k=1, t0=1100.0, queue_s=0.0, server_prefill_s=lambda n: B * n,
                          overhead_s=0.02, server_waiting=0)
    assert ttft_verdict(on_time, Expectation(fit, "idle fit"), in_flight_age_s=0.3,
                        waiting_now=6).cause == "none"
    failed = rs + [ProbeResult(seq=99, requested_tokens=128, ok=False, started_at=1200.0)]
    assert ttft_verdict(failed, Expectation(fit, "idle fit"), in_flight_age_s=0.3,
                        waiting_now=6).cause == "none"  # not the newest: not now


def test_an_idle_server_says_so():
    fit = EXACT
    rs = probes(line, k=20, queue_s=0.0, server_prefill_s=lambda n: B * n, overhead_s=0.02,
                server_waiting=0, server_running=0)
    v = ttft_verdict(rs, Expectation(fit, "idle fit"),
                     users_evidence=UsersEvidence(users_now=UsersWindow("traces", 30.0, 0)))
    assert v.cause == "none" and v.idle
    assert v.headline.startswith("nothing stands out (idle server, no users' requests)")
    lines = format_verdict(v)
    assert not any("why is" in x for x in lines)
    assert lines[1].startswith("  expected TTFT on an idle server (no users' requests): 128 tok 84 ± 5 ms, 512 tok 276 ± 5 ms")
    assert verdict_line(v).startswith("TTFT as expected (idle server, no users): 128 tok 84 ±")
    assert set(CAUSES) >= {"prompts_longer", "cache_hit_drop"}


def test_held_expectation_does_not_follow_a_slowdown():
    hold = HeldExpectation()
    fit = baseline()
    hold.offer(fit)
    slow = fit_ols([n for n in LENGTHS * 5], [A + 2 * B * n for n in LENGTHS * 5])
    hold.offer(slow)
    assert hold.fit is fit and hold.label == "idle fit held at 40 probes"
    fast = fit_ols([n for n in LENGTHS * 5], [A - 0.001 + 0.9 * B * n + (0.001 if i % 2 else 0)
                                            for i, n in enumerate(LENGTHS * 5)])
    hold.offer(fast)
    assert hold.fit is fast and hold.label == "idle fit"
    # a 2x slower prefill stays 2x against it however long it lasts
    rs = probes(lambda n: A + 2 * B * n, k=20, queue_s=0.0, server_prefill_s=lambda n: 2 * B * n,
                overhead_s=0.02, server_waiting=0)
    v = ttft_verdict(rs, hold.expectation())
    assert v.cause == "slow_prefill" and "server prefill 2.2" in v.headline
    base = HeldExpectation(baseline=fit, source="baseline run x.jsonl")
    base.offer(fast)
    assert base.fit is fit and base.label == "baseline run x.jsonl"


def test_throughput_expectation_keeps_the_fixed_cost():
    fit = baseline()
    t = throughput_expectation(1000.0, fit, "config")
    assert t.slope_s_per_token == 0.001 and t.intercept_s == fit.intercept_s
    assert throughput_expectation(0, fit, "config") is None
    assert throughput_expectation(1000.0, None, "config") is None


def _window_probes(b, k=40, t0=1000.0):
    return [ProbeResult(seq=i + 1, requested_tokens=n, prompt_tokens=n, ok=True,
                        ttft_s=A + b * n + (0.001 if i % 3 else -0.001), started_at=t0 + 3 * i,
                        queue_s=0.0, server_prefill_s=b * n, overhead_s=0.02, server_waiting=0)
            for i, n in enumerate([LENGTHS[j % 4] for j in range(k)])]


def test_the_exporter_window_is_held_against_the_fit_before_the_change():
    """A true 2x slower prefill, once the 40-probe window holds only slow probes: the
    window fit has caught up (it read 0.97x), the held one has not."""
    from prefilltui.exporter.config import TargetConfig
    from prefilltui.exporter.target import window_health

    cfg = TargetConfig(url="http://127.0.0.1:9", window=40)
    hold = HeldExpectation()
    healthy = window_health(_window_probes(B), None, cfg, hold)
    assert healthy.ttft_verdict.cause == "none" and hold.fit is not None
    slow = window_health(_window_probes(2 * B), None, cfg, hold)
    assert slow.ttft_verdict.cause == "slow_prefill", slow.ttft_verdict.headline
    assert "server prefill 2.00x the expected" in slow.ttft_verdict.headline
    assert "from the idle fit held at " in slow.ttft_verdict.headline
    # without the hold (the window's own fit, as before) it reads nothing
    assert window_health(_window_probes(2 * B), None, cfg).ttft_verdict.cause == "none"
    # a numeric expected_throughput sets the slope: 1,000 tok/s is 2x the healthy 2,000
    fixed = window_health(_window_probes(B), None,
                          TargetConfig(url="http://127.0.0.1:9", window=40,
                                       expected_throughput=1000.0), HeldExpectation())
    assert fixed.ttft_verdict.cause == "none"
    assert "expected_throughput 1,000 tok/s" in fixed.ttft_verdict.headline


def test_an_expectation_wider_than_itself_says_not_pinned():
    """A new user's sweep read "4 tok 35 ± 12,639 ms" (a linear fit over a curved CPU
    sweep): an uncertainty as large as the expected TTFT pins nothing, and says so."""
    from prefilltui.model.diagnosis import expected_words

    assert expected_words(128, 0.084, 0.005) == "128 tok 84 ± 5 ms"
    assert expected_words(4, 0.035, 12.639) == "4 tok not pinned (± 12,639 ms)"
    assert expected_words(4, 0.035, float("nan")).startswith("4 tok not pinned")
    assert expected_words(4_006, 31.315, 19.951) == "4,006 tok 31,315 ± 19,951 ms"


#: the users' windows of the cache-collapse test: the reference, the same traffic
#: now, and the collapse
_BEFORE = UsersWindow("traces", 30.0, 60, ttft_p50_s=0.40, prompt_tokens_p50=2000,
                      prefix_cache_hit_rate=0.62, queue_share=0.02)
_COLLAPSED = UsersWindow("traces", 30.0, 55, ttft_p50_s=1.05, prompt_tokens_p50=2000,
                         prefix_cache_hit_rate=0.0, queue_share=0.03)


def _idle_probes():
    return probes(line, k=20, queue_s=0.0, server_prefill_s=lambda n: B * n,
                  overhead_s=0.02, server_waiting=0)


def test_users_evidence_fills_its_reference_only_when_it_has_none():
    ev = UsersEvidence(users_now=_COLLAPSED, user_requests=[UserRequest(arrival_s=1.0)])
    assert isinstance(ev.user_requests, tuple) and hash(ev) == hash(ev)  # a cache key
    assert ev.with_before(None) is ev
    assert ev.with_before(_BEFORE).users_before is _BEFORE
    own = UsersEvidence(users_now=_COLLAPSED, users_before=_COLLAPSED)
    assert own.with_before(_BEFORE) is own
    assert ttft_verdict(_idle_probes(), Expectation(EXACT, "idle fit"),
                        users_evidence=UsersEvidence()).whose == "probes"


def test_users_evidence_reaches_the_exporters_verdict():
    """The exporter target: its session's users (the receiver's, or the /metrics
    window) reach the window's verdict after each probe and the scrape-time verdict
    while a probe is in flight, with the users' reference its ``HeldExpectation`` keeps."""
    from types import SimpleNamespace

    from prefilltui.exporter.config import TargetConfig
    from prefilltui.exporter.target import TargetProber

    p = TargetProber(TargetConfig(url="http://127.0.0.1:9", window=20), run_dir="/nonexistent")
    now = {"w": _BEFORE}
    asked = []

    class Users:  # the session's users' face the target reads (measure.otlp.UsersTrace)
        def window(self, now_s=None, *, fit=None, running=None, waiting=None):
            asked.append(fit)
            return now["w"]

        def recent(self, since_s=None):
            return ()

    assert not hasattr(p, "users_evidence")  # one source: no override hook to set
    p.session = SimpleNamespace(users=Users(), trace=None, load=None, server_watch=None)
    p._hold.users_before = _BEFORE  # the reference of the traffic before
    for r in _idle_probes():
        p._on_result(r)
    assert asked
    v = p.snapshot.summary.ttft_verdict
    assert v.cause == "none" and not v.above, v.headline
    assert "users' TTFT p50 400 ms, was 400 ms" in v.judged  # the hold's reference
    # the collapse, read at scrape time with the probe in flight
    now["w"] = _COLLAPSED
    p._in_flight_since = time.time()
    v = p.snapshot.summary.ttft_verdict
    assert v.whose == "users" and v.above and v.cause == "cache_hit_drop", v.headline
    assert "users' TTFT p50 1,050 ms, was 400 ms over 55 requests" in v.judged


def test_the_plain_summary_takes_no_users_evidence():
    """``plain_summary`` (the fallback when ``analyze`` fails) has no verdict to give the
    users' evidence to: the keywords it took and ignored are gone, so a caller that
    passes them is told instead of silently dropped."""
    from prefilltui.model.summary import plain_summary

    assert plain_summary(_idle_probes()).verdict.level == "error"
    for kw in ({"users_evidence": UsersEvidence()}, {"baseline_source": "baseline run"}):
        with pytest.raises(TypeError):
            plain_summary(_idle_probes(), **kw)


def test_users_evidence_reaches_the_tui_verdict():
    """The TUI feed: ``TargetFeed.users_evidence`` (its receiver's window and kept
    spans) -> ``viewmodel.verdict_now`` -> ``load_view.live_verdict``, with the users'
    reference the feed's ``HeldExpectation`` keeps."""
    from prefilltui.tui.feed import FeedConfig, TargetFeed
    from prefilltui.tui.load_control import load_lines
    from prefilltui.tui.viewmodel import verdict_now

    spans = (UserRequest(arrival_s=1000.0, prompt_tokens=2000, ttft_s=1.05),)

    class Trace:  # the receiver's face the feed reads (measure.otlp.UsersTrace)
        def window(self, now_s=None, *, fit=None, running=None, waiting=None):
            return _COLLAPSED

        def recent(self, since_s=None):
            return spans

    feed = TargetFeed(FeedConfig(label="t", runner_factory=None, users=Trace()))
    for r in _idle_probes():
        feed.add(r)
    now = verdict_now(feed)
    assert now.users == UsersEvidence(users_now=_COLLAPSED, user_requests=spans)
    assert now.in_flight_age_s is None and now.waiting_now is None
    feed.live.held.users_before = _BEFORE  # the reference of the traffic before
    _, said = load_lines(feed)  # the line, then its shorter forms for the headline
    assert said[0].startswith("why users' TTFT: prefix cache stopped hitting"), said
