"""The expectation sharpens while the server is healthy and never follows an incident;
a step that holds the batch is told from a queue; the users' histograms without the
probes in them.  Each handed example of the field report is here with its right value.

The probe streams are the exporter's: one probe at a time over its default lengths,
judged probe by probe through ``exporter.target.window_health`` with a held
expectation, TTFT with the scatter of decodes that co-run with every probe (seeded
log-normal, 15 % a probe; a few probes in ten meet a user's prompt and wait longer).
"""

from __future__ import annotations

import math
import random
from collections import deque

from prefilltui.exporter.config import DEFAULT_LENGTHS, TargetConfig
from prefilltui.exporter.target import window_health
from prefilltui.model.diagnosis import HeldExpectation
from prefilltui.model.metrics.users import UsersCounters, users_from_metrics, without
from prefilltui.model.types import ProbeResult

#: The healthy engine the probes meet: 12 ms fixed + 0.08 ms a prompt token (12,500
#: prompt tok/s), so a 512-token probe takes ~53 ms and a 2,048-token one ~176 ms.
A, B = 0.012, 0.00008
INTERVAL_S = 2.0


def stream(seed: int = 1):
    """An endless probe source: ``next(g)`` gives the next probe of the exporter's
    round-robin lengths; ``g.send(slowdown)`` changes the engine's per-token cost."""
    rnd = random.Random(seed)
    slow, seq, t = 1.0, 0, 1_700_000_000.0
    while True:
        n = DEFAULT_LENGTHS[seq % len(DEFAULT_LENGTHS)]
        pre = B * slow * n
        noise = math.exp(rnd.gauss(0.0, 0.15))
        met_user = rnd.random() < 0.15  # a user's prompt ahead: a longer wait
        wait = rnd.uniform(0.02, 0.12) if met_user else 0.0
        ttft = (A + pre) * noise + wait
        seq += 1
        got = yield ProbeResult(seq=seq, requested_tokens=n, prompt_tokens=n, ok=True,
                                ttft_s=ttft, started_at=t, server_waiting=0,
                                server_running=2)
        t += INTERVAL_S
        if got is not None:
            slow = got


def run_exporter(probes: int, onset: int | None = None, factor: float = 2.0, seed: int = 1):
    """(verdicts after each probe, the hold); the slowdown from probe ``onset`` on."""
    cfg = TargetConfig(url="http://127.0.0.1:9", window=40)
    hold = HeldExpectation()
    window: deque[ProbeResult] = deque(maxlen=cfg.window)
    g = stream(seed)
    r = next(g)
    out = []
    for i in range(probes):
        window.append(r)
        s = window_health(list(window), None, cfg, hold)
        out.append(s.ttft_verdict)
        r = g.send(factor if onset is not None and i + 1 >= onset else None)
    return out, hold


def _healthy(seed: int):
    """(cfg, hold, window): 150 healthy probes judged one by one, the hold sharpened."""
    cfg = TargetConfig(url="http://127.0.0.1:9", window=40)
    hold = HeldExpectation()
    window: deque[ProbeResult] = deque(maxlen=cfg.window)
    g = stream(seed)
    for _ in range(150):
        window.append(next(g))
        window_health(list(window), None, cfg, hold)
    return cfg, hold, window


def _episodes(verdicts) -> int:
    """Runs of consecutive verdicts that name a cause or say "no single cause"."""
    out, was = 0, False
    for v in verdicts:
        bad = v.cause not in ("none", "not_enough_data") or "no single cause" in v.headline
        out += bad and not was
        was = bad
    return out


def test_the_held_line_sharpens_with_every_healthy_probe():
    """Held at the first fit of 10 probes, its interval then shrinks as healthy probes
    join (it stayed at 11 probes for good: ± 47 ms around a 74 ms expectation).  On
    this stream, where 15 % of the probes wait up to 120 ms behind a user's prompt, a
    burst of them is now and then above: at most 3 such episodes in 4 x 10 minutes
    (measured: 2, at pools of 101 and 111 probes)."""
    verdicts, hold = run_exporter(300)
    assert hold.fit is not None and hold.fit.n >= 200  # the robust fit's inliers of 294
    lo, hi = hold.fit.slope_ci
    assert (hi - lo) / hold.fit.slope_s_per_token < 0.2
    assert abs(hold.fit.slope_s_per_token / B - 1) < 0.1
    episodes = _episodes(verdicts) + sum(_episodes(run_exporter(300, seed=s)[0]) for s in (2, 3, 4))
    assert episodes <= 3


