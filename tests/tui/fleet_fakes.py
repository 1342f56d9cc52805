"""Fake fleets for the overview's tests: eight targets in different states, built
from the real feed configs and the fake runner/sampler of ``fakes.py``."""

from __future__ import annotations

from tests.tui.fakes import (LENGTHS, T0, FakeRunner, FakeSampler, fake_snapshot,
                             gpu_snapshot, make_result)

from prefilltui.model.fleet import fleet_load
from prefilltui.model.spec import AnalysisOptions, RooflineSpec
from prefilltui.model.types import ProbeResult, ServerInfo
from prefilltui.tui.app import FeedConfig, build_fleet_app

WALL = T0 + 120.0  # the fixed "now" of the overview (unix s)


def probes(a: float, b: float, *, n: int = 16, fail_every: int = 0, cached: int = 0,
           queue: float | None = None) -> list[ProbeResult]:
    """``n`` probes on TTFT = a + b*tokens over the fake lengths, a warm-up first."""
    noise = [0.0012, -0.0008, 0.0005, -0.0011, 0.0009, -0.0004, 0.0015, -0.0013]
    out = [make_result(0, 512, a=a, b=b, warmup=True)]
    for i in range(1, n + 1):
        tok = LENGTHS[i % len(LENGTHS)]
        ok = not (fail_every and i % fail_every == 0)
        r = make_result(i, tok, a=a, b=b, noise=noise[i % 8] * (1 + b * 1e4), ok=ok)
        if cached and i == 3:
            r.cached_tokens = cached
        if queue is not None and ok:
            r.queue_s = queue
        out.append(r)
    return out


def down() -> list[ProbeResult]:
    return [make_result(i, 256, ok=False, error_kind="connect") for i in range(1, 4)]


class DownRunner(FakeRunner):
    """Never reached: discovery fails, the runner retries."""

    def start(self):
        self.calls.append(("start",))
        self._set("retrying", "server unreachable: connection refused; retrying in 2 s")

    @property
    def server_info(self):
        return None


def info(kind: str, model: str) -> ServerInfo:
    return ServerInfo(base_url="http://x", kind=kind, model=model, context_tokens=8192)


#: (name, runner kind, preload, server info, sampler, GPU source words)
def _targets():
    h200 = FakeSampler(gpu_snapshot(1))
    cpu = FakeSampler()
    none = FakeSampler(fake_snapshot(kind="none", available=False, reason=(
        "no GPU source: gpu-07 is another machine; set gpu_metrics_url to its "
        "dcgm-exporter or nvitop exporter page")))
    llama = info("llama.cpp", "SmolLM2-135M-Instruct")
    vllm = info("vllm", "HuggingFaceTB/SmolLM2-135M-Instruct")
    page = "GPU page http://{}:9400/metrics"
    return [
        ("gpu-01", FakeRunner, probes(0.020, 45e-6), vllm, h200, page),
        ("gpu-02", FakeRunner, probes(0.021, 46e-6, queue=0.004), vllm, h200, page),
        ("gpu-03-slow", FakeRunner, probes(0.030, 140e-6), vllm, h200, page),
        ("gpu-04-flaky", FakeRunner, probes(0.020, 47e-6, fail_every=3), vllm, h200, page),
        ("gpu-05-cache", FakeRunner, probes(0.020, 45e-6, cached=900), vllm, h200, page),
        ("cpu-demo", FakeRunner, probes(0.10, 6e-3), llama, cpu, "this machine's CPU"),
        ("gpu-07", FakeRunner, probes(0.6, 45e-6), vllm, none, "no GPU source"),
        ("gpu-08-down", DownRunner, [], None, none, "no GPU source"),
    ]


def fleet_configs() -> list[FeedConfig]:
    out = []
    for name, cls, preload, inf, sampler, words in _targets():
        def factory(on_result, on_state, cls=cls, preload=preload, inf=inf):
            return cls(on_result, on_state, preload=preload, info=inf)

        out.append(FeedConfig(label=name, url=f"http://{name}:8000", runner_factory=factory,
                              sampler=sampler, gpu_source=words.format(name),
                              analysis=AnalysisOptions(window=12, roofline=RooflineSpec()),
                              sweep_range=(min(LENGTHS), max(LENGTHS))))
    return out


def many_configs(n: int) -> list[FeedConfig]:
    """``n`` healthy-looking targets (the 100-target tests)."""
    llama = info("llama.cpp", "SmolLM2-135M-Instruct")
    sampler = FakeSampler()
    out = []
    for i in range(n):
        pre = probes(0.02 + 0.001 * (i % 7), 45e-6 * (1 + 0.05 * (i % 5)), n=12)

        def factory(on_result, on_state, pre=pre):
            return FakeRunner(on_result, on_state, preload=pre, info=llama)

        out.append(FeedConfig(label=f"t{i:03d}", runner_factory=factory, sampler=sampler,
                              gpu_source="this machine's CPU"))
    return out


def fleet_app(**kw):
    kw.setdefault("load", fleet_load([LENGTHS] * 8, [4.0] * 8, 0.2))
    return build_fleet_app(fleet_configs(), wall_clock=lambda: WALL, **kw)
