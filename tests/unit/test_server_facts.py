"""SGLang and TGI server facts over HTTP: SGLang's
``/server_info`` (``/get_server_info`` the deprecated alias) gives the chunk budget the
chunk-step test uses, as vLLM's ``/server_info`` does, and the rank layout the metrics
read; TGI's ``/info`` its batch facts.  The answers are written from the engines'
sources, cited at each."""

from __future__ import annotations

import json

import pytest

from prefilltui.measure.probe import ProbeClient
from prefilltui.measure.server_facts import sglang_facts, tgi_facts
from prefilltui.model.diagnosis.chunking import detect_chunking, server_chunk
from prefilltui.model.types import ServerInfo, server_info_from_session, session_facts
from tests.fakeserver import Reply, models_reply

#: SGLang ``GET /server_info``: python/sglang/srt/entrypoints/http_server.py
#: ``server_info`` returns ``{**dataclasses.asdict(server_args), **scheduler_info,
#: "internal_states": [...], "version": __version__}``; the ServerArgs fields
#: (server_args.py) shortened to those read and a few beside them, values as a
#: ``--tp 2 --chunked-prefill-size 4096 --enable-metrics`` launch states them.
SGLANG_SERVER_INFO = json.loads("""{
  "model_path": "Qwen/Qwen3-8B", "tokenizer_path": "Qwen/Qwen3-8B", "host": "127.0.0.1",
  "port": 30000, "mem_fraction_static": 0.871, "max_running_requests": null,
  "max_total_tokens": null, "chunked_prefill_size": 4096, "max_prefill_tokens": 16384,
  "schedule_policy": "fcfs", "schedule_conservativeness": 1.0, "page_size": 1,
  "tp_size": 2, "pp_size": 1, "dp_size": 1, "ep_size": 1, "enable_dp_attention": false,
  "enable_metrics": true, "enable_metrics_for_all_schedulers": false,
  "disable_radix_cache": false, "context_length": null, "api_key": null,
  "max_total_num_tokens": 412731, "max_req_input_len": 40954,
  "internal_states": [{"last_gen_throughput": 0.0, "memory_usage": {"weight": 7.9}}],
  "version": "0.5.4"
}""")

#: TGI 2.1 ``GET /info``: router/src/lib.rs ``Info`` before the backends split
#: (huggingface/text-generation-inference 2b19d671^), with its schema examples.
TGI_INFO_21 = json.loads("""{
  "model_id": "bigscience/blomm-560m", "model_sha": "e985a63cdc139290c5f700ff1929f0b5942cced2",
  "model_dtype": "torch.float16", "model_device_type": "cuda",
  "model_pipeline_tag": "text-generation", "max_concurrent_requests": 128, "max_best_of": 2,
  "max_stop_sequences": 4, "max_input_tokens": 1024, "max_total_tokens": 2048,
  "waiting_served_ratio": 1.2, "max_batch_total_tokens": 32000, "max_waiting_tokens": 20,
  "max_batch_size": null, "validation_workers": 2, "max_client_batch_size": 32,
  "router": "text-generation-router", "version": "2.1.1", "sha": null, "docker_label": null
}""")

#: The v3 backend's ``BackendInfo`` fields (backends/v3/src/lib.rs, schema examples);
#: the router of that snapshot does not put them on /info, a server that does is read.
TGI_V3_BACKEND = {"model_device_type": "cuda", "model_dtype": "torch.float16",
                  "speculate": 1, "waiting_served_ratio": 1.2,
                  "max_batch_total_tokens": 32000, "max_waiting_tokens": 20,
                  "max_batch_size": None, "support_chunking": True, "prefix_caching": True,
                  "attention_impl": "flashinfer", "block_size": 1, "max_input_tokens": 30000,
                  "max_total_tokens": 32000}


