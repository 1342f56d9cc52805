"""Held-out, the users' window from a server's /metrics histograms and counters
(``model.metrics.users``) fed pages no server should publish: a +Inf request count, +Inf
or NaN sums, cache hits above the queries, a hit-rate gauge of 1e308 or -3, bucket
counts that decrease, a bucket bound below 0.  None of them crashes the window (an
OverflowError out of the TUI's redraw, the exporter's scrape or the end of a sweep),
none puts NaN/inf or a share past 0..1 on screen, in /metrics or in the verdict."""

from __future__ import annotations

import math

import pytest

from prefilltui.measure.users_metrics import UsersMetrics
from prefilltui.model.metrics import parse_users, users_from_metrics
from prefilltui.model.metrics.users import bucket_quantile
from prefilltui.model.users import window_to_json
from prefilltui.render.users import users_lines

TTFT = "vllm:time_to_first_token_seconds"
QUEUE = "vllm:request_queue_time_seconds"


def page(buckets, total, count, queue_sum=0.0, extra=""):
    lines = [f'{TTFT}_bucket{{le="{le}",model_name="m"}} {c}' for le, c in buckets]
    lines += [f'{TTFT}_sum{{model_name="m"}} {total}', f'{TTFT}_count{{model_name="m"}} {count}',
              f'{QUEUE}_sum{{model_name="m"}} {queue_sum}',
              f'{QUEUE}_count{{model_name="m"}} {count}']
    return "\n".join(lines) + "\n" + extra


ZERO = page([("0.1", 0), ("0.5", 0), ("1", 0), ("+Inf", 0)], 0, 0)
GOOD = [("0.1", 5), ("0.5", 8), ("1", 10), ("+Inf", 10)]


def window(before: str, after: str, kind: str = "vllm"):
    return users_from_metrics(parse_users(before, kind, 0.0), parse_users(after, kind, 60.0))


def sane(w) -> None:
    for k, v in window_to_json(w).items():
        if isinstance(v, float):
            assert math.isfinite(v), (k, v)
    assert isinstance(w.requests, int) and 0 <= w.requests <= 10**9, w.requests
    for share in (w.queue_share, w.prefix_cache_hit_rate):
        assert share is None or 0.0 <= share <= 1.0, share
    for q in (w.ttft_p50_s, w.ttft_p90_s, w.ttft_p99_s):
        assert q is None or q >= 0.0, q
    qs = [q for q in (w.ttft_p50_s, w.ttft_p90_s, w.ttft_p99_s) if q is not None]
    assert qs == sorted(qs), qs  # quantiles never decrease with the rank
    text = " ".join(users_lines(w)).lower()
    assert "nan" not in text and "inf" not in text, text


@pytest.mark.parametrize("after", [
    page(GOOD, 3, "+Inf", 1),                       # a +Inf request count (was: OverflowError)
    page(GOOD, 3, "1e400", 1),                      # a count that overflows a float
    page(GOOD, "+Inf", 10, "+Inf"),                 # +Inf sums (was: queue share NaN)
    page(GOOD, "NaN", 10, "NaN"),
    page(GOOD, 3, 10, "-Inf"),
    page([("0.1", 9), ("0.5", 3), ("1", 10), ("+Inf", 10)], 3, 10, 1),   # decreasing
    page([("-5", 5), ("0.5", 8), ("1", 10), ("+Inf", 10)], 3, 10, 1),    # a bound below 0
    page([("0.1", -5), ("0.5", 8), ("1", 10), ("+Inf", 10)], 3, 10, 1),  # a negative count
    page([("0.1", 5), ("0.5", 8), ("1", 10), ("+Inf", "+Inf")], 3, 10, 1),
], ids=["count-inf", "count-1e400", "sums-inf", "sums-nan", "queue-sum-minus-inf",
        "buckets-decrease", "bound-below-0", "bucket-negative", "inf-bucket-inf"])
def test_a_histogram_no_server_can_publish_gives_a_sane_window(after):
    sane(window(ZERO, after))


def cache(queries, hits):
    return (f'vllm:prefix_cache_queries_total{{model_name="m"}} {queries}\n'
            f'vllm:prefix_cache_hits_total{{model_name="m"}} {hits}\n')


@pytest.mark.parametrize("after", [cache(100, 500), cache(100, "+Inf"), cache("+Inf", 5)],
                         ids=["hits-over-queries", "hits-inf", "queries-inf"])
def test_cache_counters_no_cache_can_have_give_no_hit_rate(after):
    w = window(cache(0, 0), after)
    assert w.prefix_cache_hit_rate is None
    sane(w)


@pytest.mark.parametrize("rate", ["1e308", "-3", "+Inf", "-Inf", "1.5"])
def test_an_sglang_hit_rate_gauge_outside_0_to_1_is_no_rate(rate):
    text = f'sglang:cache_hit_rate{{model_name="m"}} {rate}\n'
    w = window(text, text, "sglang")
    assert w.prefix_cache_hit_rate is None
    sane(w)


