"""What changed on the server (``model.server_change``), from readings made by hand and
from real exposition text / metadata JSON (``model.metrics.metrics_reading``,
``measure.server_facts.stated_facts``): a restart with its config diff, a counter reset
alone, a glitch that is none, an upstream switch, replicas alternating behind one URL
(said once, never as restarts), garbage that never raises, and the words."""

from __future__ import annotations

import math

import pytest

from prefilltui.measure.server_facts import llama_cpp_facts, stated_facts
from prefilltui.model.metrics import Exposition, metrics_reading, parse_metrics
from prefilltui.model.server_change import (
    RECENT_S, STATED_WAIT_S, ServerChange, ServerChangeTracker, ServerReading, ago,
    change_after, change_words,
)
from prefilltui.model.users import UsersEvidence

S1 = 1_734_000_000.0
S2 = S1 + 412.0


def metrics(t: float, start: float | None = S1, caching: str = "True", tokens: float = 81_920,
            **facts) -> ServerReading:
    return ServerReading.make(S1 + t, "metrics", start_time_s=start,
                              facts={"enable_prefix_caching": caching, "block_size": "16",
                                     **facts},
                              counters={"vllm:prompt_tokens_total": tokens,
                                        "vllm:time_to_first_token_seconds_count": tokens / 512})


def stated(t: float, version: str = "0.32.0", context: int = 4096, **facts) -> ServerReading:
    return ServerReading.make(S1 + t, "stated", facts={"version": version, "model": "m",
                                                        "max_model_len": context, **facts})


def feed_all(tr: ServerChangeTracker, readings) -> list[ServerChange]:
    out: list[ServerChange] = []
    for r in readings:
        out += tr.feed(r)
    return out


def test_restart_names_its_config_diff_and_its_start():
    tr = ServerChangeTracker()
    assert feed_all(tr, [metrics(10), stated(11), metrics(12, tokens=82_000)]) == []
    # the redeploy: a new process with prefix caching off and a shorter context
    assert tr.feed(metrics(420, S2, "False", 512)) == ()
    assert tr.wants_stated  # a new state pending: the stated facts are read at once
    assert tr.feed(stated(421, context=2048)) == ()
    (c,) = tr.feed(metrics(422, S2, "False", 600))
    assert c.kind == "restart"
    assert c.at_s == S2 and c.seen_s == S1 + 422  # the new process says when it started
    assert ("enable_prefix_caching", "True", "False") in c.changed
    assert ("max_model_len", 4096, 2048) in c.changed
    assert "process_start_time_seconds moved 1,734,000,000 → 1,734,000,412" in c.evidence
    assert "vllm:prompt_tokens_total went down 82,000 → 512" in c.evidence
    assert tr.start_time_s == S2 and tr.counts["restart"] == 1 and not tr.wants_stated
    assert change_words(tr.changes, S2 + 40) == (
        "the server restarted 40 s ago; prefix caching True → False, context 4,096 → 2,048")
    # the new state holds: nothing more
    assert feed_all(tr, [metrics(424 + i, S2, "False", 700 + i) for i in range(5)]) == []


def test_restart_without_stated_facts_is_said_after_the_wait():
    tr = ServerChangeTracker()
    feed_all(tr, [metrics(0), stated(1), metrics(2)])
    tr.feed(metrics(100, S2, "False", 10))
    assert tr.feed(metrics(101, S2, "False", 20)) == ()  # held for the stated read
    (c,) = tr.tick(S1 + 101 + STATED_WAIT_S)
    assert c.kind == "restart" and c.changed == (("enable_prefix_caching", "True", "False"),)


def test_counter_reset_alone_is_a_restart():
    """llama.cpp publishes no start time: its counters going down, twice in a row, are
    the restart."""
    tr = ServerChangeTracker()
    r = lambda t, n: ServerReading.make(S1 + t, counters={"llamacpp:prompt_tokens_total": n})  # noqa: E731
    assert feed_all(tr, [r(0, 5000), r(2, 5100), r(4, 40)]) == []
    (c,) = tr.feed(r(6, 90))
    assert c.kind == "restart" and c.at_s == S1 + 4 and c.changed == ()
    assert c.evidence == ("llamacpp:prompt_tokens_total went down 5,100 → 40",)
    assert "the server restarted" in change_words([c], S1 + 10)


