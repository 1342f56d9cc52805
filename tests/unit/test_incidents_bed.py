"""The incidents' test bed itself (tests/incidents): the simulated engine does what its
docstring says, what it publishes reads back through the product's own parsers, and the
scoring reads the figures it should.  The verdict is judged in test_incidents_unseen.py."""

from __future__ import annotations

import pytest

from prefilltui.measure.otlp import UsersTrace
from prefilltui.measure.otlp import codec
from prefilltui.measure.otlp.spans import read_batch
from prefilltui.model.metrics import parse_metrics, parse_users
from prefilltui.model.types import ProbeResult
from tests.incidents import score
from tests.incidents.engine import EngineConfig, Prompt, SimEngine
from tests.incidents.observers import EPOCH_S, SimClock, span_body
from tests.incidents.scenarios import INCIDENTS, World
from tests.incidents.traffic import users

QUIET = dict(jitter=0.0)


def _engine(**kw) -> SimEngine:
    return SimEngine(EngineConfig(**{**QUIET, **kw}), seed=1)


def _run(e: SimEngine, until: float = 60.0) -> dict:
    e.run_until(until)
    return {f.rid: f for f in e.all_finished}


def test_an_idle_engine_prefills_a_prompt_in_one_step():
    e = _engine()
    e.submit("a", Prompt(1000, "a"), 1, 1.0)
    f = _run(e)["a"]
    want = 0.015 + 1000 * 1e-4
    assert f.ttft_s == pytest.approx(want)
    assert f.queue_s == 0.0 and f.prefill_s == pytest.approx(want)
    assert f.completion_tokens == 1 and f.end == pytest.approx(1.0 + want)


def test_decodes_take_one_token_a_step_and_slow_down_nothing_else():
    e = _engine()
    e.submit("a", Prompt(100, "a"), 11, 0.0)
    f = _run(e)["a"]
    assert f.completion_tokens == 11
    # 10 decode steps after the prefill step, each the fixed cost + one sequence
    assert f.decode_s == pytest.approx(10 * (0.015 + 5e-5))


def test_the_prefix_cache_counts_queries_and_hits_in_tokens():
    e = _engine()
    e.submit("a", Prompt(1536 + 100, "a", "sys", 1536), 1, 0.0)
    e.submit("b", Prompt(1536 + 300, "b", "sys", 1536), 1, 1.0)
    got = _run(e)
    assert got["a"].cached_tokens == 0 and got["b"].cached_tokens == 1536
    assert e.cache_queries == 1636 + 1836 and e.cache_hits == 1536
    # the cached part is not computed again
    assert got["b"].prefill_s == pytest.approx(0.015 + 300 * 1e-4)


def test_with_the_prefix_cache_off_nothing_hits_or_is_counted():
    e = _engine(prefix_caching=False)
    e.submit("a", Prompt(1636, "a", "sys", 1536), 1, 0.0)
    e.submit("b", Prompt(1836, "b", "sys", 1536), 1, 1.0)
    got = _run(e)
    assert got["b"].cached_tokens == 0
    assert e.cache_queries == 0 and e.cache_hits == 0


def test_a_full_prompt_block_leaves_its_last_token_to_compute():
    e = _engine()
    e.submit("a", Prompt(1536, "a", "sys", 1536), 1, 0.0)
    e.submit("b", Prompt(1536, "b", "sys", 1536), 1, 1.0)
    assert _run(e)["b"].cached_tokens == 1536 - 16


def test_lru_evicts_the_oldest_unheld_blocks():
    e = _engine(kv_blocks=200)
    e.submit("a", Prompt(1600, "a", "sys", 1600), 1, 0.0)  # 100 blocks, then unheld
    e.submit("x", Prompt(1600, "x"), 1, 1.0)  # another 100: the pool is full
    e.submit("y", Prompt(800, "y"), 1, 2.0)  # needs 50: evicts the oldest ("a"'s)
    e.submit("b", Prompt(1600, "b", "sys", 1600), 1, 3.0)
    assert _run(e)["b"].cached_tokens < 1600 - 16


def test_without_chunked_prefill_a_long_prompt_holds_the_next_one():
    e = _engine(chunked_prefill=False)
    e.submit("long", Prompt(8000, "long"), 16, 0.0)
    e.submit("probe", Prompt(64, "p"), 1, 0.001)
    got = _run(e)
    long_step = 0.015 + 8000 * 1e-4
    assert got["probe"].queue_s == pytest.approx(long_step - 0.001)
    assert e.steps > 1


