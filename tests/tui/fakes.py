"""Deterministic fake sources for the TUI tests: a runner with the SweepRunner
interface and a sampler returning real ``TelemetrySnapshot`` / ``DeviceSnapshot``
values (the types the app reads, so the app needs no duck typing)."""

from __future__ import annotations

import threading
from prefilltui.measure.telemetry import DeviceSnapshot, TelemetrySnapshot
from prefilltui.model.types import ProbeResult, ServerInfo

T0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC, fixed wall-clock stamps
NOW = 1000.0  # fixed perf_counter "now" for the gauges


def make_result(seq: int, tokens: int, *, a: float = 0.020, b: float = 45e-6,
                noise: float = 0.0, ok: bool = True, warmup: bool = False,
                cached: int | None = None, error_kind: str | None = None,
                t_send: float | None = None) -> ProbeResult:
    """One probe on the line TTFT = a + b*tokens (seconds), fixed times."""
    ttft = a + b * tokens + noise
    t_send = NOW - 55 + seq * 2.5 if t_send is None else t_send
    return ProbeResult(
        seq=seq, started_at=T0 + seq * 2.5, requested_tokens=tokens,
        prompt_tokens=tokens + 1 if ok else None, prompt_tokens_source="usage",
        cached_tokens=cached, ttft_s=ttft if ok else None, ttfb_s=ttft * 0.99 if ok else None,
        total_s=ttft + 0.004 if ok else None, server_prefill_s=(ttft - 0.003) if ok else None,
        overhead_s=0.003 if ok else None, ok=ok, warmup=warmup,
        error_kind=None if ok else (error_kind or "timeout"),
        error_message=None if ok else "no first token within 120 s",
        t_send=t_send, t_end=t_send + ttft, energy_j=round(0.5 + tokens * 0.004, 2),
        power_peak_w=60.0, telemetry_device="CPU",
    )


#: A fixed run: 1 warm-up, 14 probes over 32..4096 with small deterministic noise,
#: 1 cache hit, 1 failure.
LENGTHS = [32, 64, 128, 256, 512, 1024, 2048, 4096]
#: The sweep range of the fake runs (the app's own default is the sweep's, 4-4096).
FAKE_RANGE = (min(LENGTHS), max(LENGTHS))


def fixed_results() -> list[ProbeResult]:
    noise = [0.0012, -0.0008, 0.0005, -0.0011, 0.0009, -0.0004, 0.0015, -0.0013]
    out = [make_result(0, 512, warmup=True, noise=0.03)]
    seq = 1
    for rep in range(2):
        for i, n in enumerate(LENGTHS if rep == 0 else LENGTHS[::-1][:6]):
            out.append(make_result(seq, n, noise=noise[(i + rep) % len(noise)]))
            seq += 1
    out.append(make_result(seq, 1024, cached=1000, noise=-0.04))
    seq += 1
    out.append(make_result(seq, 4096, ok=False))
    return out


class FakeRunner:
    """SweepRunner interface; probes are emitted by ``emit`` (any thread) or by a
    background thread every ``interval`` s while started and not paused."""

    def __init__(self, on_result, on_state, *, preload=(), interval: float | None = None,
                 info: ServerInfo | None = None) -> None:
        self.on_result, self.on_state = on_result, on_state
        self.preload = list(preload)
        self.interval = interval
        self.state, self.state_detail = "stopped", ""
        self.calls: list[tuple] = []
        self.paused = False
        self.emitted = 0
        #: the session's notices, as SweepRunner.notices: short label -> sentence
        self.notices: dict[str, str] = {}
        self.notes: list[str] = []  # as SweepRunner.notes
        self.cap_note: str | None = None
        self.lengths: list[int] = []  # the planned lengths (empty: the app's range)
        self.progress = None  # no confidence target
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._info = info or ServerInfo(base_url="http://127.0.0.1:8080", kind="llama.cpp",
                                        model="SmolLM2-135M-Instruct", context_tokens=8192)

    @property
    def server_info(self):
        return self._info

    def _set(self, state, detail=""):
        self.state, self.state_detail = state, detail
        self.on_state(state, detail)

    def start(self):
        self.calls.append(("start",))
        self._set("probing", "")
        for r in self.preload:
            self.emit(r)
        if self.interval:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()

    def _loop(self):
        seq = 100
        while not self._stop.wait(self.interval):
            if self.paused:
                continue
            self.emit(make_result(seq, LENGTHS[seq % len(LENGTHS)]))
            seq += 1

    def emit(self, r: ProbeResult):
        self.emitted += 1
        self.on_result(r)

    def stop(self, timeout=None):
        self.calls.append(("stop",))
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.state = "stopped"

    def join(self, timeout=None):
        pass

    def pause(self):
        self.calls.append(("pause",))
        self.paused = True
        self._set("paused", "")

    def resume(self):
        self.calls.append(("resume",))
        self.paused = False
        self._set("probing", "")

    def burst(self):
        self.calls.append(("burst",))

    def set_range(self, lo, hi):
        self.calls.append(("set_range", lo, hi))


