"""A real sweep against the demo llama-server (SmolLM2-135M on the CPU).

Checks what a probe promises: no cached tokens, counted prompt tokens
within +-2 % of requested, TTFT rising with length, server_prefill_s <= ttft_s.
Prompts stay <= 512 tokens so the test is quick on 2 shared cores.
"""

from __future__ import annotations

import json
import statistics

import pytest

from prefilltui.cli import main
from prefilltui.measure.probe import ProbeClient
from prefilltui.measure.runfile import RunWriter
from prefilltui.measure.runfile import read_run
from prefilltui.measure.sweep import SweepRunner
from prefilltui.measure.sweep import SweepConfig

pytestmark = pytest.mark.integration

LENGTHS = [32, 128, 512]


@pytest.fixture(scope="module")
def sweep(llama_server, tmp_path_factory):
    path = tmp_path_factory.mktemp("run") / "run.jsonl"
    w = RunWriter(path)
    runner = SweepRunner(lambda: ProbeClient(llama_server.base_url, timeout=120, seed=7),
                         SweepConfig(LENGTHS, repeats=2, warmup=1, seed=7), runfile=w)
    runner.start()
    runner.join(600)
    w.close()
    assert runner.state == "done", runner.state_detail
    return runner, path


def test_discovery(sweep):
    runner, _ = sweep
    info = runner.server_info
    assert info.kind == "llama.cpp" and info.has_tokenize
    assert info.context_tokens == 4096
    assert info.hidden == 576 and info.params and 1.0e8 < info.params < 2.0e8


def test_probes_ok_uncached_and_on_length(sweep):
    runner, path = sweep
    rs = [r for r in runner.results if not r.warmup]
    assert len(rs) == len(LENGTHS) * 2 and all(r.ok for r in rs), [r.error_message for r in rs]
    for r in runner.results:
        assert r.cached_tokens in (0, None), r
        assert not r.cache_hit
        assert abs(r.prompt_tokens - r.requested_tokens) <= max(1, 0.02 * r.requested_tokens), r
        assert r.server_prefill_s is not None and r.server_prefill_s <= r.ttft_s, r
        assert r.ttfb_s <= r.ttft_s <= r.total_s
    back, problems = read_run(path)
    assert problems == [] and len(back) == len(runner.results)


def test_ttft_rises_with_length(sweep):
    runner, _ = sweep
    med = {n: statistics.median(r.ttft_s for r in runner.results
                                if r.requested_tokens == n and not r.warmup) for n in LENGTHS}
    # a shared 2-core machine is noisy: ask for the trend, not strict monotony everywhere
    assert med[32] < med[512] and med[128] < med[512], med
    xs = [r.prompt_tokens for r in runner.results if not r.warmup]
    ys = [r.ttft_s for r in runner.results if not r.warmup]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    assert slope > 0


def test_cli_json_prints_a_fit(llama_server, tmp_path, capsys):
    rc = main(["sweep", llama_server.base_url + "/v1", "--lengths", "64,512", "--repeats", "2",
               "--format", "json", "--out", str(tmp_path / "r.jsonl"), "--seed", "3"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    d = json.loads(cap.out)
    assert d["server"]["kind"] == "llama.cpp" and d["probes"]["failed"] == 0 and d["probes"]["cache_hits"] == 0
    assert d["fit"] and d["fit"]["slope_s_per_token"] > 0 and d["fit"]["n"] >= 3
    assert d["overhead_median_s"] is not None and d["overhead_median_s"] >= 0
