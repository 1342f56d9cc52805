"""Cache hits proven or ruled out by vLLM's own counters: a fake vLLM that, like vLLM
0.32.0 without ``--enable-prompt-tokens-details``, sends no cached-token count in
usage and counts cache hits only in ``/metrics`` (names and labels as the real
server publishes them; block size 128 tokens, as measured there)."""

from __future__ import annotations

from tests.fakeserver import Reply, models_reply, sse_data, sse_done, sse_text
from prefilltui.cli import main
from prefilltui.model import metrics as M
from prefilltui.measure.prefix_cache import cache_check
from prefilltui.measure.probe import ProbeClient
from prefilltui.model.types import ProbeResult

BLOCK = 128
METRICS = """# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{engine="0",model_name="m"}} {prompt}
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {prompt}
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",source="local_compute"}} {computed}
vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",source="local_cache_hit"}} {hits}
# TYPE vllm:estimated_flops_per_gpu_total counter
vllm:estimated_flops_per_gpu_total{{engine="0",model_name="m"}} {flops}
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} 0.0
"""


class FakeVllm:
    """One token per word; a prompt's full 128-token blocks already seen are hits."""

    def __init__(self, *, other_traffic: int = 0):
        self.prompt = self.hits = self.flops = 0
        self.blocks: set[tuple[str, ...]] = set()
        self.other = other_traffic  # prompt tokens another client adds per request

    def routes(self):
        return {"GET /v1/models": models_reply("m", max_model_len=4096),
                "GET /version": Reply.json({"version": "0.32.0"}),
                "GET /metrics": lambda req: Reply.text(METRICS.format(
                    prompt=float(self.prompt), hits=float(self.hits),
                    computed=float(self.prompt - self.hits), flops=float(self.flops))),
                "POST /tokenize": lambda req: Reply.json(
                    {"count": len(str(req.json.get("prompt", "")).split()),
                     "max_model_len": 4096}),
                "POST /v1/completions": self.complete}

    def complete(self, req):
        words = req.json["prompt"].split()
        n = len(words)
        hit = 0
        for k in range(BLOCK, n, BLOCK):  # the last (partial or full) block is recomputed
            if tuple(words[:k]) in self.blocks:
                hit = k
        for k in range(BLOCK, n + 1, BLOCK):
            self.blocks.add(tuple(words[:k]))
        self.prompt += n + self.other
        self.hits += hit
        self.flops += 2 * 100_000_000 * (n - hit)
        return Reply.sse([(0.01, sse_text("x", finish="length")),
                          (0.02, sse_data({"choices": [], "usage": {
                              "prompt_tokens": n, "completion_tokens": 1}})),
                          (0.03, sse_done())])


async def test_cache_check_quotes_vllms_counters(fake_server):
    fake = FakeVllm()
    srv = fake_server(fake.routes())
    async with ProbeClient(srv.base_url, timeout=10) as c:
        res = await cache_check(c, 600)
    assert c.info.kind == "vllm"
    assert res.cold_cached == 0  # a fresh prompt: the server counted 0 hits
    assert res.repeat_cached == 512  # 4 full blocks of 600 tokens
    assert res.prefix_cached == 512  # the shared prefix's blocks
    assert res.verdict == "on", res.line
    assert "(512 cached)" in res.line
    assert "judged by TTFT alone" not in " ".join(res.notes)
    assert "the server's /metrics counters around each probe" in " ".join(res.notes)


async def test_a_shared_window_is_never_attributed(fake_server):
    fake = FakeVllm(other_traffic=37)  # someone else's prompt counted in every window
    srv = fake_server(fake.routes())
    async with ProbeClient(srv.base_url, timeout=10) as c:
        res = await cache_check(c, 300)
    assert res.repeat_cached is None and res.cold_cached is None
    assert "judged by TTFT alone" in " ".join(res.notes)


def test_sweep_summary_counts_hits_from_the_counters(fake_server, tmp_path, capsys):
    import json

    fake = FakeVllm()
    srv = fake_server(fake.routes())
    out = tmp_path / "run.jsonl"
    rc = main(["sweep", srv.base_url, "--lengths", "200,300,400", "--repeats", "2", "--warmup",
               "0", "--no-telemetry", "--out", str(out), "--format", "json"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    d = json.loads(cap.out)
    p = d["probes"]
    assert p["cache_counted"] == p["ok"] == 6  # every probe's hit or miss counted
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    probes = [r for r in rows if "ttft_s" in r]
    assert all(r["cached_tokens_source"] == "metrics" for r in probes)
    assert all(r["server_flops"] > 0 for r in probes)
    assert p["cache_hits"] == sum(1 for r in probes if r["cached_tokens"])


def test_counts_need_a_window_of_this_probe_alone():
    r = ProbeResult(prompt_tokens=600, ok=True, ttft_s=0.1)
    d = M.MetricsDelta({}, {"prompt_tokens": 600.0, "cached_tokens": 512.0, "flops": 9e10},
                       {}, {}, 0.1)
    M.apply_counts(r, d)
    assert (r.cached_tokens, r.cached_tokens_source, r.server_flops) == (512, "metrics", 9e10)
    usage = ProbeResult(prompt_tokens=600, cached_tokens=0, cached_tokens_source="usage")
    M.apply_counts(usage, d)  # the response's own count stands; the counter's is noted
    assert usage.cached_tokens == 0 and usage.notes.metrics_cached_tokens == 512
    busy = ProbeResult(prompt_tokens=600)
    M.apply_counts(busy, M.MetricsDelta({}, {"prompt_tokens": 900.0, "cached_tokens": 0.0},
                                        {}, {}, 0.1))
    assert busy.cached_tokens is None and busy.notes.metrics_window


# ------------------------------------------------------------------ discovery

SMOLLM2_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                  "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
                  "num_key_value_heads": 3, "head_dim": 64, "intermediate_size": 1536,
                  "vocab_size": 49152, "tie_word_embeddings": True,
                  "max_position_embeddings": 8192}


def test_discovery_reads_the_budget_and_the_local_model_dir(fake_server, tmp_path, capsys):
    import json

    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2_CONFIG))
    fake = FakeVllm()
    routes = fake.routes()
    routes["GET /v1/models"] = models_reply(str(tmp_path), root=str(tmp_path),
                                            max_model_len=4096)
    # vLLM 0.32.0 /server_info?config_format=json (VLLM_SERVER_DEV_MODE=1), cut down
    routes["GET /server_info"] = lambda req: Reply.json(
        {"vllm_config": {"scheduler_config": {"max_num_batched_tokens": 512}}}
        if req.query == "config_format=json" else {"vllm_config": "model=..."})
    srv = fake_server(routes)
    rc = main(["sweep", srv.base_url, "--lengths", "100,200,300", "--warmup", "0",
               "--no-telemetry", "--out", str(tmp_path / "run.jsonl"), "--format", "json"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    d = json.loads(cap.out)
    from prefilltui.measure.runfile import read_session

    info = read_session(tmp_path / "run.jsonl")["server"]  # what report reads back
    assert info["max_num_batched_tokens"] == 512
    assert info["config_path"] == str(tmp_path / "config.json")
    model = d["model"]
    assert model["layers"] == 30 and model["hidden"] == 576
    assert str(tmp_path) in model["source"] and "/v1/models root" in model["source"]


def test_a_root_that_is_not_here_is_not_used():
    from prefilltui.measure.server import local_config

    assert local_config("/no/such/dir") is None
    assert local_config("meta-llama/Llama-3-8B") is None  # an HF id, not a path
    assert local_config(None) is None