def test_a_2x_slower_prefill_is_named_within_30_s_with_its_ratio():
    """The handed example: server TTFT 60 -> 121 ms on the same prompts.  Named
    slow_prefill within 15 probes (30 s at a 2-s interval), the ratio quoted within
    25 % of the true 2x, and the held line does not follow."""
    onset = 150
    verdicts, hold = run_exporter(onset + 60, onset=onset, factor=2.0)
    after = verdicts[onset:]
    first = next((i for i, v in enumerate(after) if v.cause == "slow_prefill"), None)
    assert first is not None and first * INTERVAL_S <= 30, [v.headline for v in after[:3]]
    head = after[first].headline
    ratio = float(head.split("x the expected")[0].rsplit(" ", 1)[-1])
    assert 1.5 <= ratio <= 2.5, head
    assert sum(v.cause == "slow_prefill" for v in after[-15:]) >= 14
    assert abs(hold.fit.slope_s_per_token / B - 1) < 0.15  # not followed


def test_a_1_5x_slower_prefill_is_named_too():
    onset = 150
    verdicts, _ = run_exporter(onset + 40, onset=onset, factor=1.5)
    after = verdicts[onset:]
    first = next((i for i, v in enumerate(after) if v.cause == "slow_prefill"), None)
    assert first is not None and first * INTERVAL_S <= 30, [v.headline for v in after[-3:]]


def test_a_long_prompt_holding_the_step_is_head_of_line_not_a_queue():
    """The handed example: a batch client's 8,000-token prompts every 2.5 s, no
    chunked prefill, slots free.  The probe's own queue time is most of its TTFT
    ("queue 473 ms of TTFT 551 ms (86 %), 0 waiting, 2 running" was the headline),
    and the server's prompt-token counter rose by 8,000 more than the probe's own
    tokens in its window: one step held the batch."""
    cfg, hold, window = _healthy(3)
    said = []
    for i in range(15):
        n = DEFAULT_LENGTHS[i % len(DEFAULT_LENGTHS)]
        q = 0.473 if i % 5 else 0.0  # most probes arrive while a long prefill runs
        held = 8000 if q else 0
        window.append(ProbeResult(
            seq=1000 + i, requested_tokens=n, prompt_tokens=n, ok=True,
            ttft_s=A + B * n + q, started_at=1_800_000_000.0 + 2 * i, queue_s=q,
            queue_source="metrics", server_prefill_s=B * n, overhead_s=0.005,
            server_ttft_s=A + B * n + q - 0.005, server_waiting=0, server_running=2,
            window_prompt_tokens=n + held))
        said.append(window_health(list(window), None, cfg, hold).ttft_verdict)
    assert said[-1].cause == "head_of_line", said[-1].headline
    assert "a median 8,000 other prompt tokens prefilled while the probe waited" in said[-1].headline
    assert "0 waiting" in said[-1].headline
    # named within the first 6 probes of it (12 s at a 2-s interval), then held
    first = next(i for i, v in enumerate(said) if v.cause == "head_of_line")
    assert first <= 6 and all(v.cause == "head_of_line" for v in said[first:])
    assert not any(v.cause == "queueing" for v in said)


def test_a_line_of_waiting_requests_stays_queueing():
    """The same probe delays with requests waiting in line: a queue."""
    cfg, hold, window = _healthy(4)
    for i in range(10):
        n = DEFAULT_LENGTHS[i % len(DEFAULT_LENGTHS)]
        window.append(ProbeResult(
            seq=1000 + i, requested_tokens=n, prompt_tokens=n, ok=True,
            ttft_s=A + B * n + 0.5, started_at=1_800_000_000.0 + 2 * i, queue_s=0.5,
            queue_source="metrics", server_prefill_s=B * n, overhead_s=0.005,
            server_ttft_s=A + B * n + 0.495, server_waiting=12, server_running=8,
            window_prompt_tokens=n + 6000))
        v = window_health(list(window), None, cfg, hold).ttft_verdict
    assert v.cause == "queueing", v.headline


def _counters(t, prompts, ttfts, queries=0.0, hits=0.0):
    """One scrape's users' series: cumulative buckets of every request so far."""
    pb = (128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, math.inf)
    tb = (0.05, 0.1, 0.25, 0.5, 1.0, math.inf)

    def cum(bounds, vals):
        return tuple((le, float(sum(1 for v in vals if v <= le))) for le in bounds)

    return UsersCounters(t=t, buckets={"prompt": cum(pb, prompts), "ttft": cum(tb, ttfts)},
                         count={"prompt": float(len(prompts)), "ttft": float(len(ttfts))},
                         total={"ttft": float(sum(ttfts))},
                         values={"cache_queries": queries, "cache_hits": hits})