def test_a_young_server_restarted_is_told_by_its_stated_facts():
    """llama.cpp restarted with another context after only a probe or two: its counters
    read lower once, then pass the old totals (one read: no restart on their own); the
    stated facts that change next tell it was a new process."""
    tr = ServerChangeTracker()
    r = lambda t, n: ServerReading.make(S1 + t, counters={"llamacpp:prompt_tokens_total": n})  # noqa: E731
    ctx = lambda t, n: ServerReading.make(S1 + t, "stated", facts={"n_ctx": n})  # noqa: E731
    out = feed_all(tr, [r(0, 64), ctx(1, 4096), r(2, 64), r(10, 0), r(11, 128),
                        ctx(12, 2048)])
    assert out == []
    (c,) = tr.feed(ctx(13, 2048))
    assert c.kind == "restart" and c.changed == (("n_ctx", 4096, 2048),)
    # the same facts changing with no low read is a config change
    tr = ServerChangeTracker()
    (c,) = feed_all(tr, [r(0, 64), ctx(1, 4096), r(2, 70), ctx(12, 2048), ctx(13, 2048)])
    assert c.kind == "config"


def test_one_low_read_is_no_restart():
    """A scrape that summed fewer series (a page cut short) reads lower once; the next
    read is back above the old total: no change."""
    tr = ServerChangeTracker()
    out = feed_all(tr, [metrics(0, None, tokens=1000), metrics(1, None, tokens=300),
                        metrics(2, None, tokens=1010), metrics(3, None, tokens=1020)])
    assert out == [] and tr.counts == {k: 0 for k in tr.counts}


def test_upstream_switch_by_version_and_by_an_older_process():
    tr = ServerChangeTracker()
    feed_all(tr, [metrics(0), stated(1)])
    assert tr.feed(stated(31, version="0.33.0")) == ()  # once: maybe a glitch
    (c,) = tr.feed(stated(32, version="0.33.0"))
    assert c.kind == "upstream_switch" and c.changed == (("version", "0.32.0", "0.33.0"),)
    assert change_words([c], c.at_s + 120).startswith(
        "another server answers behind this URL since 2 min ago; version 0.32.0 → 0.33.0")

    tr = ServerChangeTracker()
    feed_all(tr, [metrics(0, S2), stated(1)])
    tr.feed(metrics(10, S1))  # a process that started before the one we knew
    (c,) = feed_all(tr, [stated(10.5), metrics(11, S1)])
    assert c.kind == "upstream_switch" and "went back" in c.evidence[0]


def test_config_change_in_one_process():
    tr = ServerChangeTracker()
    feed_all(tr, [metrics(0), metrics(2)])
    tr.feed(metrics(4, tokens=82_000, num_gpu_blocks="900"))  # a new key: learnt, no change
    tr.feed(metrics(6, tokens=82_100, num_gpu_blocks="800"))
    (c,) = tr.feed(metrics(8, tokens=82_200, num_gpu_blocks="800"))
    assert c.kind == "config" and c.changed == (("num_gpu_blocks", "900", "800"),)
    assert change_words([c], c.at_s + 5) == (
        "the server's stated config changed 5 s ago; KV cache blocks 900 → 800")


def test_replicas_alternating_are_said_once_never_as_restarts():
    """Two replicas behind one URL, read in turn (A/B/A/B, their own start times and
    counters): one "replicas" change, no restart, however long it goes on."""
    tr = ServerChangeTracker()
    out = []
    for i in range(40):
        a = i % 2 == 0
        out += tr.feed(metrics(2 * i, S1 if a else S2, tokens=(5000 if a else 200) + i))
        if i % 10 == 3:
            out += tr.feed(stated(2 * i + 1))
    assert [c.kind for c in out] == ["replicas"]
    assert "several replicas" in change_words(out, out[0].at_s + 1)
    assert tr.replicas and tr.counts["restart"] == 0


def test_replicas_by_their_stated_version_are_said_once():
    """Two replicas of other versions behind a gateway that publishes no /metrics
    start time: the metadata endpoints alternate."""
    tr = ServerChangeTracker()
    out = feed_all(tr, [stated(30 * i, version="0.32.0" if i % 2 == 0 else "0.31.1")
                        for i in range(12)])
    assert [c.kind for c in out] == ["replicas"]
    assert "stated facts differ" in out[0].evidence[0]