def fake_device(**kw) -> DeviceSnapshot:
    """A real ``DeviceSnapshot``: the CPU at 37 % with RAPL not readable, unless
    ``kw`` says otherwise."""
    base = dict(label="CPU", name="CPU (2 cores)", util_pct=37.0, power_averaged=True,
                na={"power": "RAPL not readable"})
    return DeviceSnapshot(**{**base, **kw})


def fake_snapshot(**kw) -> TelemetrySnapshot:
    """A real ``TelemetrySnapshot`` (CPU kind, at ``NOW``) with ``kw`` applied."""
    return TelemetrySnapshot(**{**dict(kind="cpu", available=True, t=NOW), **kw})


def cpu_history(now: float = NOW, *, spikes=((20, 23), (40, 45)), power: bool = False):
    """60 s at 10 Hz: idle 5 %, spikes to 95 % in the given [t0, t1) offsets."""
    out = []
    for i in range(600):
        t = now - 60 + i * 0.1
        off = i * 0.1
        busy = any(a <= off < b for a, b in spikes)
        util = 95.0 if busy else 5.0 + (i % 7)
        out.append((t, util, (40.0 + util * 3) if power else None))
    return tuple(out)


class FakeSampler:
    """``snapshot()`` returns a fixed snapshot (CPU by default)."""

    def __init__(self, snap: TelemetrySnapshot | None = None) -> None:
        self.snap = snap or fake_snapshot(devices=(fake_device(history=cpu_history()),))
        self.calls = 0

    def snapshot(self) -> TelemetrySnapshot:
        self.calls += 1
        return self.snap


def gpu_snapshot(n: int = 2) -> TelemetrySnapshot:
    devs = tuple(fake_device(label=f"GPU {i}", name="NVIDIA H200", util_pct=97.0 - i,
                            power_w=612.0 - i, power_averaged=False, power_limit_w=700.0,
                            na={}, history=cpu_history(power=True)) for i in range(n))
    return fake_snapshot(kind="gpu", devices=devs)


class FakeClient:
    """The ProbeClient interface without a network, for the real SweepRunner: a probe
    sleeps ``a + b * tokens`` seconds (TTFT) and returns a ProbeResult stamped with
    perf_counter times, so pacing and bursts run for real."""

    root = "http://fake"

    def __init__(self, *, a: float = 0.005, b: float = 2e-5) -> None:
        self.a, self.b = a, b
        self.info = ServerInfo(base_url=self.root, kind="llama.cpp", model="fake",
                               context_tokens=8192)

    async def discover(self) -> ServerInfo:
        return self.info

    async def warm(self) -> None:
        return None

    async def probe(self, requested_tokens: int, *, warmup: bool = False,
                    burst: bool = False, **_kw) -> ProbeResult:
        import asyncio
        import time

        t0 = time.perf_counter()
        ttft = self.a + self.b * requested_tokens
        await asyncio.sleep(ttft)
        t1 = time.perf_counter()
        return ProbeResult(started_at=time.time(), requested_tokens=requested_tokens,
                           prompt_tokens=requested_tokens, ttft_s=t1 - t0, total_s=t1 - t0,
                           ok=True, warmup=warmup, burst=burst, t_send=t0, t_end=t1)

    async def aclose(self) -> None:
        return None


#: A demo-like minute on a CPU (TTFT ~ 0.1 s + 6 ms per token): (offset s into the
#: 60 s history, tokens, burst) per probe, idle >= TTFT after each; the last one is a
#: burst fired from pause (one probe: it outlasts the 3.4 s minimum on its own).
DEMO_PROBES = ((3, 1024, False), (16, 95, False), (19, 565, False), (27, 29, False),
               (29, 312, False), (40, 1024, True))


def demo_ttft(tokens: int) -> float:
    return 0.1 + 6e-3 * tokens


def demo_results() -> list[ProbeResult]:
    """DEMO_PROBES as results whose t_send..t_end windows sit in the fake history."""
    out = []
    for i, (off, tokens, burst) in enumerate(DEMO_PROBES, start=1):
        secs = demo_ttft(tokens)
        r = make_result(i, tokens, t_send=NOW - 60 + off, a=0.1, b=6e-3)
        r.t_end = r.t_send + secs
        r.burst = burst
        r.util_peak_pct, r.util_mean_pct = 97.0, 88.0
        out.append(r)
    return out


def demo_snapshot() -> TelemetrySnapshot:
    """The demo's two rows: the whole CPU (busy with other work) and llama-server,
    whose CPU spikes in each probe window and idles between."""
    spikes = tuple((off, off + demo_ttft(n) + 0.1) for off, n, _ in DEMO_PROBES)
    server = cpu_history(spikes=spikes)
    server = tuple((t, 2.0 if u < 90 else u, p) for t, u, p in server)
    machine = tuple((t, min(100.0, u + 60), p) for t, u, p in cpu_history(spikes=spikes))
    return fake_snapshot(devices=(
        fake_device(history=machine, util_pct=100.0),
        fake_device(label="llama-server (pid 4242)", name="llama-server", util_pct=2.0,
                    na={"power": "per-process power is not measured (see CPU)"},
                    history=server)))
