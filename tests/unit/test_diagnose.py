"""Diagnosis: TTFT breakdown, chunked-prefill detection on synthetic step data, drift
against a baseline fit, baseline loading, accidental cache hits, and the prefix-cache
check against a loopback fake llama.cpp server that caches like the real one."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest


from tests.fakeserver import Reply, llama_routes, sse_data, sse_done
from prefilltui.model.diagnosis import ttft_breakdown as B
from prefilltui.model.diagnosis import diagnose as D
from prefilltui.render.tables import format_breakdown, format_diagnosis
from prefilltui.model.diagnosis import baseline as DR
from prefilltui.measure import prefix_cache as PC
from prefilltui.model.fit import fit_ols
from prefilltui.measure.probe import ProbeClient
from prefilltui.measure.runfile import RunWriter
from prefilltui.measure.runfile import load_baseline
from prefilltui.model.types import ProbeResult, ServerInfo


def _r(seq, n, ttft, prefill=None, queue=None, overhead=None, **kw) -> ProbeResult:
    return ProbeResult(seq=seq, ok=True, requested_tokens=n, prompt_tokens=n, ttft_s=ttft,
                       server_prefill_s=prefill, queue_s=queue, overhead_s=overhead, **kw)


def test_breakdown_sums_and_names_prefill():
    rs = [_r(i, n, 0.010 + 1e-4 * n, prefill=0.004 + 1e-4 * n, queue=0.0, overhead=0.006)
          for i, n in enumerate([64, 128, 256, 512, 1024, 2048])]
    b = B.breakdown(rs)
    assert b.available and b.max_sum_error_s == pytest.approx(0.0, abs=1e-12)
    assert b.median.overhead_s == pytest.approx(0.006)
    assert "mostly prefill" in b.cause
    ic = b.intercept
    assert ic.intercept_s == pytest.approx(0.010, abs=1e-6)
    assert ic.prefill_s == pytest.approx(0.004, abs=1e-6)
    assert ic.overhead_s == pytest.approx(0.006, abs=1e-6)


def test_breakdown_names_queueing_under_load():
    rs = [_r(i, 256, 1.5 + 0.01 * i, prefill=0.03, queue=1.46 + 0.01 * i, overhead=0.01,
             server_running=4, server_waiting=2) for i in range(6)]
    b = B.breakdown(rs)
    assert "mostly queueing" in b.cause and "4 running, 2 waiting" in b.cause
    assert D.load_line(rs[0]) == "4 running, 2 waiting"


def test_breakdown_without_server_timings_says_so():
    b = B.breakdown([_r(1, 100, 0.1), _r(2, 200, 0.2)])
    assert not b.available and "cannot be split" in b.cause
    assert B.breakdown([]).cause == "no successful probes yet"


def test_breakdown_from_server_ttft_and_queue():
    r = _r(1, 512, 0.530, queue=0.004, overhead=0.018, server_ttft_s=0.512)
    p = B.probe_parts(r)
    assert p.prefill_s == pytest.approx(0.508)
    assert p.sum_error_s == pytest.approx(0.0, abs=1e-12)


def _steps(chunk, step, a=0.02, b=1e-4, noise=0.01, n=120, hi=4096, seed=1):
    rng = random.Random(seed)
    x = [rng.randint(32, hi) for _ in range(n)]
    y = [(a + b * v + step * np.ceil(v / chunk)) * (1 + rng.gauss(0, noise)) for v in x]
    return x, y


@pytest.mark.parametrize("chunk", [256, 512, 1024])
def test_detect_chunking_finds_the_step(chunk):
    x, y = _steps(chunk, 0.05)
    c = D.detect_chunking(x=x, y=y)
    assert c.source == "detected" and c.chunk_tokens == chunk
    assert c.step_s == pytest.approx(0.05, rel=0.15)
    assert c.boundaries[0] == chunk and all(v % chunk == 0 for v in c.boundaries)
    assert f"every {chunk:,} tokens" in c.line


def test_detect_chunking_no_steps_on_a_line():
    x, y = _steps(512, 0.0)
    assert D.find_steps(x, y) is None
    c = D.detect_chunking(x=x, y=y, server_info=ServerInfo(kind="llama.cpp", n_batch=2048,
                                                           n_ubatch=512))
    assert c.source == "server" and c.chunk_tokens == 512
    assert c.boundaries[:3] == (512, 1024, 1536)
    assert "n_ubatch 512, n_batch 2048" in c.line and "no TTFT step" in c.line
    assert D.detect_chunking(x=x, y=y).chunk_tokens is None


def _fit(b, a=0.02, noise=0.02, seed=3):
    rng = random.Random(seed)
    x = [64 * k for k in range(1, 41)]
    y = [(a + b * v) * (1 + rng.gauss(0, noise)) for v in x]
    return fit_ols(x, y)


def test_drift_warns_on_throughput_drop_and_intercept_rise():
    base = _fit(1e-4)
    assert DR.drift(base, _fit(1.02e-4, seed=4)) is None  # within noise
    msg = DR.drift(base, _fit(1.45e-4, seed=5))
    assert msg and msg.startswith("prefill throughput −3") and "vs baseline" in msg
    msg = DR.drift(base, _fit(1e-4, a=0.30, seed=6))
    assert msg and msg.startswith("intercept +")
    assert DR.drift(base, _fit(0.6e-4, seed=7)) is None  # faster is not a warning
    assert DR.drift(None, base) is None


def test_load_baseline(tmp_path):
    p = tmp_path / "run.jsonl"
    with RunWriter(p) as w:
        for i, n in enumerate([64, 128, 256, 512, 1024]):
            w.append(_r(i, n, 0.01 + 2e-4 * n))
        w.append(ProbeResult(seq=9, ok=False, error_kind="timeout"))
    f = load_baseline(str(p))
    assert f.prefill_tokens_per_s == pytest.approx(5000, rel=1e-3)
    with RunWriter(tmp_path / "few.jsonl") as w:
        w.append(_r(1, 64, 0.1))
    with pytest.raises(ValueError, match="usable probe"):
        load_baseline(str(tmp_path / "few.jsonl"))
    with pytest.raises(FileNotFoundError):
        load_baseline(str(tmp_path / "missing.jsonl"))


def test_flag_cache_hits():
    rs = [_r(1, 100, 0.1), _r(2, 100, 0.01, cached_tokens=99), _r(3, 100, 0.1, cached_tokens=0)]
    assert "1 probe(s) hit the prefix cache" in D.flag_cache_hits(rs)
    assert "seq 2" in D.flag_cache_hits(rs)
    assert D.flag_cache_hits(rs[:1]) is None


class CachingLlama:
    """A /v1/completions handler that caches prompts like llama-server: with
    cache_prompt (default true) the longest common word prefix of the last prompt is
    reused (timings.cache_n) and only the rest costs 1 ms per word."""

    def __init__(self, honour_flag=True):
        self.last: list[str] = []
        self.honour = honour_flag
        self.bodies: list[dict] = []

    def __call__(self, req):
        body = req.json
        self.bodies.append(body)
        words = body["prompt"].split()
        cached = 0
        if body.get("cache_prompt", True) or not self.honour:
            while cached < min(len(words), len(self.last)) - 0 and words[cached] == self.last[cached]:
                cached += 1
            cached = min(cached, len(words) - 1)
        self.last = words
        work = len(words) - cached
        t = 0.001 * work
        timings = {"cache_n": cached, "prompt_n": work, "prompt_ms": t * 1000}
        return Reply.sse([(t, sse_data({"choices": [{"index": 0, "text": "x", "finish_reason": None}]})),
                          (t, sse_data({"choices": [], "timings": timings,
                                        "usage": {"prompt_tokens": len(words),
                                                  "completion_tokens": 1}})),
                          (t, sse_done())])


async def test_cache_check_against_caching_fake(fake_server):
    h = CachingLlama()
    srv = fake_server({**llama_routes(), "POST /v1/completions": h})
    async with ProbeClient(srv.base_url, model="m", timeout=10) as c:
        res = await PC.cache_check(c, 300, tail_tokens=20)
    assert res.verdict == "on", res.line
    assert res.repeat_cached >= res.tokens - 1 and res.prefix_cached >= res.tokens - 1
    assert res.nocache_cached == 0
    assert res.saved_s > 0.15
    assert res.line.startswith("cache on: repeat of ")
    assert "cache_prompt:false" in res.line
    flags = [b.get("cache_prompt") for b in h.bodies]
    assert flags == [True, True, True, False]
    assert c.extra_body == {}  # restored
    json.dumps(res.to_json())


async def test_cache_check_reports_off(fake_server):
    class NoCache(CachingLlama):
        def __call__(self, req):
            self.last = []
            return super().__call__(req)

    srv = fake_server({**llama_routes(), "POST /v1/completions": NoCache()})
    async with ProbeClient(srv.base_url, model="m", timeout=10) as c:
        res = await PC.cache_check(c, 200)
    assert res.verdict == "off" and res.line.startswith("cache off:")
    assert res.saved_s is None


async def test_cache_check_failure_is_reported(fake_server):
    srv = fake_server({**llama_routes(), "POST /v1/completions": Reply.json(
        {"error": {"message": "boom"}}, status=500)})
    async with ProbeClient(srv.base_url, model="m", timeout=10) as c:
        res = await PC.cache_check(c, 50)
    assert res.verdict == "failed" and "boom" in res.line


def test_format_breakdown_and_llamacpp_chunk_note():
    rs = [_r(i, n, 0.010 + 1e-4 * n, prefill=0.004 + 1e-4 * n, queue=0.0, overhead=0.006)
          for i, n in enumerate([64, 128, 256, 512])]
    text = format_breakdown(B.breakdown(rs))
    assert text.startswith("TTFT breakdown (median): overhead 6 ms, queue 0 ms")
    assert "intercept 10 ms = server prefill 4 ms" in text
    assert format_breakdown(B.breakdown([])) == "TTFT breakdown: no successful probes yet"
    x, y = _steps(512, 0.0)
    c = D.detect_chunking(x=x, y=y, server_info=ServerInfo(kind="llama.cpp"))
    assert c.chunk_tokens is None and "-b/-ub" in c.line


def test_summarize_diagnosis_with_baseline(tmp_path):
    p = tmp_path / "base.jsonl"
    with RunWriter(p) as w:
        for i, n in enumerate([64, 128, 256, 512, 1024, 2048]):
            w.append(_r(i, n, 0.01 + 1e-4 * n, prefill=0.004 + 1e-4 * n, queue=0.0,
                        overhead=0.006))
    live = [_r(i, n, 0.01 + 1.5e-4 * n * (1 + 0.001 * (i % 3)), prefill=0.004 + 1.5e-4 * n,
               queue=0.0, overhead=0.006) for i, n in enumerate([64, 128, 256, 512, 1024, 2048] * 2)]
    live.append(_r(99, 512, 0.001, cached_tokens=500))
    d = D.summarize_diagnosis(live, ServerInfo(kind="llama.cpp"), baseline=str(p),
                              baseline_fit=load_baseline(str(p)), metrics_problem="no metrics")
    assert d.drift.startswith("prefill throughput −33 %")
    assert "seq 99" in d.cache_warning and d.notes == ("no metrics",)
    text = format_diagnosis(d)
    assert "drift: prefill throughput −33 %" in text and "note: no metrics" in text
    json.dumps(d.to_json())
    with pytest.raises(OSError) as e:
        load_baseline(str(tmp_path / "nope.jsonl"))
    d2 = D.summarize_diagnosis(live, baseline=str(tmp_path / "nope.jsonl"),
                               baseline_problem=str(e.value))
    assert d2.drift is None and d2.notes[0].startswith("baseline not used")


def test_no_intercept_split_from_one_length():
    rs = [_r(i, 256 + i % 2, 7.0 + 0.5 * i, prefill=6.9 + 0.5 * i, queue=0.0, overhead=0.03)
          for i in range(5)]
    b = B.breakdown(rs)
    assert b.available and b.intercept is None
    assert "intercept" not in format_breakdown(b)