def test_with_chunked_prefill_a_long_prompt_is_spread_over_steps():
    e = _engine(chunked_prefill=True, chunk_budget=2048)
    e.submit("long", Prompt(8000, "long"), 16, 0.0)
    e.submit("probe", Prompt(64, "p"), 1, 0.001)
    got = _run(e)
    assert got["long"].prefill_s > 3 * (0.015 + 2047 * 1e-4)  # four chunks
    # running prefills come first (vLLM's scheduler): the probe is admitted beside the
    # last chunk (1,856 tokens), after three full 2,048-token steps
    assert got["probe"].queue_s == pytest.approx(3 * (0.015 + 2048 * 1e-4) - 0.001)
    assert got["probe"].end == pytest.approx(got["long"].end - 15 * 0.01505, abs=0.01)


def test_full_slots_queue_a_request_until_one_frees():
    e = _engine(max_num_seqs=2)
    e.submit("a", Prompt(10, "a"), 200, 0.0)
    e.submit("b", Prompt(10, "b"), 100, 0.0)
    e.submit("c", Prompt(10, "c"), 1, 0.1)
    got = _run(e)
    assert got["c"].queue_s == pytest.approx(got["b"].end - 0.1, abs=0.02)


def test_a_slower_prefill_multiplies_the_per_token_cost_only():
    e = _engine()
    e.prefill_slowdown = 2.0
    e.submit("a", Prompt(1000, "a"), 1, 0.0)
    assert _run(e)["a"].ttft_s == pytest.approx(0.015 + 2 * 1000 * 1e-4)


def test_the_engine_is_deterministic_for_a_seed():
    def once():
        e = SimEngine(EngineConfig(), seed=7)
        for a in users(3, 60.0):
            e.submit(a.rid, a.prompt, a.max_tokens, a.t)
        e.run_until(100.0)
        return [(f.rid, f.ttft_s, f.cached_tokens) for f in e.all_finished]

    a = once()
    assert a == once() and len(a) > 15


def test_the_users_traffic_is_as_issue_40_says():
    got = users(5, 2000.0)
    rate = len(got) / 2000.0
    shared = sum(1 for a in got if a.prompt.shared_id) / len(got)
    assert 0.45 < rate < 0.55 and 0.65 < shared < 0.75
    assert all(16 <= a.max_tokens <= 128 for a in got)
    assert all(a.prompt.shared_len == 1536 for a in got if a.prompt.shared_id)
    assert all(128 <= a.prompt.n <= 1500 for a in got if not a.prompt.shared_id)


def test_the_metrics_page_reads_through_the_products_parsers():
    e = _engine()
    e.submit("a", Prompt(1636, "a", "sys", 1536), 20, 0.0)
    e.submit("b", Prompt(1836, "b", "sys", 1536), 20, 0.01)
    e.run_until(0.25)  # the second step began with both (b arrived during the first)
    sample = parse_metrics(e.metrics_text(), "vllm")
    assert sample.get("running") == 2 and sample.get("waiting") == 0
    e.run_until(60.0)
    page = e.metrics_text()
    sample = parse_metrics(page, "vllm")
    assert sample.hist["ttft"][1] == 2 and sample.hist["queue"][1] == 2
    assert sample.values["prompt_tokens"] == 1636 + 1836
    assert sample.values["cache_hits"] == 1536
    u = parse_users(page, "vllm", 1.0)
    assert u.values["cache_queries"] == 1636 + 1836
    assert u.count["prompt"] == 2 and u.buckets["ttft"][-1][1] == 2
    assert 'enable_prefix_caching="True"' in page and "process_start_time_seconds 1800000000.0" in page


def test_a_redeployed_engine_starts_its_counters_from_zero():
    old = _engine()
    old.submit("a", Prompt(100, "a"), 1, 0.0)
    old.run_until(10.0)
    new = SimEngine(EngineConfig(prefix_caching=False), start_s=10.0, epoch_s=EPOCH_S)
    page = new.metrics_text()
    assert "process_start_time_seconds 1800000010.0" in page
    assert 'enable_prefix_caching="False"' in page
    assert parse_metrics(page, "vllm").values["prompt_tokens"] == 0