def test_decreasing_buckets_are_read_as_prometheus_does():
    """histogram_quantile makes cumulative counts monotonic first (a bucket below a
    larger one counts as that one): the p50 of 9 / 3 / 10 is the p50 of 9 / 9 / 10."""
    fixed = ((0.1, 9.0), (0.5, 9.0), (1.0, 10.0), (math.inf, 10.0))
    bad = ((0.1, 9.0), (0.5, 3.0), (1.0, 10.0), (math.inf, 10.0))
    for q in (0.5, 0.9, 0.95):
        assert bucket_quantile(q, bad) == bucket_quantile(q, fixed)


def test_the_sweep_and_the_exporter_read_the_window_without_a_crash():
    """What the sweep's end and the exporter call: ``UsersMetrics.window`` over two
    scrapes, the second one with a +Inf request count (was: OverflowError)."""
    t = [1000.0]
    um = UsersMetrics(clock=lambda: t[0])
    um.feed("vllm", ZERO)
    t[0] += 30.0
    um.feed("vllm", page(GOOD, 3, "+Inf", 1))
    sane(um.window())


# -- the names and ranks the rest of prefilltui reads (model.metrics.names / ranks)

def _vllm(prefix: str, n: int, hits: int) -> str:
    h = f"{prefix}time_to_first_token_seconds"
    return (f'{h}_bucket{{le="0.5",model_name="m"}} {n}\n{h}_bucket{{le="+Inf",model_name="m"}} {n}\n'
            f'{h}_sum{{model_name="m"}} {0.2 * n}\n{h}_count{{model_name="m"}} {n}\n'
            f'{prefix}prefix_cache_queries_total{{model_name="m"}} {10 * n}\n'
            f'{prefix}prefix_cache_hits_total{{model_name="m"}} {hits}\n')


def test_vllm_series_spelled_with_underscores_are_read():
    """A relay that rewrites ``vllm:`` to ``vllm_`` (names.canonical): the probes'
    breakdown read them, the users' window did not (none at all)."""
    w = window(_vllm("vllm_", 0, 0), _vllm("vllm_", 12, 60))
    assert w.requests == 12 and w.ttft_p50_s is not None and w.prefix_cache_hit_rate == 0.5


def test_both_spellings_published_the_exact_one_wins_never_both_added():
    before = _vllm("vllm:", 0, 0) + _vllm("vllm_", 0, 0)
    after = _vllm("vllm:", 12, 60) + _vllm("vllm_", 500, 0)
    w = window(before, after)
    assert w.requests == 12 and w.prefix_cache_hit_rate == 0.5


def _sglang(n: int, rate: float, ranks: dict[str, str]) -> str:
    out = []
    for lab in ranks:
        h = "sglang:time_to_first_token_seconds"
        out += [f'{h}_bucket{{le="0.5",{lab}}} {n}', f'{h}_bucket{{le="+Inf",{lab}}} {n}',
                f'{h}_sum{{{lab}}} {0.2 * n}', f'{h}_count{{{lab}}} {n}',
                f'sglang:cache_hit_rate{{{lab}}} {ranks[lab] if rate < 0 else rate}']
    return "\n".join(out) + "\n"


def test_sglang_ranks_that_repeat_one_scheduler_are_read_once():
    """``--enable-metrics-for-all-schedulers`` with tp 8: every tp_rank records the same
    requests (model.metrics.ranks); they were added up: 8x the users, a hit rate of 6.4."""
    ranks = {f'model_name="m",tp_rank="{r}"': "0.8" for r in range(8)}
    w = window(_sglang(0, 0.8, ranks), _sglang(12, 0.8, ranks), "sglang")
    assert w.requests == 12 and w.prefix_cache_hit_rate == pytest.approx(0.8)


def test_sglang_data_parallel_shards_add_up_and_their_hit_rates_average():
    ranks = {'model_name="m",dp_rank="0"': "0.8", 'model_name="m",dp_rank="1"': "0.9"}
    w = window(_sglang(0, -1, ranks), _sglang(12, -1, ranks), "sglang")
    assert w.requests == 24 and w.prefix_cache_hit_rate == pytest.approx(0.85)


def test_many_label_sets_add_up_and_a_page_that_is_not_prometheus_text_is_no_sample():
    def many(n):
        return "".join(f'vllm:time_to_first_token_seconds_bucket{{le="+Inf",lora="a{i}"}} {n}\n'
                       f'vllm:time_to_first_token_seconds_count{{lora="a{i}"}} {n}\n'
                       for i in range(5000))
    w = window(many(0), many(2))
    assert w.requests == 10_000
    assert parse_users("vllm:x{le=\"1\" 3\n\x00garbage{{{\n", "vllm", 0.0) is None