def test_the_probes_are_taken_off_the_users_histograms():
    """Users' prompts of ~1,600 tokens and the exporter's probes (64-2,048, one every
    2 s) in one histogram: counted in, the probes pulled the users' median to ~1,000
    (1,000-1,180 read for a true 1,635); taken off, it is the users' own bucket."""
    users = [1500, 1600, 1635, 1700, 1800] * 6
    probes = list(DEFAULT_LENGTHS) * 5
    before = _counters(0.0, [], [])
    after = _counters(60.0, users + probes, [0.3] * len(users) + [0.04] * len(probes))
    mixed = users_from_metrics(before, after, own=len(probes))
    clean = users_from_metrics(before, after, own=len(probes), probe_prompts=probes,
                               probe_ttfts=[0.04] * len(probes))
    assert mixed.prompt_tokens_p50 < 1200  # 1,161 in the field report
    assert 1024 < clean.prompt_tokens_p50 <= 2048
    assert clean.ttft_p50_s > 0.25 and mixed.ttft_p50_s < clean.ttft_p50_s
    assert clean.requests == len(users)


def test_without_never_goes_below_zero():
    b = ((1.0, 2.0), (2.0, 3.0), (math.inf, 3.0))
    assert without(b, [0.5, 0.5, 0.5, 1.5]) == ((1.0, 0.0), (2.0, 0.0), (math.inf, 0.0))
    assert without(b, [float("nan"), None]) == b


def test_a_server_with_prefix_caching_off_hits_0_percent():
    """vLLM started with --no-enable-prefix-caching looks nothing up: its query counter
    stays flat while the users' prompts are served.  Their hit rate is 0 %, not
    unknown (a cache collapse by redeploy was never named)."""
    users = [1600] * 20
    before = _counters(0.0, [], [], queries=50_000.0, hits=30_000.0)
    after = _counters(60.0, users, [0.4] * 20, queries=50_000.0, hits=30_000.0)
    w = users_from_metrics(before, after)
    assert w.requests == 20 and w.prefix_cache_hit_rate == 0.0
    # no users' request: nothing to say
    assert users_from_metrics(before, _counters(60.0, [], [], 50_000.0, 30_000.0)
                              ).prefix_cache_hit_rate is None


def test_a_redeploy_without_the_prefix_cache_is_named_as_the_change():
    """The server restarted 40 s ago with prefix caching off; the users' hit rate fell
    62 % -> 0 % and their TTFT p50 152 -> 423 ms, the probes unchanged.  The verdict
    leads with the change, then what it did ("users' prompts got longer" was said)."""
    import time

    from prefilltui.model.diagnosis import Expectation, ttft_verdict
    from prefilltui.model.fit import fit_ols
    from prefilltui.model.server_change import ServerChange
    from prefilltui.model.users import UsersEvidence, UsersWindow

    now = time.time()
    fit = fit_ols([64, 256, 1024, 2048, 64, 256, 1024, 2048],
                  [A + B * n * f for n, f in zip([64, 256, 1024, 2048] * 2, [1, 1.02, 0.98, 1] * 2)])
    probes = [ProbeResult(seq=i, requested_tokens=n, prompt_tokens=n, ok=True,
                          ttft_s=A + B * n, started_at=now - 60 + 2 * i, server_waiting=0)
              for i, n in enumerate([64, 256, 1024, 2048] * 5)]
    before = UsersWindow(source="metrics", window_s=60, requests=30, ttft_p50_s=0.152,
                         ttft_p90_s=0.25, prompt_tokens_p50=2000, prompt_tokens_p90=2600,
                         prefix_cache_hit_rate=0.62, estimate=True)
    now_w = UsersWindow(source="metrics", window_s=60, requests=28, ttft_p50_s=0.423,
                        ttft_p90_s=0.6, prompt_tokens_p50=2000, prompt_tokens_p90=2600,
                        prefix_cache_hit_rate=0.0, estimate=True)
    change = ServerChange(at_s=now - 40, kind="restart",
                          changed=(("enable_prefix_caching", "True", "False"),),
                          evidence=("process_start_time_seconds moved",), seen_s=now - 38)
    v = ttft_verdict(probes, Expectation(fit, "idle fit"), users_evidence=UsersEvidence(
        users_now=now_w, users_before=before, server_changes=(change,)))
    assert v.cause == "server_changed", v.headline
    assert v.headline.startswith("the server changed: the server restarted 40 s ago")
    assert "True → False" in v.headline and "hit rate 62% → 0%" in v.headline
    assert [e.cause for e in v.evidence][:2] == ["server_changed", "cache_hit_drop"]
    assert "prompts_longer" not in [e.cause for e in v.evidence]
    # without the change the collapse is still named, for what it is
    v = ttft_verdict(probes, Expectation(fit, "idle fit"), users_evidence=UsersEvidence(
        users_now=now_w, users_before=before))
    assert v.cause == "cache_hit_drop", v.headline
