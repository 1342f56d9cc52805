"""NVML GPU sampler and attribution, against tests/unit/fake_nvml.py.

No sleeps: the sampler's clock is a FakeClock and the tests call ``tick()``.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.unit import fake_nvml as fk
from tests.unit.fake_nvml import FakeClock

from prefilltui.measure.telemetry import GpuSampler, parse_gpu_selection
from prefilltui.measure.telemetry import (DeviceSnapshot, SampleRing, TelemetrySnapshot,
                                       make_sampler)
from prefilltui.model.types import ProbeResult


def gpu_sampler(nv, clock=None, **kw) -> GpuSampler:
    s = make_sampler(nvml_module=nv, clock=clock or FakeClock(), env={}, **kw)
    assert isinstance(s, GpuSampler), s.reason
    return s


def test_power_milliwatts_to_watts():
    nv = fk.fake_gpus(2, power_mw=(4034, 285_000))
    s = gpu_sampler(nv)
    d0, d1 = s.snapshot().devices
    assert d0.power_w == pytest.approx(4.034) and round(d0.power_w, 1) == 4.0
    assert d1.power_w == pytest.approx(285.0)
    assert d0.power_averaged is False  # instantaneous field supported
    assert d0.power_limit_w == 700.0 and d0.power_scope == "board"


def test_averaged_power_when_instant_field_unsupported():
    nv = fk.fake_gpus(1, power_mw=285_000, instant=False)
    d = gpu_sampler(nv).snapshot().devices[0]
    assert d.power_w == 285.0 and d.power_averaged is True


def test_energy_counter_window():
    clock = FakeClock(0.0)
    nv = fk.fake_gpus(1, energy_mj=[1_000_000, 1_952_494], power_mw=15_000)
    s = gpu_sampler(nv, clock)  # the capability probe is the sample at t=0
    clock.t = 60.0
    s.tick()
    w = s.window(0.0, 60.0)
    assert w.energy_source == "counter"
    assert round(w.energy_j, 1) == 952.5
    assert round(w.power_mean_w, 1) == 15.9
    assert s.snapshot().devices[0].energy_j == pytest.approx(952.494)
    r = ProbeResult(t_send=0.0, t_end=60.0)
    s.attribute(r)
    assert r.telemetry_device == "GPU 0" and round(r.energy_j, 1) == 952.5
    assert round(r.power_mean_w, 1) == 15.9


def test_gpu1_power_not_supported_gpu0_normal():
    nv = fk.fake_gpus(2, power_mw=250_000)
    nv.gpus[1].unsupported.add("power")
    clock = FakeClock()
    s = gpu_sampler(nv, clock)
    fk.run_ticks(s, clock, range(1, 6))
    d0, d1 = s.snapshot().devices
    assert d0.state == d1.state == "ok"
    assert d0.power_w == 250.0 and "power" not in d0.na
    assert d1.power_w is None and "Not Supported" in d1.na["power"]
    assert d1.util_pct == 0.0  # the rest of GPU 1 still works
    # probed once, never re-queried per tick: 2 devices x (probe+5 ticks) for GPU 0 only
    assert nv.calls["nvmlDeviceGetPowerUsage"] == 1  # GPU 1's probe; GPU 0 uses the instant field
    assert nv.calls["nvmlDeviceGetFieldValues"] == 6 + 1  # GPU 0: 6 reads; GPU 1: 1 probe


def test_not_supported_never_requeried():
    nv = fk.fake_gpus(1)
    nv.gpus[0].unsupported.add("temperature")
    clock = FakeClock()
    s = gpu_sampler(nv, clock)
    fk.run_ticks(s, clock, range(1, 40))
    assert nv.calls["nvmlDeviceGetTemperature"] == 1
    d = s.snapshot().devices[0]
    assert d.temperature_c is None and d.reason("temperature") == "Not Supported"


def test_mig_slice_utilization_na_power_whole_gpu():
    parent = fk.FakeGpu(index=0, mig_mode=True, power_mw=300_000, util=50)
    mig = fk.FakeGpu(index=0, uuid="MIG-1234abcd-0000-0000-0000-000000000000",
                     parent=parent, gpu_instance_id=1, util=50)
    nv = fk.FakeNvml([parent], mig_slices=[mig])
    s = make_sampler(nvml_module=nv, clock=FakeClock(), env={"CUDA_VISIBLE_DEVICES": mig.uuid})
    d = s.snapshot().devices[0]
    assert d.mig and d.label == "GPU 0 MIG 1"
    assert d.util_pct is None and d.util_pct != 0
    assert "MIG" in d.na["util"] and "Not Supported" in d.na["util"]
    assert d.power_w == 300.0 and d.power_scope == "whole GPU"


def test_two_mig_slices_count_whole_gpu_power_once():
    clock = FakeClock()
    parent = fk.FakeGpu(index=0, mig_mode=True, power_mw=300_000,
                        energy_mj=lambda: int(clock.t * 300_000))  # 300 W in mJ
    migs = [fk.FakeGpu(index=0, uuid=f"MIG-{k}bcd1234-0000-0000-0000-000000000000",
                       parent=parent, gpu_instance_id=k) for k in (1, 2)]
    nv = fk.FakeNvml([parent], mig_slices=migs)
    s = make_sampler(nvml_module=nv, clock=clock,
                     env={"CUDA_VISIBLE_DEVICES": f"{migs[0].uuid},{migs[1].uuid}"})
    assert [d.label for d in s.snapshot().devices] == ["GPU 0 MIG 1", "GPU 0 MIG 2"]
    clock.t = 0.1
    s.tick()
    r = ProbeResult(t_send=0.0, t_end=0.1)
    s.attribute(r)
    assert r.power_peak_w == 300.0 and r.energy_j == pytest.approx(30.0)
    assert r.util_peak_pct is None


def test_mig_enabled_full_gpu_util_na():
    nv = fk.fake_gpus(1, util=80, mig_mode=True)
    d = gpu_sampler(nv).snapshot().devices[0]
    assert d.util_pct is None and "MIG" in d.na["util"]
    assert d.power_scope == "whole GPU"


@pytest.mark.parametrize("nv,why", [
    (fk.library_not_found(), "NVML Shared Library Not Found"),
    (fk.driver_not_loaded(), "Driver Not Loaded"),
])
def test_nvml_init_failure_falls_back_to_cpu(nv, why):
    s = make_sampler(nvml_module=nv, clock=FakeClock(), env={})
    snap = s.snapshot()
    assert snap.kind == "cpu" and snap.available
    assert snap.reason == f"NVML unavailable: {why} — showing CPU"
    assert snap.devices[0].label == "CPU"
    s.stop()


def test_no_gpu_and_no_fallback_is_unavailable():
    s = make_sampler(nvml_module=fk.library_not_found(), cpu_fallback=False, env={})
    snap = s.snapshot()
    assert snap.kind == "none" and not snap.available and snap.devices == ()
    assert "Library Not Found" in snap.reason
    s.start()  # a no-op, not a crash
    assert not s.running


def test_gpu_failing_at_open_is_skipped():
    nv = fk.fake_gpus(2)
    real = nv.nvmlDeviceGetHandleByIndex

    def handle(i):
        if i == 1:
            raise fk.NVMLError_GpuIsLost()
        return real(i)

    nv.nvmlDeviceGetHandleByIndex = handle
    s = make_sampler(nvml_module=nv, clock=FakeClock(), env={})
    assert [d.label for d in s.snapshot().devices] == ["GPU 0"]
    assert "GPU 1: GPU is lost" in s.snapshot().reason
    nv.nvmlDeviceGetCount = lambda: (_ for _ in ()).throw(RuntimeError("boom"))
    s = make_sampler(nvml_module=nv, clock=FakeClock(), env={})
    assert s.kind == "cpu" and "boom" in s.snapshot().reason


def test_zero_gpus_falls_back():
    s = make_sampler(nvml_module=fk.FakeNvml([]), env={})
    assert s.kind == "cpu" and "no NVIDIA GPU" in s.snapshot().reason


def test_mid_run_error_then_recovery_with_backoff():
    nv = fk.fake_gpus(2, util=40)
    clock = FakeClock()
    s = gpu_sampler(nv, clock)
    nv.gpus[1].fail["util"] = fk.NVMLError_GpuIsLost()
    clock.t = 0.1
    s.tick()
    d0, d1 = s.snapshot().devices
    assert d0.state == "ok" and d0.util_pct == 40.0
    assert d1.state == "error" and d1.error == "GPU is lost"
    assert d1.util_pct is None and d1.power_w is None  # no stale values
    assert d1.na["util"] == "error: GPU is lost (retrying)"
    n = nv.calls["nvmlDeviceGetUtilizationRates"]
    clock.t = 0.5  # inside the 1 s back-off: GPU 1 is not queried
    s.tick()
    assert nv.calls["nvmlDeviceGetUtilizationRates"] == n + 1
    clock.t = 1.2  # retried, still failing: back-off doubles to 2 s
    s.tick()
    assert s.snapshot().devices[1].state == "error"
    del nv.gpus[1].fail["util"]
    clock.t = 2.0
    s.tick()
    assert s.snapshot().devices[1].state == "error"  # still backing off (until 3.2)
    clock.t = 3.3
    s.tick()
    d1 = s.snapshot().devices[1]
    assert d1.state == "ok" and d1.error is None and d1.util_pct == 40.0


def test_error_while_probing_is_retried():
    nv = fk.fake_gpus(1, util=30)
    nv.gpus[0].fail["util"] = fk.NVMLError_Unknown()
    clock = FakeClock()
    s = gpu_sampler(nv, clock)
    d = s.snapshot().devices[0]
    assert d.state == "error" and d.error == "probing: Unknown Error"
    clock.t = 1.1  # retry 1 (after 1 s) fails again -> next retry 2 s later
    s.tick()
    d = s.snapshot().devices[0]
    assert d.state == "error" and d.error == "probing: Unknown Error"
    del nv.gpus[0].fail["util"]
    clock.t = 2.5
    s.tick()
    assert s.snapshot().devices[0].state == "error"  # not retried before 3.1
    clock.t = 3.2
    s.tick()
    d = s.snapshot().devices[0]
    assert d.state == "ok" and d.util_pct == 30.0 and "util" not in d.na


@pytest.mark.parametrize("gpus,env,expected", [
    (None, {}, (None, "all")),
    (None, {"CUDA_VISIBLE_DEVICES": "1,0"}, ([1, 0], "CUDA_VISIBLE_DEVICES")),
    (None, {"CUDA_VISIBLE_DEVICES": ""}, ([], "CUDA_VISIBLE_DEVICES")),
    (None, {"CUDA_VISIBLE_DEVICES": "-1"}, ([], "CUDA_VISIBLE_DEVICES")),
    (None, {"CUDA_VISIBLE_DEVICES": "0,x,1"}, ([0], "CUDA_VISIBLE_DEVICES")),
    (None, {"CUDA_VISIBLE_DEVICES": " GPU-abc , 2"}, (["GPU-abc", 2], "CUDA_VISIBLE_DEVICES")),
    ("0,1", {"CUDA_VISIBLE_DEVICES": "3"}, ([0, 1], "--gpus")),
    ("GPU-00000001", {}, (["GPU-00000001"], "--gpus")),
])
def test_parse_gpu_selection(gpus, env, expected):
    assert parse_gpu_selection(gpus, env) == expected


@pytest.mark.parametrize("bad", ["", "0,,1", "-1"])
def test_parse_gpu_selection_rejects(bad):
    with pytest.raises(ValueError):
        parse_gpu_selection(bad, {})


def test_selection_by_index_and_uuid_prefix():
    nv = fk.fake_gpus(4)
    s = make_sampler("2,GPU-00000000", nvml_module=nv, clock=FakeClock(), env={})
    assert [d.label for d in s.snapshot().devices] == ["GPU 2", "GPU 0"]
    s = make_sampler(nvml_module=nv, clock=FakeClock(),
                     env={"CUDA_VISIBLE_DEVICES": nv.gpus[3].uuid + ",1"})
    assert [d.label for d in s.snapshot().devices] == ["GPU 3", "GPU 1"]


def test_selection_errors():
    nv = fk.fake_gpus(2)
    with pytest.raises(ValueError, match="no GPU 5"):
        make_sampler("5", nvml_module=nv, env={})
    assert nv.initialised == 0  # NVML shut down again
    s = make_sampler(nvml_module=nv, env={"CUDA_VISIBLE_DEVICES": ""})
    assert s.kind == "cpu" and "selects no GPU" in s.snapshot().reason
    s = make_sampler(nvml_module=nv, env={"CUDA_VISIBLE_DEVICES": "1,7"}, clock=FakeClock())
    assert [d.label for d in s.snapshot().devices] == ["GPU 1"]
    assert "skipped no GPU 7" in s.snapshot().reason


def test_attribution_window_scripted():
    # GPU 0: idle 10 % / 60 W, then a prefill at 95-99 % / 500-610 W from t=1.0 to 1.3
    clock = FakeClock(0.0)
    utils = [10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 95, 99, 97, 10, 10]
    power = [60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 500, 610, 550, 60, 60]
    nv = fk.fake_gpus(1, util=utils, power_mw=[p * 1000 for p in power])
    s = gpu_sampler(nv, clock)
    fk.run_ticks(s, clock, range(1, 15))
    r = ProbeResult(t_send=0.95, t_end=1.25)  # samples at 1.0, 1.1, 1.2 + the one at 1.3
    s.attribute(r)
    assert r.telemetry_device == "GPU 0"
    assert r.util_peak_pct == 99.0
    assert r.util_mean_pct == pytest.approx((95 + 99 + 97 + 10) / 4)
    assert r.power_peak_w == 610.0
    # no energy counter: trapezoid over interpolated power from 0.95 to 1.25
    assert r.energy_source == "integrated"
    expected = ((280 + 500) / 2 * 0.05 + (500 + 610) / 2 * 0.1 + (610 + 550) / 2 * 0.1
                + (550 + 305) / 2 * 0.05)
    assert r.energy_j == pytest.approx(expected)


def test_attribution_short_probe_uses_next_sample():
    clock = FakeClock(0.0)
    nv = fk.fake_gpus(1, util=[5, 5, 88, 5])
    s = gpu_sampler(nv, clock)
    fk.run_ticks(s, clock, range(1, 4))
    r = ProbeResult(t_send=0.12, t_end=0.15)  # shorter than one period
    s.attribute(r)
    assert r.util_peak_pct == 88.0


def test_attribution_without_window_or_samples():
    s = gpu_sampler(fk.fake_gpus(1), FakeClock(0.0))
    r = ProbeResult()
    s.attribute(r)
    assert r.telemetry_device is None and r.util_peak_pct is None
    r = ProbeResult(t_send=50.0, t_end=51.0)  # after every sample
    s.attribute(r)
    assert r.energy_j is None


def test_multi_gpu_attribution_sums_power_averages_util():
    clock = FakeClock(0.0)
    nv = fk.fake_gpus(2, util=([50, 90], [30, 70]), power_mw=([100_000, 400_000],
                                                                [100_000, 300_000]))
    s = gpu_sampler(nv, clock)
    clock.t = 0.1
    s.tick()
    r = ProbeResult(t_send=0.0, t_end=0.1)
    s.attribute(r)
    assert r.telemetry_device == "GPU 0+GPU 1"
    assert r.util_peak_pct == 80.0 and r.power_peak_w == 700.0


def test_after_probe_hook_not_running():
    clock = FakeClock(0.0)
    s = gpu_sampler(fk.fake_gpus(1, util=[20, 60]), clock)
    clock.t = 0.1
    s.tick()
    r = ProbeResult(t_send=0.0, t_end=0.1)
    asyncio.run(s.before_probe(None))
    asyncio.run(s.after_probe(r))
    assert r.util_peak_pct == 60.0


def test_after_probe_hook_with_thread_running():
    import time
    s = make_sampler(nvml_module=fk.fake_gpus(1, util=42), hz=100.0, env={})
    with s:
        deadline = time.perf_counter() + 2.0
        while len(s.devices[0].ring) < 3 and time.perf_counter() < deadline:
            time.sleep(0.01)
        t_send = float(s.devices[0].ring.ordered()[0, 0])
        r = ProbeResult(t_send=t_send, t_end=time.perf_counter())
        asyncio.run(s.after_probe(r))
    assert r.telemetry_device == "GPU 0" and r.util_peak_pct == 42.0


def test_gpus_flag_ignored_note_on_fallback():
    s = make_sampler("0,1", nvml_module=fk.library_not_found(), env={})
    assert s.snapshot().reason == ("NVML unavailable: NVML Shared Library Not Found "
                                   "(--gpus 0,1 ignored) — showing CPU")


def test_thread_samples_and_shuts_down():
    nv = fk.fake_gpus(2, util=50)
    s = make_sampler(nvml_module=nv, hz=200.0, env={})
    import time
    with s:
        deadline = time.perf_counter() + 2.0
        while len(s.devices[0].ring) < 5 and time.perf_counter() < deadline:
            time.sleep(0.01)
        assert s.running
    assert not s.running and nv.initialised == 0
    assert len(s.devices[0].ring) >= 5
    s.stop()  # idempotent: no second nvmlShutdown
    assert nv.calls["nvmlShutdown"] == 1


def test_snapshot_is_frozen_and_cached():
    clock = FakeClock(0.0)
    s = gpu_sampler(fk.fake_gpus(1), clock)
    a = s.snapshot()
    assert isinstance(a, TelemetrySnapshot) and isinstance(a.devices[0], DeviceSnapshot)
    with pytest.raises(AttributeError):
        a.devices[0].util_pct = 3  # type: ignore[misc]
    assert s.snapshot() is a
    clock.t = 0.1
    s.tick()
    assert s.snapshot() is not a


def test_history_and_ring_bounded():
    clock = FakeClock(0.0)
    s = gpu_sampler(fk.fake_gpus(1), clock)
    before = s.ring_bytes()
    fk.run_ticks(s, clock, range(1, 11000))
    assert s.ring_bytes() == before
    # 600 s at 10 Hz plus up to 6 driver utilization samples a second, + 1
    assert s.capacity == 600 * 16 + 1
    assert len(s.devices[0].ring) == s.capacity
    hist = s.snapshot().devices[0].history
    assert 600 <= len(hist) <= 602 and hist[-1][0] == pytest.approx(1099.9)


def test_sample_ring_order():
    r = SampleRing(3)
    for i in range(5):
        r.append(float(i), i, None, None)
    assert r.ordered()[:, 0].tolist() == [2.0, 3.0, 4.0]
    assert r.last_t() == 4.0


def test_bad_rate():
    with pytest.raises(ValueError):
        make_sampler(nvml_module=fk.fake_gpus(1), hz=0, env={})


def test_energy_counter_coarser_than_a_short_probe_is_not_used_for_it():
    # 20 Hz samples of a board at a steady 700 W whose energy counter only advances
    # every 0.1 s (a 70 J step): a 41 ms window must not take a whole step (on an
    # H200 a 41 ms probe got 41 J, a "997 W" mean), so it is integrated from power
    import numpy as np

    from prefilltui.measure.telemetry import window_stats

    t = np.arange(0.0, 2.0001, 0.05)
    energy = np.floor(t / 0.1 + 1e-9) * 70.0
    rows = np.column_stack([t, np.full_like(t, 90.0), np.full_like(t, 700.0), energy])
    short = window_stats([rows], "GPU 0", 1.049, 1.090)
    assert short.energy_source == "integrated"
    assert short.energy_j == pytest.approx(700.0 * 0.041)
    long = window_stats([rows], "GPU 0", 0.5, 1.5)  # 10 counter periods: the counter
    assert long.energy_source == "counter"
    assert long.energy_j == pytest.approx(700.0, abs=70.0)


# -- the sampler slows between probes (the app's own cost) ----------------------------

def test_rate_full_around_a_probe_idle_between():
    import time
    from prefilltui.measure.telemetry.base import FAST_MAX_S
    s = gpu_sampler(fk.fake_gpus(1), hz=10.0).slow_between_probes(2.0, linger_s=0.3)
    now = time.perf_counter()
    assert s._period_now(now) == pytest.approx(0.5)  # no probe yet: the idle rate
    asyncio.run(s.before_probe(None))
    assert s._period_now(time.perf_counter()) == pytest.approx(0.1)
    asyncio.run(s.after_probe(ProbeResult()))
    t = time.perf_counter()
    assert s._period_now(t) == pytest.approx(0.1)  # the reading after the probe: full
    assert s._period_now(t + 0.31) == pytest.approx(0.5)
    # a start whose end never comes (a cancelled sweep) holds the full rate a minute
    asyncio.run(s.before_probe(None))
    t = time.perf_counter()
    assert s._period_now(t + FAST_MAX_S - 1) == pytest.approx(0.1)
    assert s._period_now(t + FAST_MAX_S + 1) == pytest.approx(0.5)
    asyncio.run(s.after_probe(ProbeResult()))  # its end after expiry: no error


def test_rate_concurrent_probes_keep_the_full_rate():
    """The fleet's targets share one sampler: one probe ending leaves the other's rate."""
    import time
    s = gpu_sampler(fk.fake_gpus(1), hz=10.0).slow_between_probes(2.0, linger_s=0.0)
    asyncio.run(s.before_probe(None))
    asyncio.run(s.before_probe(None))
    asyncio.run(s.after_probe(ProbeResult()))
    assert s._period_now(time.perf_counter() + 1.0) == pytest.approx(0.1)
    asyncio.run(s.after_probe(ProbeResult()))
    assert s._period_now(time.perf_counter() + 1.0) == pytest.approx(0.5)


def test_rate_defaults_and_bounds():
    s = gpu_sampler(fk.fake_gpus(1), hz=10.0)
    assert s.idle_hz == 10.0  # not asked: one rate, as before
    s.slow_between_probes()
    assert s.idle_hz == 2.0
    assert s.linger_s >= 0.2  # two periods at least: the pacing's idle floor
    assert gpu_sampler(fk.fake_gpus(1), hz=1.0).slow_between_probes().idle_hz == 1.0
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            s.slow_between_probes(bad)
    with pytest.raises(ValueError):
        s.slow_between_probes(2.0, linger_s=-1.0)


def test_a_probe_start_wakes_a_slow_sampler():
    """Between probes the thread sleeps the idle period (here 20 s); a probe's start
    wakes it to sample at once, then it keeps the full rate."""
    import time
    s = make_sampler(nvml_module=fk.fake_gpus(1, util=42), hz=50.0, env={})
    s.slow_between_probes(0.05, linger_s=0.0)
    with s:
        ring = s.devices[0].ring
        deadline = time.perf_counter() + 5.0
        while len(ring) < 2 and time.perf_counter() < deadline:  # the open's + the thread's
            time.sleep(0.01)
        n0 = len(ring)
        time.sleep(0.3)
        assert len(ring) == n0  # idle: nothing for 20 s
        asyncio.run(s.before_probe(None))
        deadline = time.perf_counter() + 10.0
        while len(ring) < n0 + 5 and time.perf_counter() < deadline:
            time.sleep(0.01)
        assert len(ring) >= n0 + 5  # woken, then at 50 Hz (idle: one in 20 s)
        r = ProbeResult(t_send=float(ring.ordered()[n0, 0]), t_end=time.perf_counter())
        asyncio.run(s.after_probe(r))
    assert r.util_peak_pct == 42.0 and not s.running


def test_slow_fields_once_a_second_at_any_rate():
    nv = fk.fake_gpus(1)
    clock = FakeClock()
    s = gpu_sampler(nv, clock)
    base = nv.calls["nvmlDeviceGetTemperature"]
    for i in range(1, 21):  # 2 s at 10 Hz
        clock.t = i * 0.1
        s.tick()
    assert nv.calls["nvmlDeviceGetTemperature"] - base == 2
    for i in range(1, 9):  # then 4 s at 2 Hz (between probes)
        clock.t = 2.0 + i * 0.5
        s.tick()
    assert nv.calls["nvmlDeviceGetTemperature"] - base == 6


def test_the_covering_reading_is_taken_by_the_hook_not_waited_for():
    """A probe's end is covered by a reading the hook takes (no wait for the thread's
    next one, a period away here), and the thread's schedule restarts from it."""
    import time
    s = make_sampler(nvml_module=fk.fake_gpus(1, util=42), hz=0.5, env={})  # 2-s period
    with s:
        ring = s.devices[0].ring
        deadline = time.perf_counter() + 5.0
        while len(ring) < 2 and time.perf_counter() < deadline:  # the open's + the thread's
            time.sleep(0.01)
        first = float(ring.ordered()[-1, 0])
        time.sleep(max(0.0, first + 1.2 - time.perf_counter()))  # the thread's next: +2 s
        n = len(ring)
        r = ProbeResult(t_send=first + 0.1, t_end=time.perf_counter())
        t0 = time.perf_counter()
        asyncio.run(s.after_probe(r))
        took = time.perf_counter() - t0
        assert took < 0.5 and len(ring) == n + 1  # one reading, taken by the hook
        assert r.util_peak_pct == 42.0
        time.sleep(max(0.0, first + 2.5 - time.perf_counter()))
        assert len(ring) == n + 1  # the thread's +2 s reading moved to 2 s after the hook's