def test_spans_read_back_as_users_and_give_a_probe_its_own_span():
    e = _engine()
    e.submit("cmpl-user1-0", Prompt(500, "u"), 4, 0.0)
    e.submit("cmpl-prefilltui-abcd0123-7-0", Prompt(64, "p"), 1, 0.5, "probe")
    e.run_until(5.0)
    clock = SimClock()
    clock.now = 5.0
    body = span_body(e.take_finished(), clock)
    batch = read_batch(codec.decode_request(body, "application/x-protobuf", None),
                       received_s=clock.unix())
    assert batch.rejected == 0 and len(batch.found) == 2
    trace = UsersTrace("sim", clock=clock.unix)
    probe = ProbeResult(ok=True, ttft_s=0.05, requested_tokens=64, prompt_tokens=64)
    probe.notes.request_id = "prefilltui-abcd0123-7"
    trace.register_probe(probe)
    for f in batch.found:
        trace.add(f.request)
    (user,) = trace.recent()
    assert user.prompt_tokens == 500 and user.cached_tokens is None
    assert user.ttft_s == pytest.approx(0.015 + 0.05) and user.queue_s == 0.0
    assert probe.server_ttft_s == pytest.approx(0.015 + 64e-4)


def test_an_incidents_truth_comes_from_the_engine():
    w = World(INCIDENTS["cache_collapse"](), "exporter", interval_s=5.0)
    w.incident.duration_s = w.incident.onset_s + 5.0
    w.run()
    t = w.incident.truth(w)
    assert 0.5 < t["hit_before"] < 0.8 and t["hit_after"] == 0.0
    assert w.replicas.live.cfg.prefix_caching is False and w.replicas.live.cache_queries == 0
    assert len(w.probes) > 25


@pytest.mark.parametrize("text,fn,want", [
    ("slow prefill: server prefill 2.00x the expected", score.ratio, 2.0),
    ("TTFT minus the fixed cost 1.5× the expected", score.ratio, 1.5),
    ("users' long prompts (median 8,000 tokens) in prefill", score.tokens_max, 8000),
    ("an 8,192-token prompt ahead", score.tokens_max, 8192),
    ("≈ 330 ms more prefill each", score.more_prefill_s, 0.330),
    ("≈ 1.2 s more prefill per request", score.more_prefill_s, 1.2),
])
def test_the_scoring_reads_the_verdicts_figures(text, fn, want):
    assert fn(text) == pytest.approx(want)


def test_the_scoring_reads_durations_and_hit_rates():
    assert score.duration_s("queueing: queue 473 ms of TTFT 551 ms", "queue") == 0.473
    assert score.duration_s("TTFT - server time 302 ms of", "overhead", "TTFT - server time") \
        == pytest.approx(0.302)
    assert score.duration_s("nothing here", "queue") is None
    assert score.hit_rates("users' prefix-cache hit rate 62% → 0%; ≈ 620 ms") == (0.62, 0.0)


@pytest.mark.parametrize("observer", ["exporter", "tui"])
def test_the_observers_read_the_engine_through_the_products_own_paths(observer):
    inc = INCIDENTS["control"]()
    inc.duration_s = 45.0
    w = World(inc, observer, interval_s=2.0)
    traced, plain = w.run()
    for o in (traced, plain):
        assert o.hook.problem is None and o.hook.last_sample is not None
        assert len(o.users_metrics._samples) > 10
        assert len(o.judgements) > 20 and o.judgements[-1].cause != "not_enough_data"
    assert plain.users.window(w.clock.unix()).source == "metrics"
    got = traced.users.window(w.clock.unix())
    assert got.source == "traces" and got.requests > 10
    stats = traced.trace.stats()
    assert stats.probes_matched > 10 and stats.users > 10
    results = (list(traced.prober._window) if observer == "exporter"
               else [r for r in traced.feed.results if not r.warmup])
    assert sum(r.span is not None for r in results) > 0.8 * len(results)
    assert all(r.server_ttft_s is not None for r in results if r.span is not None)


def test_the_simulated_clock_holds_in_its_own_thread_only():
    import threading
    import time

    from tests.incidents.observers import sim_time

    clock = SimClock()
    clock.now = 1e9  # unix 2.8e9, decades from the real clock
    seen = {}
    with sim_time(clock):
        t = threading.Thread(target=lambda: seen.update(other=time.time()))
        t.start()
        t.join()
        mine = time.time(), time.monotonic(), time.perf_counter()
    assert mine == (EPOCH_S + 1e9,) * 3
    assert seen["other"] < EPOCH_S + 5e8  # the real clock, not the simulated one
    assert time.time() < EPOCH_S + 5e8
