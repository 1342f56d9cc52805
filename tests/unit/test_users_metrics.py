"""The users' window from /metrics deltas: bucket quantiles as histogram_quantile gives
them, the probes taken off the count, the prefix-cache hit rate from vLLM's counters and
SGLang's gauge, counter resets giving no delta; UsersMetrics over scrapes in time; and
the exporter's users' series."""

from __future__ import annotations

import pytest

from prefilltui.exporter.collector import families
from prefilltui.exporter.snapshot import TargetSnapshot
from prefilltui.measure.users_metrics import UsersMetrics
from prefilltui.model.metrics.users import bucket_quantile
from prefilltui.model.metrics import parse_users, users_from_metrics
from prefilltui.model.types import ProbeResult
from prefilltui.model.users import TraceStats, UsersWindow


def _vllm(n_fast: int, n_slow: int, prompts: tuple[int, int], queries: int, hits: int) -> str:
    """vLLM-shaped exposition: TTFT buckets (n_fast <= 0.1 s, n_slow <= 1 s), prompt
    buckets (prompts[0] <= 100 tokens, prompts[1] <= 1000), two engines' label sets."""
    n = n_fast + n_slow
    lines = []
    for engine in ("0", "1"):  # summed over label sets: each holds half
        lab = f'engine="{engine}",model_name="m"'
        lines += [f'vllm:time_to_first_token_seconds_bucket{{{lab},le="0.1"}} {n_fast / 2}',
                  f'vllm:time_to_first_token_seconds_bucket{{{lab},le="1.0"}} {n / 2}',
                  f'vllm:time_to_first_token_seconds_bucket{{{lab},le="+Inf"}} {n / 2}',
                  f'vllm:time_to_first_token_seconds_count{{{lab}}} {n / 2}',
                  f'vllm:time_to_first_token_seconds_sum{{{lab}}} {(0.05 * n_fast + 0.5 * n_slow) / 2}',
                  f'vllm:request_prompt_tokens_bucket{{{lab},le="100.0"}} {prompts[0] / 2}',
                  f'vllm:request_prompt_tokens_bucket{{{lab},le="1000.0"}} {sum(prompts) / 2}',
                  f'vllm:request_prompt_tokens_bucket{{{lab},le="+Inf"}} {sum(prompts) / 2}',
                  f'vllm:request_queue_time_seconds_sum{{{lab}}} {0.01 * n / 2}',
                  f'vllm:request_queue_time_seconds_count{{{lab}}} {n / 2}',
                  f'vllm:prefix_cache_queries_total{{{lab}}} {queries / 2}',
                  f'vllm:prefix_cache_hits_total{{{lab}}} {hits / 2}']
    return "# HELP x\n# TYPE vllm:time_to_first_token_seconds histogram\n" + "\n".join(lines)


def test_bucket_quantile_is_histogram_quantile():
    b = ((0.1, 10.0), (1.0, 20.0), (float("inf"), 20.0))
    assert bucket_quantile(0.5, b) == pytest.approx(0.1)
    assert bucket_quantile(0.75, b) == pytest.approx(0.1 + 0.9 * 0.5)
    assert bucket_quantile(0.25, b) == pytest.approx(0.05)
    assert bucket_quantile(0.99, ((0.1, 1.0), (float("inf"), 10.0))) == 0.1  # in +Inf
    assert bucket_quantile(0.5, ()) is None


def test_window_from_two_vllm_scrapes():
    a = parse_users(_vllm(10, 0, (10, 0), 1000, 600), "vllm", t=100.0)
    b = parse_users(_vllm(20, 20, (20, 30), 5000, 1000), "vllm", t=160.0)
    w = users_from_metrics(a, b, own=3)
    assert w.source == "metrics" and w.estimate and w.window_s == 60.0
    assert w.requests == 30 - 3  # 30 finished, 3 of them prefilltui's probes
    # 10 fast + 20 slow in the window: p50 rank 15 falls in (0.1, 1.0]
    assert w.ttft_p50_s == pytest.approx(0.1 + 0.9 * (15 - 10) / 20)
    # prompts: 10 <= 100 tokens and 30 in (100, 1000] in the delta: rank 20 of 40
    assert w.prompt_tokens_p50 == pytest.approx(100 + 900 * (20 - 10) / 30)
    assert w.queue_share == pytest.approx(0.3 / (0.05 * 10 + 0.5 * 20))
    assert w.prefix_cache_hit_rate == pytest.approx(400 / 4000)


def test_the_probes_tokens_are_not_the_users_hit_rate():
    """prefilltui's probes are fresh prompts: counted in, they pulled the users' hit rate
    down (to 0 on a server with few users); their prompt and cached tokens come off the
    counters, and with no users' request left there is no users' rate."""
    a = parse_users(_vllm(0, 0, (0, 0), 0, 0), "vllm", t=0.0)
    b = parse_users(_vllm(10, 10, (10, 10), 4000 + 2000, 3000 + 100), "vllm", t=60.0)
    w = users_from_metrics(a, b, own=8, probe_tokens=2000, probe_cached=100)
    assert w.requests == 12 and w.prefix_cache_hit_rate == pytest.approx(3000 / 4000)
    assert users_from_metrics(a, b).prefix_cache_hit_rate == pytest.approx(3100 / 6000)
    only = users_from_metrics(a, b, own=20, probe_tokens=2000)
    assert only.requests == 0 and only.prefix_cache_hit_rate is None


