"""An engine's metric names in either spelling
(``sglang:``/``sglang_``, ``vllm:``/``vllm_``) and per-rank series combined as the
engine means them (SGLang tp_rank/pp_rank replicas read once, dp_rank shards added,
attention data-parallel groups from /server_info, a priority total beside its
breakdown); the advice to enable metrics only when they are off.

The SGLang pages are written from SGLang's collectors: metric names, label names and
which process records what from python/sglang/srt/observability/metrics_collector.py
(``SchedulerMetricsCollector``: tp_rank, pp_rank, moe_ep_rank, optional dp_rank;
``TokenizerMetricsCollector``: TTFT, prompt tokens) and req_time_stats.py (the
``prefill_forward`` stage).
"""

from __future__ import annotations

import json

import pytest

from prefilltui.cli import main
from prefilltui.model import metrics as M
from prefilltui.measure import metrics_hook as H
from prefilltui.measure.runfile import read_run
from prefilltui.model.types import ProbeResult, ServerInfo
from tests.fakeserver import Reply, models_reply, sse_data, sse_done, sse_text


# ------------------------------------------------ the handed input, end to end

def handed_page(done: int) -> str:
    """The handed /metrics: the ``sglang_`` spelling, every series with a ``tp_rank``
    label, idle gauges; after ``done`` requests of TTFT 0.08 s, queue 0.002 s, 50 prompt
    tokens each."""
    lab = 'model_name="m",tp_rank="0"'
    return "\n".join([
        "# TYPE sglang_num_running_reqs gauge", f"sglang_num_running_reqs{{{lab}}} 0",
        "# TYPE sglang_num_queue_reqs gauge", f"sglang_num_queue_reqs{{{lab}}} 0",
        "# TYPE sglang_time_to_first_token_seconds histogram",
        f'sglang_time_to_first_token_seconds_bucket{{le="0.1",{lab}}} {done}',
        f'sglang_time_to_first_token_seconds_bucket{{le="+Inf",{lab}}} {done}',
        f"sglang_time_to_first_token_seconds_sum{{{lab}}} {0.08 * done}",
        f"sglang_time_to_first_token_seconds_count{{{lab}}} {done}",
        "# TYPE sglang_queue_time_seconds histogram",
        f'sglang_queue_time_seconds_bucket{{le="0.1",{lab}}} {done}',
        f'sglang_queue_time_seconds_bucket{{le="+Inf",{lab}}} {done}',
        f"sglang_queue_time_seconds_sum{{{lab}}} {0.002 * done}",
        f"sglang_queue_time_seconds_count{{{lab}}} {done}",
        "# TYPE sglang_prompt_tokens_total counter",
        f"sglang_prompt_tokens_total{{{lab}}} {50 * done}", ""])


