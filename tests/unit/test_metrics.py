"""Server metrics: per-kind names on hand-written fixtures in each server's documented
exposition format, deltas around a probe, the reader over a real loopback socket,
and the MetricsHook filling the TTFT breakdown."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefilltui.model import metrics as M
from prefilltui.measure import metrics_hook as H
from prefilltui.model.types import ProbeResult
from tests.fakeserver import FakeServer, Reply

FIX = Path(__file__).parent / "fixtures"


def fixture(name: str) -> str:
    return (FIX / name).read_text()


def test_vllm_names_and_delta():
    a = M.parse_metrics(fixture("metrics_vllm.txt"), "vllm", t=0.0)
    b = M.parse_metrics(fixture("metrics_vllm_after.txt"), "vllm", t=1.0)
    assert a.hist["ttft"] == (pytest.approx(3.1415), 14)
    assert a.hist["queue"][1] == 14 and a.hist["prefill"][1] == 14
    assert a.get("running") == 0 and a.get("waiting") == 0
    assert a.get("cache_queries") == 41472 and a.get("cache_hits") == 8192
    assert a.missing == ("cache_hit_rate",)  # v0-only gauge, absent in v1
    d = M.delta(a, b)
    assert d.only("ttft") == pytest.approx(0.512)
    assert d.only("queue") == pytest.approx(0.004)
    assert d.only("prefill") == pytest.approx(0.43)
    assert d.counters["cache_queries"] == 2048 and d.counters["cache_hits"] == 0
    assert d.elapsed_s == 1.0


def test_sglang_names():
    s = M.parse_metrics(fixture("metrics_sglang.txt"), "sglang")
    assert s.get("running") == 162 and s.get("waiting") == 2826
    assert s.get("cache_hit_rate") == pytest.approx(0.0075075526)
    assert s.get("cached_tokens") == 61024
    assert s.hist["ttft"] == (pytest.approx(2.3518979474117756e06), 11008)
    assert s.hist["queue"] == (pytest.approx(95310.5), 11008)
    assert "prefill" not in s.hist  # SGLang publishes no prefill histogram


def test_tgi_prefill_label_and_counter_without_total():
    s = M.parse_metrics(fixture("metrics_tgi.txt"), "tgi")
    assert s.get("waiting") == 3 and s.get("running") == 4
    assert s.hist["prefill"] == (pytest.approx(3.2), 40)  # method="prefill" only
    assert s.hist["queue"] == (pytest.approx(2.75), 55)
    assert "ttft" not in s.hist


def test_llamacpp_names():
    s = M.parse_metrics(fixture("metrics_llamacpp.txt"), "llama.cpp")
    assert s.get("prompt_tokens") == 6886
    assert s.get("cached_tokens") == 1900
    assert s.get("prompt_seconds") == pytest.approx(29.0363)
    assert s.get("running") == 2 and s.get("waiting") == 1
    assert s.hist == {}


def test_unknown_kind_and_hints():
    assert "--metrics" in M.enable_hint("llama.cpp")
    assert "--enable-metrics" in M.enable_hint("sglang")
    assert "Ollama" in M.enable_hint("ollama")
    assert M.names_for("ollama") is None


def test_counter_reset_gives_no_delta():
    a = M.parse_metrics(fixture("metrics_vllm_after.txt"), "vllm", t=0.0)
    b = M.parse_metrics(fixture("metrics_vllm.txt"), "vllm", t=1.0)
    d = M.delta(a, b)
    assert d.only("ttft") is None and "cache_queries" not in d.counters


def test_only_when_exactly_one_request_finished():
    a = M.parse_metrics(fixture("metrics_vllm.txt"), "vllm", t=0.0)
    two = fixture("metrics_vllm_after.txt").replace(
        'vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen3-0.6B"} 15.0',
        'vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen3-0.6B"} 16.0')
    d = M.delta(a, M.parse_metrics(two, "vllm", t=1.0))
    assert d.only("ttft") is None
    assert d.mean("ttft") == pytest.approx(0.256)


def test_metrics_url():
    assert M.metrics_url("http://h:8/v1/") == "http://h:8/metrics"
    assert M.metrics_url("http://h:8") == "http://h:8/metrics"


async def test_reader_over_loopback_and_missing_endpoint():
    with FakeServer({"GET /metrics": Reply.text(fixture("metrics_llamacpp.txt"))}) as srv:
        async with H.MetricsReader(srv.base_url + "/v1", "llama.cpp") as rd:
            s = await rd.scrape()
            assert s is not None and s.get("waiting") == 1 and rd.problem is None
        srv.set("GET /metrics", Reply.text(
            "This server does not support metrics endpoint. Start it with `--metrics`",
            status=501))
        async with H.MetricsReader(srv.base_url, "llama.cpp") as rd:
            assert await rd.scrape() is None
            assert "HTTP 501" in rd.problem and "--metrics" in rd.problem
        srv.set("GET /metrics", Reply.text("<html>not metrics</html>", ctype="text/html"))
        async with H.MetricsReader(srv.base_url, "sglang") as rd:
            assert await rd.scrape() is None
            assert "--enable-metrics" in rd.problem
    async with H.MetricsReader("http://127.0.0.1:9", "vllm", timeout=1.0) as rd:
        assert await rd.scrape() is None and "vLLM" in rd.problem


async def test_hook_fills_breakdown_from_vllm_histograms():
    pages = [Reply.text(fixture("metrics_vllm.txt")), Reply.text(fixture("metrics_vllm_after.txt"))]
    with FakeServer({"GET /metrics": pages}) as srv:
        hook = H.MetricsHook(base_url=srv.base_url, kind="vllm")
        r = ProbeResult(ok=True, ttft_s=0.530, requested_tokens=2048, prompt_tokens=2048)
        await hook.before_probe(None)
        await hook.after_probe(r)
        await hook.aclose()
    assert r.queue_s == pytest.approx(0.004)
    assert r.server_prefill_s == pytest.approx(0.43)
    assert r.overhead_s == pytest.approx(0.530 - 0.512)
    assert r.server_ttft_s == pytest.approx(0.512)
    assert r.server_running == 0 and r.server_waiting == 0


def _llama(processing: int, deferred: int, prompt_s: float) -> str:
    return (f"# TYPE llamacpp:prompt_seconds_total counter\nllamacpp:prompt_seconds_total {prompt_s}\n"
            f"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing {processing}\n"
            f"# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred {deferred}\n")


async def test_hook_llamacpp_idle_then_loaded_estimates_queue():
    """llama.cpp has no queue metric: on an idle server queue = 0 and the remainder is
    overhead; with other requests running the excess over the quiet overhead is queue."""
    pages = [Reply.text(_llama(0, 0, 1.0)), Reply.text(_llama(0, 0, 1.2)),
             Reply.text(_llama(4, 2, 1.2)), Reply.text(_llama(4, 1, 3.0))]
    with FakeServer({"GET /metrics": pages}) as srv:
        hook = H.MetricsHook(base_url=srv.base_url, kind="llama.cpp")
        idle = ProbeResult(ok=True, ttft_s=0.205, server_prefill_s=0.200)
        await hook.before_probe(None)
        await hook.after_probe(idle)
        loaded = ProbeResult(ok=True, ttft_s=1.705, server_prefill_s=0.200)
        await hook.before_probe(None)
        await hook.after_probe(loaded)
        await hook.aclose()
    assert idle.queue_s == 0.0 and idle.overhead_s == pytest.approx(0.005)
    assert idle.queue_source == "idle"
    assert loaded.server_running == 4 and loaded.server_waiting == 2
    assert loaded.queue_s == pytest.approx(1.5)
    assert loaded.overhead_s == pytest.approx(0.005)
    assert loaded.queue_source == "estimated"


async def test_hook_never_raises_without_metrics():
    with FakeServer({}) as srv:  # /metrics answers 404
        hook = H.MetricsHook(base_url=srv.base_url, kind="llama.cpp")
        r = ProbeResult(ok=True, ttft_s=0.3, server_prefill_s=0.25)
        await hook.before_probe(None)
        await hook.after_probe(r)
        await hook.aclose()
    assert "--metrics" in hook.problem
    assert r.overhead_s == pytest.approx(0.05) and r.queue_s is None


async def test_hook_rescrapes_when_histograms_lag():
    before, after = fixture("metrics_vllm.txt"), fixture("metrics_vllm_after.txt")
    pages = [Reply.text(before), Reply.text(before), Reply.text(after)]  # 2nd: not yet counted
    with FakeServer({"GET /metrics": pages}) as srv:
        hook = H.MetricsHook(base_url=srv.base_url, kind="vllm")
        r = ProbeResult(ok=True, ttft_s=0.530)
        await hook.before_probe(None)
        await hook.after_probe(r)
        await hook.aclose()
        assert len([q for q in srv.requests if q.path == "/metrics"]) == 3
    assert r.queue_s == pytest.approx(0.004) and r.overhead_s == pytest.approx(0.018)


def test_a_whole_vllm_page_is_read_lazily_and_the_same():
    """A real vLLM 0.32 /metrics page (CPU build, the demo's model, after three
    requests: 629 lines, 68 KB) parsed around every probe: only the families asked for
    are parsed (the page whole was 7.8 ms, the sample now ~2 ms), and every name reads
    the same rows as prometheus_client's parser of the whole page gives."""
    from pathlib import Path

    from prometheus_client.parser import text_string_to_metric_families

    from prefilltui.model.metrics import Exposition

    text = (Path(__file__).parent / "fixtures" / "metrics_vllm_032_page.txt").read_text()
    whole: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            whole.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    exp = Exposition(text)
    assert exp.n_series == sum(len(v) for v in whole.values()) == 445
    for name, rows in whole.items():
        assert exp.rows(name) == rows, name
    s = M.parse_metrics(exp, "vllm")
    assert sorted(s.hist) == ["itl", "prefill", "queue", "ttft"] and s.engine_series == 374
    assert s.longest_prompt_le == 1000.0
    # a family nobody reads is never parsed: garbage there costs nothing; garbage in one
    # that is read is still an error, and a page that is no exposition text at all too
    bad = Exposition(text + "\nsome_family{le=\"oops 1\n")
    assert M.parse_metrics(bad, "vllm").hist == s.hist
    with pytest.raises(ValueError):
        Exposition("vllm:num_requests_waiting{x=\"1\" 2\n").rows("vllm:num_requests_waiting")
    with pytest.raises(ValueError):
        Exposition("<!DOCTYPE html><html>metrics</html>\n")