def test_a_counter_reset_gives_no_delta():
    a = parse_users(_vllm(50, 50, (50, 50), 9000, 100), "vllm", t=0.0)
    b = parse_users(_vllm(1, 0, (1, 0), 10, 1), "vllm", t=60.0)  # the server restarted
    w = users_from_metrics(a, b)
    assert w.ttft_p50_s is None and w.requests == 0 and w.prefix_cache_hit_rate is None


def test_sglang_gauge_and_unknown_kind():
    text = ('sglang:cache_hit_rate{model_name="m"} 0.62\n'
            'sglang:time_to_first_token_seconds_bucket{le="0.5"} 4\n'
            'sglang:time_to_first_token_seconds_bucket{le="+Inf"} 4\n'
            'sglang:time_to_first_token_seconds_count 4\n')
    a, b = parse_users("", "sglang", 0.0), parse_users(text, "sglang", 30.0)
    w = users_from_metrics(a, b)
    assert w.prefix_cache_hit_rate == pytest.approx(0.62) and w.requests == 4
    assert parse_users(text, "llama.cpp", 0.0) is None
    # never raises; a page that is not Prometheus text is no sample (an empty one would
    # make the next good scrape's delta every request since the server started)
    assert parse_users("garbage {{{ \n\x00", "vllm", 0.0) is None


@pytest.mark.asyncio
async def test_users_metrics_over_scrapes():
    t = [1000.0]
    um = UsersMetrics(clock=lambda: t[0])
    um.feed("vllm", _vllm(0, 0, (0, 0), 0, 0))
    for _ in range(2):
        t[0] += 0.4  # within MIN_GAP_S of the last read: not read again
        um.feed("vllm", _vllm(99, 99, (9, 9), 9, 9))
    t[0] += 61.0
    await um.after_probe(ProbeResult(started_at=t[0] - 1))
    um.feed("vllm", _vllm(4, 0, (4, 0), 100, 50))
    w = um.window()
    assert w.requests == 4 - 1 and w.prefix_cache_hit_rate == 0.5 and w.estimate
    assert um.before() is None and um.recent() == () and um.stats() is None


def test_exporter_users_series():
    w = UsersWindow(source="traces", window_s=60, requests=12, ttft_p50_s=0.2, ttft_p90_s=0.5,
                    prompt_tokens_p50=900.0, queue_share=0.25, prefix_cache_hit_rate=0.6)
    snap = TargetSnapshot(target="t", model="m", server_kind="vllm", api="completions",
                          interval_s=15, users=w,
                          spans=TraceStats(probes_matched=9, probes_expired=1, latency_p50_s=0.5))
    got = {(s.name, tuple(sorted(s.labels.items())), s.value)
           for m in families([snap]) for s in m.samples}
    base = (("model", "m"), ("source", "traces"), ("target", "t"))
    assert ("prefilltui_users_requests", base, 12) in got
    assert ("prefilltui_users_ttft_seconds", tuple(sorted(base + (("quantile", "0.5"),))), 0.2) in got
    assert ("prefilltui_users_prefix_cache_hit_ratio", base, 0.6) in got
    assert ("prefilltui_probe_spans_total",
            (("model", "m"), ("outcome", "matched"), ("target", "t")), 9) in got
    assert not any(n == "prefilltui_users_ttft_seconds" and dict(lab).get("quantile") == "0.99"
                   for n, lab, _ in got)  # not known: absent, never 0
    plain = TargetSnapshot(target="t", model="m", server_kind="vllm", api="completions",
                           interval_s=15)
    assert not any(m.name.startswith("prefilltui_users") for m in families([plain]))


def test_ttft_bucket_deltas_for_the_objectives():
    from prefilltui.model.slo import Objective, attainment_from_buckets

    t = [1000.0]
    um = UsersMetrics(clock=lambda: t[0])
    assert um.ttft_buckets() == ()
    um.feed("vllm", _vllm(10, 0, (0, 0), 0, 0))
    t[0] += 61.0
    um.feed("vllm", _vllm(40, 20, (0, 0), 0, 0))  # 30 more fast, 20 more slow
    b = um.ttft_buckets()
    assert b == ((0.1, 30.0), (1.0, 50.0), (float("inf"), 50.0))
    at = attainment_from_buckets(b, Objective(0.5, 90.0))
    assert at.bounds_s == (0.1, 1.0) and (at.good_lo, at.good_hi) == (30, 50)
    t[0] += 61.0
    um.feed("vllm", _vllm(1, 0, (0, 0), 0, 0))  # a restart: counters fell
    assert um.ttft_buckets() == ()