class HandedSGLang:
    """A server recognised as SGLang (/get_model_info answers) whose /metrics is the
    handed page, counting the completions it has served."""

    def __init__(self) -> None:
        self.done = 0

    def completions(self, req) -> Reply:
        self.done += 1
        usage = {"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 1}}
        return Reply.sse([(0.10, sse_text("Hi", finish="length")), (0.11, sse_data(usage)),
                          (0.12, sse_done())])

    def routes(self) -> dict:
        return {"GET /v1/models": models_reply("m"),
                "GET /get_model_info": Reply.json({"model_path": "m", "is_generation": True}),
                "POST /v1/completions": self.completions,
                "GET /metrics": lambda req: Reply.text(handed_page(self.done))}


def test_handed_sglang_underscore_names_with_tp_rank_give_running_waiting_and_ttft(
        fake_server, tmp_path, capsys):
    """Was: running, waiting and the server TTFT all missing, and the note "start SGLang
    with --enable-metrics" although metrics were on.  Right: running 0, waiting 0, the
    server's TTFT 0.08 s and queue 0.002 s per probe, overhead = TTFT - 0.08 s, and no
    advice to enable metrics."""
    srv = fake_server(HandedSGLang().routes())
    out = tmp_path / "run.jsonl"
    rc = main(["sweep", srv.base_url, "--lengths", "50", "--repeats", "3", "--warmup", "0",
               "--no-telemetry", "--out", str(out), "--format", "json"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "--enable-metrics" not in cap.out + cap.err
    probes = [r for r in read_run(out)[0] if not r.warmup]
    assert len(probes) == 3
    for r in probes:
        assert r.server_running == 0 and r.server_waiting == 0
        assert r.server_ttft_s == pytest.approx(0.08)
        assert r.queue_s == pytest.approx(0.002) and r.queue_source == "metrics"
        assert r.overhead_s == pytest.approx(r.ttft_s - 0.08)
    assert json.loads(cap.out)["probes"]["ok"] == 3


# ------------------------------------------------ the kind: spellings and ranks

def sglang_page(sep: str, ranks: list[dict[str, str]], *, done: int, running: int = 0,
                waiting: int = 0, tokenizer_ranks: bool = False) -> str:
    """An SGLang /metrics page in spelling ``sep`` (":" or "_"): scheduler series
    (running, waiting, queue time, the prefill_forward stage) once per rank label set in
    ``ranks``, each rank reporting its own scheduler's ``running``/``waiting`` and
    ``done`` requests; the tokenizer's TTFT and prompt tokens once (with the first
    rank's labels too when ``tokenizer_ranks``: the handed page's shape)."""
    p = f"sglang{sep}"
    lines = [f"# TYPE {p}num_running_reqs gauge", f"# TYPE {p}num_queue_reqs gauge",
             f"# TYPE {p}queue_time_seconds histogram",
             f"# TYPE {p}per_stage_req_latency_seconds histogram"]
    for rk in ranks:
        lab = ",".join(f'{k}="{v}"' for k, v in {"model_name": "m", **rk}.items())
        lines += [f"{p}num_running_reqs{{{lab}}} {running}",
                  f"{p}num_queue_reqs{{{lab}}} {waiting}",
                  f"{p}queue_time_seconds_sum{{{lab}}} {0.002 * done}",
                  f"{p}queue_time_seconds_count{{{lab}}} {done}",
                  f'{p}per_stage_req_latency_seconds_sum{{{lab},stage="prefill_forward"}} '
                  f"{0.05 * done}",
                  f'{p}per_stage_req_latency_seconds_count{{{lab},stage="prefill_forward"}} '
                  f"{done}",
                  f'{p}per_stage_req_latency_seconds_sum{{{lab},stage="request_process"}} '
                  f"{0.001 * done}",
                  f'{p}per_stage_req_latency_seconds_count{{{lab},stage="request_process"}} '
                  f"{done}"]
    tl = ",".join(f'{k}="{v}"' for k, v in
                  {"model_name": "m", **(ranks[0] if tokenizer_ranks else {})}.items())
    lines += [f"# TYPE {p}time_to_first_token_seconds histogram",
              f"{p}time_to_first_token_seconds_sum{{{tl}}} {0.08 * done}",
              f"{p}time_to_first_token_seconds_count{{{tl}}} {done}",
              f"# TYPE {p}prompt_tokens_total counter",
              f"{p}prompt_tokens_total{{{tl}}} {50 * done}", ""]
    return "\n".join(lines)


NO_RANKS = [{}]
ONE_RANK = [{"tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}]
#: --tp 4 --enable-metrics-for-all-schedulers: every rank of one scheduler records
TP4_ALL = [{"tp_rank": str(i), "pp_rank": "0", "moe_ep_rank": "0"} for i in range(4)]
#: --tp 2 --pp 2 --enable-metrics-for-all-schedulers
TP2_PP2 = [{"tp_rank": str(t), "pp_rank": str(q)} for t in range(2) for q in range(2)]


@pytest.mark.parametrize("sep", [":", "_"])
@pytest.mark.parametrize("ranks", [NO_RANKS, ONE_RANK, TP4_ALL, TP2_PP2],
                         ids=["no-ranks", "tp_rank0", "tp4-replicas", "tp2-pp2-replicas"])
def test_one_scheduler_in_either_spelling_reads_once(sep, ranks):
    """One scheduler (any number of tp/pp ranks repeating it): 3 running, 2 waiting,
    and a probe's own queue, prefill and TTFT, never multiplied by the ranks."""
    a = M.parse_metrics(sglang_page(sep, ranks, done=4, running=3, waiting=2), "sglang", t=0)
    b = M.parse_metrics(sglang_page(sep, ranks, done=5, running=3, waiting=2), "sglang", t=1)
    assert a.get("running") == 3 and a.get("waiting") == 2
    assert a.missing == ("cached_tokens", "cache_hit_rate")  # not on these pages
    d = M.delta(a, b)
    assert d.only("queue") == pytest.approx(0.002)
    assert d.only("prefill") == pytest.approx(0.05)  # the prefill_forward stage
    assert d.only("ttft") == pytest.approx(0.08)
    assert d.only("stage:request_process") == pytest.approx(0.001)
    assert d.counters["prompt_tokens"] == 50


def test_data_parallel_ranks_add_up():
    """--dp 2: each dp_rank schedules its own requests (2 tp ranks each, all recording):
    running and waiting add over dp ranks, once per dp rank."""
    ranks = [{"tp_rank": str(t), "dp_rank": str(d)} for d in range(2) for t in range(2)]
    s = M.parse_metrics(sglang_page("_", ranks, done=4, running=3, waiting=1), "sglang")
    assert s.get("running") == 6 and s.get("waiting") == 2
    assert s.hist["queue"] == (pytest.approx(0.016), 8)


def test_dp_attention_groups_from_server_info_add_up():
    """--tp 4 --dp 2 --enable-dp-attention: no dp_rank label; tp ranks 0-1 and 2-3 are
    two attention groups with their own schedulers.  With the layout /server_info
    states (group of 2) the groups add up; without it every tp rank is read as one
    scheduler's replica (SGLang's default layout)."""
    page = sglang_page(":", [{"tp_rank": str(t)} for t in range(4)], done=4, running=3)
    assert M.parse_metrics(page, "sglang", group_size=2).get("running") == 6
    assert M.parse_metrics(page, "sglang").get("running") == 3
    info = ServerInfo(kind="sglang", facts={"tp_size": 4, "dp_size": 2,
                                            "enable_dp_attention": True})
    assert H.rank_group_size(info) == 2
    assert H.rank_group_size(ServerInfo(kind="sglang", facts={"tp_size": 4, "dp_size": 2}))\
        is None  # plain DP: dp_rank labels tell the shards


def test_priority_total_is_read_beside_its_breakdown():
    """With priority scheduling the queue gauge is published as a total
    (priority="") beside per-priority parts: the total is read, not total + parts."""
    page = "\n".join([
        "# TYPE sglang:num_queue_reqs gauge",
        'sglang:num_queue_reqs{model_name="m",tp_rank="0",priority=""} 5',
        'sglang:num_queue_reqs{model_name="m",tp_rank="0",priority="1"} 3',
        'sglang:num_queue_reqs{model_name="m",tp_rank="0",priority="2"} 2',
        "# TYPE sglang:num_running_reqs gauge",
        'sglang:num_running_reqs{model_name="m",tp_rank="0",priority="1"} 1',
        'sglang:num_running_reqs{model_name="m",tp_rank="0",priority="2"} 2', ""])
    s = M.parse_metrics(page, "sglang")
    assert s.get("waiting") == 5
    assert s.get("running") == 3  # no total published: the parts add up


def test_a_hit_rate_is_averaged_over_shards_not_added():
    page = "\n".join(["# TYPE sglang:cache_hit_rate gauge",
                      'sglang:cache_hit_rate{tp_rank="0",dp_rank="0"} 0.5',
                      'sglang:cache_hit_rate{tp_rank="1",dp_rank="0"} 0.5',
                      'sglang:cache_hit_rate{tp_rank="0",dp_rank="1"} 0.25', ""])
    assert M.parse_metrics(page, "sglang").get("cache_hit_rate") == pytest.approx(0.375)


def test_vllm_names_in_the_underscore_spelling_and_engines_add_up():
    """vLLM's names rewritten ``vllm_`` by an exporter in between: read the same; its
    ``engine`` label (data-parallel engines) adds up; when both spellings are on one
    page the exact one wins (never added)."""
    page = "\n".join([
        "# TYPE vllm_num_requests_running gauge",
        'vllm_num_requests_running{engine="0",model_name="m"} 2',
        'vllm_num_requests_running{engine="1",model_name="m"} 1',
        "# TYPE vllm_time_to_first_token_seconds histogram",
        'vllm_time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.5',
        'vllm_time_to_first_token_seconds_count{engine="0",model_name="m"} 3', ""])
    s = M.parse_metrics(page, "vllm")
    assert s.get("running") == 3 and s.hist["ttft"] == (pytest.approx(1.5), 3)
    both = page + "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 7\n"
    assert M.parse_metrics(both, "vllm").get("running") == 7


def test_sglangs_older_itl_name_is_read_after_the_current_one():
    old = ("# TYPE sglang_time_per_output_token_seconds histogram\n"
           'sglang_time_per_output_token_seconds_sum{tp_rank="0"} 0.5\n'
           'sglang_time_per_output_token_seconds_count{tp_rank="0"} 10\n')
    assert M.parse_metrics(old, "sglang").hist["itl"] == (pytest.approx(0.5), 10)
    new = old + ("# TYPE sglang:inter_token_latency_seconds histogram\n"
                 "sglang:inter_token_latency_seconds_sum 0.2\n"
                 "sglang:inter_token_latency_seconds_count 8\n")
    assert M.parse_metrics(new, "sglang").hist["itl"] == (pytest.approx(0.2), 8)


def test_llamacpp_and_deprecated_vllm_names_in_either_spelling():
    s = M.parse_metrics("# TYPE llamacpp_requests_processing gauge\n"
                        "llamacpp_requests_processing 2\n", "llama.cpp")
    assert s.get("running") == 2
    # vLLM's deprecated v0 names (gpu_prefix_cache_*) still read, in the other spelling too
    s = M.parse_metrics("# TYPE vllm_gpu_prefix_cache_hits_total counter\n"
                        "vllm_gpu_prefix_cache_hits_total 64\n", "vllm")
    assert s.get("cache_hits") == 64


# ------------------------------------------------ advice only when it is true

async def test_enable_metrics_is_advised_only_when_no_engine_series(fake_server):
    """A page of SGLang series none of whose names prefilltui reads: metrics are on, so
    no "--enable-metrics"; a page with no SGLang series at all: the flag is advised."""
    other = "# TYPE sglang_token_usage gauge\nsglang_token_usage{tp_rank=\"0\"} 0.1\n"
    srv = fake_server({"GET /metrics": Reply.text(other)})
    async with H.MetricsReader(srv.base_url, "sglang") as rd:
        assert await rd.scrape() is not None
        assert "--enable-metrics" not in rd.problem
        assert "1 sglang series, none under the names prefilltui reads" in rd.problem
    srv.set("GET /metrics", Reply.text("# TYPE python_gc_objects_collected_total counter\n"
                                       "python_gc_objects_collected_total 12\n"))
    async with H.MetricsReader(srv.base_url, "sglang") as rd:
        await rd.scrape()
        assert "--enable-metrics" in rd.problem
    srv.set("GET /metrics", Reply.text(handed_page(1)))
    async with H.MetricsReader(srv.base_url, "sglang") as rd:
        s = await rd.scrape()
        assert rd.problem is None and s.get("running") == 0


async def test_hook_reads_the_dp_attention_layout_from_discovery(fake_server):
    """The hook's reader takes the attention group size from the probe client's
    ServerInfo facts (SGLang /server_info)."""
    ranks = [{"tp_rank": str(t)} for t in range(4)]
    pages = [Reply.text(sglang_page("_", ranks, done=1, running=1)),
             Reply.text(sglang_page("_", ranks, done=2, running=1))]
    srv = fake_server({"GET /metrics": pages})

    class Client:  # what the hook reads from a probe client
        root = srv.base_url
        http = None
        timeout = 5.0
        info = ServerInfo(base_url=srv.base_url, kind="sglang", metrics_url=None,
                          facts={"tp_size": 4, "dp_size": 2, "enable_dp_attention": True})

    hook = H.MetricsHook()
    r = ProbeResult(ok=True, ttft_s=0.1, requested_tokens=50, prompt_tokens=50)
    await hook.before_probe(Client())
    await hook.after_probe(r)
    await hook.aclose()
    assert r.server_running == 2  # two attention groups, one running request each
    # two groups each finished a request in the window: not this probe's own figure
    assert r.queue_s is None and r.server_ttft_s == pytest.approx(0.08)