def test_sglang_facts_from_server_info():
    chunk, facts = sglang_facts(SGLANG_SERVER_INFO)
    assert chunk == 4096
    assert facts["tp_size"] == 2 and facts["dp_size"] == 1
    assert facts["enable_dp_attention"] is False and facts["disable_radix_cache"] is False
    assert facts["max_total_num_tokens"] == 412731 and facts["version"] == "0.5.4"
    assert "internal_states" not in facts and "api_key" not in facts
    assert "max_running_requests" not in facts  # null: not stated
    # chunked prefill off (-1), a bad type, not an object at all
    assert sglang_facts({**SGLANG_SERVER_INFO, "chunked_prefill_size": -1})[0] is None
    assert sglang_facts({"chunked_prefill_size": "4096", "tp_size": True})[1] == {
        "chunked_prefill_size": "4096", "tp_size": True}
    assert sglang_facts({"chunked_prefill_size": "4096"})[0] is None
    assert sglang_facts([1, 2]) == (None, {})


def test_tgi_facts_from_info():
    f = tgi_facts(TGI_INFO_21)
    assert f == {"max_batch_total_tokens": 32000, "max_waiting_tokens": 20,
                 "waiting_served_ratio": 1.2, "max_concurrent_requests": 128,
                 "version": "2.1.1"}
    f = tgi_facts({**TGI_INFO_21, **TGI_V3_BACKEND})
    assert f["support_chunking"] is True and f["prefix_caching"] is True


def sglang_routes(server_info_path: str = "/server_info") -> dict:
    return {"GET /v1/models": models_reply("Qwen/Qwen3-8B"),
            "GET /model_info": Reply.json({"model_path": "Qwen/Qwen3-8B",
                                           "is_generation": True}),
            f"GET {server_info_path}": Reply.json(SGLANG_SERVER_INFO)}


@pytest.mark.parametrize("path", ["/server_info", "/get_server_info"])
async def test_discovery_reads_sglang_server_info_or_its_deprecated_alias(fake_server, path):
    """A newer SGLang (``/model_info``, ``/server_info``) or an older one that answers
    only the deprecated ``/get_server_info``: kind sglang, the chunk budget 4096 and the
    rank layout; the new path is asked first and the alias only when it fails."""
    srv = fake_server(sglang_routes(path))
    async with ProbeClient(srv.base_url, timeout=5) as c:
        info = await c.discover()
    assert info.kind == "sglang" and info.chunked_prefill_size == 4096
    assert info.facts["tp_size"] == 2
    asked = [r.path for r in srv.requests if r.path.endswith("server_info")]
    assert asked == (["/server_info"] if path == "/server_info"
                     else ["/server_info", "/get_server_info"])
    # the chunk budget is the chunk-step test's, and the session line keeps it
    assert server_chunk(info) == (4096, "SGLang chunked_prefill_size 4096")
    assert server_info_from_session(session_facts(info)).chunked_prefill_size == 4096


async def test_discovery_reads_tgi_info(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("bigscience/blomm-560m"),
                       "GET /info": Reply.json(TGI_INFO_21)})
    async with ProbeClient(srv.base_url, timeout=5) as c:
        info = await c.discover()
    assert info.kind == "tgi" and info.context_tokens == 1024
    assert info.facts["max_batch_total_tokens"] == 32000
    assert info.facts["max_waiting_tokens"] == 20
    assert info.chunked_prefill_size is None  # TGI states no prefill chunk on /info


def test_the_chunk_step_test_runs_at_sglangs_budget():
    """Steps every 512 tokens (SGLang's stated chunk), 30 ms each over a 1 ms/token
    line: tested at the stated size alone and found."""
    info = ServerInfo(kind="sglang", chunked_prefill_size=512)
    x = [float(n) for n in range(100, 3000, 37)]
    y = [0.02 + 0.001 * n + 0.030 * (int(n) // 512) for n in x]
    ch = detect_chunking(x=x, y=y, server_info=info)
    assert ch.source == "server" and ch.chunk_tokens == 512
    assert ch.step_s == pytest.approx(0.030, rel=0.05) and ch.p_value < 0.01
    off = ServerInfo(kind="sglang", facts={"chunked_prefill_size": -1})
    assert server_chunk(off) == (None, "SGLang runs with chunked prefill off "
                                       "(chunked_prefill_size -1)")
