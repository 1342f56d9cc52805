"""MetricsHook wired into a real SweepRunner (hooks=[MetricsHook()]) against a fake
vLLM whose /metrics histograms advance with every request it serves."""

from __future__ import annotations

import threading

from tests.fakeserver import Reply, models_reply, sse_data, sse_done, sse_text
from prefilltui.model.diagnosis.ttft_breakdown import breakdown
from prefilltui.measure.metrics_hook import MetricsHook
from prefilltui.measure.probe import ProbeClient
from prefilltui.measure.sweep import SweepRunner
from prefilltui.measure.sweep import SweepConfig

QUEUE_S = 0.003


class FakeVllm:
    """Server TTFT = queue + 20 us per word; the client sees it plus loopback overhead."""

    def __init__(self):
        self.lock = threading.Lock()
        self.n = 0
        self.ttft = self.queue = self.prefill = 0.0

    def metrics(self, req):
        with self.lock:
            lines = ["# TYPE vllm:num_requests_running gauge", "vllm:num_requests_running 0.0",
                     "# TYPE vllm:num_requests_waiting gauge", "vllm:num_requests_waiting 0.0"]
            for name, s in (("time_to_first_token", self.ttft), ("request_queue_time", self.queue),
                            ("request_prefill_time", self.prefill)):
                full = f"vllm:{name}_seconds"
                lines += [f"# TYPE {full} histogram", f'{full}_bucket{{le="+Inf"}} {self.n}',
                          f"{full}_sum {s}", f"{full}_count {self.n}"]
        return Reply.text("\n".join(lines) + "\n")

    def complete(self, req):
        words = len(req.json["prompt"].split())
        prefill = 2e-5 * words
        with self.lock:
            self.n += 1
            self.ttft += QUEUE_S + prefill
            self.queue += QUEUE_S
            self.prefill += prefill
        return Reply.sse([(QUEUE_S + prefill, sse_text("x")),
                          (QUEUE_S + prefill, sse_data({"choices": [], "usage": {"prompt_tokens": words}})),
                          (QUEUE_S + prefill, sse_done())])


def test_sweep_with_metrics_hook_fills_breakdown(fake_server):
    v = FakeVllm()
    srv = fake_server({"GET /v1/models": models_reply("m", max_model_len=8192),
                       "GET /metrics": v.metrics, "POST /v1/completions": v.complete,
                       "GET /version": Reply.json({"version": "0.11.0"})})
    hook = MetricsHook()
    runner = SweepRunner(lambda: ProbeClient(srv.base_url, timeout=5),
                         SweepConfig(lengths=[100, 400, 1600], repeats=2, warmup=1, seed=1),
                         hooks=[hook])
    runner.start()
    runner.join()
    assert runner.server_info.kind == "vllm", runner.server_info
    ok = [r for r in runner.results if r.ok and not r.warmup]
    assert len(ok) == 6 and hook.problem is None
    for r in ok:
        assert abs(r.queue_s - QUEUE_S) < 1e-9
        assert r.server_prefill_s is not None and r.overhead_s is not None
        assert 0 <= r.overhead_s < 0.05  # loopback + fake-server scheduling
        assert r.server_running == 0 and r.server_waiting == 0
    b = breakdown(runner.results)
    assert b.available and b.max_sum_error_s < 1e-9