def test_replicas_read_in_runs_are_said_once():
    """A gateway that keeps a connection to one replica for a while (A A B B A A ...):
    the first move to B reads as a restart, the move back to a server already seen
    means replicas, and nothing after."""
    tr = ServerChangeTracker()
    out = []
    for i in range(24):
        a = (i // 3) % 2 == 0
        out += tr.feed(metrics(2 * i, S1 if a else S2, tokens=(5000 if a else 200) + i))
    kinds = [c.kind for c in out]
    assert kinds.count("replicas") == 1 and kinds.count("restart") <= 1
    assert len(kinds) <= 2


def test_a_replica_that_restarts_is_said_among_replicas():
    tr = ServerChangeTracker()
    for i in range(8):
        tr.feed(metrics(2 * i, S1 if i % 2 == 0 else S2, tokens=100 + i))
    assert tr.replicas
    s3 = S2 + 100
    out = []
    for i in range(8, 16):  # replica B comes back as a new process
        a = i % 2 == 0
        out += tr.feed(metrics(600 + 2 * i, S1 if a else s3, "True" if a else "False",
                               tokens=10 + i))
    assert [c.kind for c in out] == ["restart"]
    assert out[0].at_s == s3 and ("enable_prefix_caching", "True", "False") in out[0].changed
    assert out[0].evidence == ("one of the replicas behind this URL restarted: "
                               "process_start_time_seconds moved 1,734,000,412 → 1,734,000,512",)


@pytest.mark.parametrize("bad", [
    dict(start_time_s=math.nan), dict(start_time_s=-5.0), dict(start_time_s=math.inf),
    dict(start_time_s="soon"), dict(start_time_s=1e300), dict(facts={"a": math.nan}),
    dict(facts={"a": {"nested": 1}, 3: "x", "": "y", "b": "x" * 10_000, "c": "\x00bad"}),
    dict(counters={"c": -1.0, "d": math.inf, "e": "12", "f": 1e30, "g": True}),
    dict(facts="not a dict", counters=[1, 2]),
])
def test_garbage_never_raises_and_never_counts(bad):
    r = ServerReading.make(S1, **bad)
    assert r is not None and r.empty
    tr = ServerChangeTracker()
    assert feed_all(tr, [metrics(0), r, metrics(1), r, metrics(2)]) == []


def test_bad_times_and_non_readings_are_ignored():
    for at in (math.nan, -1.0, 0, "now", None, math.inf):
        assert ServerReading.make(at, start_time_s=S1) is None
    tr = ServerChangeTracker()
    assert tr.feed(None) == () and tr.feed("garbage") == ()  # type: ignore[arg-type]
    assert change_words([], S1) is None and change_words(["x"], S1) is None  # type: ignore[list-item]


def test_json_round_trip_and_bad_records():
    c = ServerChange(S2, "restart", (("enable_prefix_caching", "True", "False"),
                                     ("max_model_len", 4096, 2048)),
                     ("process_start_time_seconds moved 1 → 2",), seen_s=S2 + 9)
    assert ServerChange.from_json(c.to_json()) == c
    for bad in (None, [], {"at_s": "x", "kind": "restart"}, {"at_s": S1, "kind": "reboot"},
                {"at_s": math.nan, "kind": "config"}):
        assert ServerChange.from_json(bad) is None
    odd = ServerChange.from_json({"at_s": S1, "kind": "config", "changed": [["k", 1], 7,
                                  ["k2", {"x": 1}, 2]], "evidence": [3, "ok"]})
    assert odd == ServerChange(S1, "config", (("k2", None, 2),), ("ok",), seen_s=S1)


def test_change_after_tells_a_reference_older_than_the_change():
    restart = ServerChange(S2, "restart", seen_s=S2 + 5)
    replicas = ServerChange(S2 + 100, "replicas", seen_s=S2 + 100)
    assert change_after([restart, replicas], S2 - 60) is restart  # taken before: compare across
    assert change_after([restart, replicas], S2 + 10) is None  # taken after it
    assert change_after([restart], None) is None and change_after([], S1) is None


def test_recent_keeps_ten_minutes_and_evidence_carries_it():
    tr = ServerChangeTracker()
    r = lambda t, n: ServerReading.make(S1 + t, counters={"c_total": n})  # noqa: E731
    feed_all(tr, [r(0, 100), r(1, 5), r(2, 6)])
    assert len(tr.recent(S1 + 3)) == 1 and tr.recent(S1 + 3 + RECENT_S) == ()
    ev = UsersEvidence(server_changes=list(tr.changes))
    assert isinstance(ev.server_changes, tuple) and hash(ev)  # a cache key still


def test_ago_words():
    assert [ago(s) for s in (-3, 40, 89, 150, 3600, 3900)] == [
        "0 s", "40 s", "89 s", "2 min", "1 h", "1 h 5 min"]


# -- from real page text and metadata JSON ---------------------------------------

#: A vLLM 0.32-shaped page: two engines (data parallel) with the same cache config,
#: the process collector's start time, counters and a histogram.
VLLM_PAGE = """# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.73400041234e+09
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{_block_size_resolved="True",block_size="16",cache_dtype="auto",enable_prefix_caching="False",engine="0",num_gpu_blocks="2912",prefix_caching_hash_algo="sha256"} 1.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="False",engine="1",num_gpu_blocks="2900",prefix_caching_hash_algo="sha256"} 1.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 300.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 212.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 3.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.9
vllm:num_requests_running{engine="0",model_name="m"} 1.0
"""


def test_metrics_reading_of_a_vllm_page():
    exp = Exposition(VLLM_PAGE)
    r = metrics_reading(exp, parse_metrics(exp, "vllm"), S2 + 30)
    assert r.start_time_s == pytest.approx(1_734_000_412.34)
    # the engines agree on all but num_gpu_blocks, which is left out; no engine label,
    # no private field
    assert r.fact_map == {"block_size": "16", "cache_dtype": "auto",
                          "enable_prefix_caching": "False", "prefix_caching_hash_algo": "sha256"}
    assert r.counter_map == {"vllm:prompt_tokens_total": 512.0,
                             "vllm:time_to_first_token_seconds_count": 3.0}


def test_metrics_reading_of_odd_pages():
    for page in ("process_start_time_seconds NaN\n", "process_start_time_seconds -4\n",
                 "process_start_time_seconds 1.7e9\nprocess_start_time_seconds 1.8e9\n",
                 'vllm:cache_config_info{enable_prefix_caching="\\x00"} 1\n', ""):
        exp = Exposition(page)
        r = metrics_reading(exp, parse_metrics(exp, "vllm"), S1)
        assert r is not None and r.start_time_s is None
    exp = Exposition("llamacpp:prompt_tokens_total 812\n")
    r = metrics_reading(exp, parse_metrics(exp, "llama.cpp"), S1)
    assert r.counter_map == {"llamacpp:prompt_tokens_total": 812.0} and r.facts == ()


def test_stated_facts_of_each_kind():
    models = {"data": [{"id": "smol", "max_model_len": 4096, "parent": None},
                       {"id": "lora-a", "parent": "smol"}, {"id": "b-model"}]}
    assert stated_facts("vllm", {"/v1/models": models, "/version": {"version": "0.32.0"}}) == {
        "model": "b-model, smol", "max_model_len": 4096, "version": "0.32.0"}
    props = {"total_slots": 4, "model_path": "/m/smol.gguf", "build_info": "b6000-abc",
             "default_generation_settings": {"n_ctx": 8192, "params": {"n_keep": 0}},
             "chat_template": "x" * 5000}
    assert llama_cpp_facts(props) == {"total_slots": 4, "model_path": "/m/smol.gguf",
                                      "build_info": "b6000-abc", "n_ctx": 8192, "n_keep": 0}
    tgi = {"model_id": "m", "sha": "abc", "version": "3.0.1", "max_batch_total_tokens": 1000,
           "prefix_caching": True}
    assert stated_facts("tgi", {"/info": tgi}) == {**tgi}
    sgl = {"version": "0.5", "disable_radix_cache": False, "chunked_prefill_size": 8192,
           "model_path": "/m", "tp_size": 1}
    got = stated_facts("sglang", {"/v1/models": None, "/server_info": sgl})
    assert got["disable_radix_cache"] is False and got["version"] == "0.5"
    for junk in (None, [], "x", {"data": "no"}, {"data": [1, None, {"id": True}]}):
        assert stated_facts("vllm", {"/v1/models": junk, "/version": junk}) == {}
