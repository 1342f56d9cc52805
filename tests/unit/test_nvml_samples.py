"""The driver's sample buffers (nvmlDeviceGetSamples) on the fake NVML: a prefill
shorter than the polling interval still leaves its mark on the history and on the
probe's attribution; the measured utilization period sets the sensor window."""

from __future__ import annotations

import pytest

from prefilltui.measure.telemetry import GpuSampler
from prefilltui.model.pacing import NVML_WINDOW_MAX_S, auto_pacing
from prefilltui.model.types import ProbeResult
from tests.unit import fake_nvml as fk

WALL0 = 1_796_000_000.0  # unix seconds at clock() == 0


def us(t: float) -> int:
    """clock() seconds -> the driver's wall-clock microseconds."""
    return int(round((WALL0 + t) * 1e6))


def _open(gpu: fk.FakeGpu, clock: fk.FakeClock) -> GpuSampler:
    return GpuSampler.open(nvml_module=fk.FakeNvml([gpu]), clock=clock, env={},
                           wall=lambda: WALL0 + clock.t)


def _gpu(util_period: float = 0.2) -> fk.FakeGpu:
    """Idle driver buffers for the 2 s before clock 0: utilization every
    ``util_period`` s, power every 20 ms (100 W)."""
    g = fk.FakeGpu(util=0, power_mw=100_000, energy_mj=0)
    n = int(2 / util_period)
    g.samples[fk.NVML_GPU_UTILIZATION_SAMPLES] = [(us(-2 + i * util_period), 0)
                                                  for i in range(n)]
    g.samples[fk.NVML_TOTAL_POWER_SAMPLES] = [(us(-2 + i * 0.02), 100_000)
                                              for i in range(100)]
    return g


def test_short_prefill_leaves_its_mark():
    """A 50 ms prefill at t = 1.00 s: polled utilization and power miss it (0 %,
    100 W at every tick); the driver's samples carry it (25 % for the 0.2 s period
    ending at 1.2 s, 600 W at 20 ms resolution) into the history and attribution."""
    clock = fk.FakeClock()
    g = _gpu()
    s = _open(g, clock)
    assert s.sensor_window_s == pytest.approx(0.2)  # measured, not the 1 s worst case
    util, power = (g.samples[fk.NVML_GPU_UTILIZATION_SAMPLES],
                   g.samples[fk.NVML_TOTAL_POWER_SAMPLES])
    for i in range(1, 21):  # ticks at 0.1 .. 2.0 s
        t = i * 0.1
        # the driver publishes the samples of the last tick's period
        for k in range(5):
            ts = t - 0.1 + k * 0.02
            power.append((us(ts), 600_000 if 1.0 <= ts < 1.05 else 100_000))
        if round(t * 10) % 2 == 1 and t > 0.2:  # utilization every 0.2 s, 0.1 s late
            end = t - 0.1
            util.append((us(end), 25 if abs(end - 1.2) < 1e-9 else 0))
        clock.t = t
        s.tick()
    hist = s.snapshot().devices[0].history
    assert max(u for _, u, _ in hist if u is not None) == 25
    assert [round(t, 2) for t, u, _ in hist if u == 25] == [1.2]  # at the driver's time
    assert max(p for _, _, p in hist if p is not None) == pytest.approx(600.0)
    assert g.util == 0  # polling alone would have shown nothing
    r = ProbeResult(t_send=1.0, t_end=1.05, ok=True)
    s.attribute(r)
    assert r.util_peak_pct == 25 and r.power_peak_w == pytest.approx(600.0)
    assert s.snapshot().devices[0].util_pct == 0  # the newest sample
    # times never go backwards in the ring (attribution relies on it)
    ts = s.devices[0].ring.ordered()[:, 0]
    assert (ts[1:] >= ts[:-1]).all()


def test_buffers_unsupported_or_on_an_unknown_clock_fall_back_to_polling():
    clock = fk.FakeClock()
    g = fk.FakeGpu(util=40)  # no buffers: NotSupported
    s = _open(g, clock)
    assert s.devices[0].extra["buffers"] == {}
    assert s.sensor_window_s == NVML_WINDOW_MAX_S  # unknown period: NVML's worst case
    clock.t = 0.1
    s.tick()
    assert s.snapshot().devices[0].util_pct == 40
    g2 = _gpu()
    g2.samples[fk.NVML_GPU_UTILIZATION_SAMPLES] = [(5_000_000, 7)]  # not a clock we know
    s2 = _open(g2, clock)
    assert "util" not in s2.devices[0].extra["buffers"]


def test_empty_buffer_then_samples_and_pacing():
    clock = fk.FakeClock()
    g = fk.FakeGpu(util=0, power_mw=100_000)
    g.samples[fk.NVML_GPU_UTILIZATION_SAMPLES] = []  # supported, nothing yet: NotFound
    s = _open(g, clock)
    assert "util" in s.devices[0].extra["buffers"]
    clock.t = 0.1
    s.tick()  # NotFound again: no crash, no row with utilization
    g.samples[fk.NVML_GPU_UTILIZATION_SAMPLES].append((us(0.15), 90))
    clock.t = 0.2
    s.tick()
    assert s.snapshot().devices[0].util_pct == 90
    # the TUI's pacing from this sensor: unknown period -> NVML's 1 s worst case
    p = auto_pacing(s.period_s, s.sensor_window_s)
    assert p.idle_floor_s == pytest.approx(2.0) and p.burst_min_s == pytest.approx(3.358, abs=1e-3)
