"""Held-out, AMD and Intel sysfs readers fed values no device can have (the
recorded-tree pattern of test_telemetry_amd / _intel): "nan", "inf", 1e400, a busy
percent of 250 or -5, power of -150 W or 1e24 W, an energy counter that jumps by 1e24 J
in 0.1 s, VRAM of "inf" bytes, 1e305 degrees.  Each such reading is no reading (that
tick N/A, or N/A with its reason at open): never NaN, inf or a negative figure on the
gauges or in a probe's attribution, and never the device's error state (which hid every
gauge of the device, the good ones too)."""

from __future__ import annotations

import math

import pytest

from prefilltui.measure.telemetry import make_sampler
from prefilltui.measure.telemetry.readers import EnergyCounter
from prefilltui.model.types import ProbeResult
from tests.unit import fake_nvml as fk
from tests.unit.sysfs_tree import amd_card, xe_card
from tests.unit.fake_nvml import FakeClock
from tests.unit.test_telemetry_amd import amd_sampler


def _sane_device(d) -> None:
    assert d.state == "ok", d.error
    for name in ("util_pct", "power_w", "energy_j", "power_limit_w", "temperature_c"):
        v = getattr(d, name)
        assert v is None or (math.isfinite(v) and v >= -100), (name, v)
    assert d.util_pct is None or 0 <= d.util_pct <= 100, d.util_pct
    assert d.power_w is None or 0 <= d.power_w <= 10_000, d.power_w
    assert d.power_limit_w is None or 0 < d.power_limit_w <= 10_000, d.power_limit_w
    assert d.temperature_c is None or -100 <= d.temperature_c <= 250, d.temperature_c
    assert d.energy_j is None or 0 <= d.energy_j < 1e6, d.energy_j  # 10 kW for 100 s
    for b in (d.mem_used_bytes, d.mem_total_bytes):
        assert b is None or 0 <= b <= 2**50, b
    for _, util, power in d.history:
        assert util is None or 0 <= util <= 100, util
        assert power is None or 0 <= power <= 10_000, power


def _sane_probe(r: ProbeResult) -> None:
    for name in ("util_peak_pct", "util_mean_pct", "power_peak_w", "power_mean_w", "energy_j"):
        v = getattr(r, name)
        assert v is None or (math.isfinite(v) and v >= 0), (name, v)
    assert r.util_peak_pct is None or r.util_peak_pct <= 100
    assert r.power_peak_w is None or r.power_peak_w <= 10_000
    assert r.energy_j is None or r.energy_j < 1e6, r.energy_j


def _run(sampler, card, clock, changes) -> ProbeResult:
    for i, ch in enumerate(changes, 1):
        for k, v in ch.items():
            card.set(k, v)
        clock.t = 0.1 * i
        sampler.tick()
        _sane_device(sampler.snapshot().devices[0])
    r = ProbeResult(t_send=0.0, t_end=clock.t)
    sampler.attribute(r)
    _sane_probe(r)
    return r


AMD_BAD = [
    ("gpu_busy_percent", "nan"), ("gpu_busy_percent", "inf"), ("gpu_busy_percent", "1e400"),
    ("gpu_busy_percent", 250), ("gpu_busy_percent", -5),
    ("gpu_busy_percent", "0x7fffffffffffffffffff"),
    ("hwmon/power1_input", "nan"), ("hwmon/power1_input", -150_000_000),
    ("hwmon/power1_input", 10**30), ("hwmon/power1_cap", -1),
    ("mem_info_vram_used", "inf"), ("mem_info_vram_used", "nan"), ("mem_info_vram_used", -1),
    ("hwmon/temp1_input", "1e308"), ("hwmon/energy1_input", "nan"),
    ("hwmon/energy1_input", "inf"), ("hwmon/energy1_input", 10**30),
]


@pytest.mark.parametrize("rel,value", AMD_BAD, ids=[f"{r}={v}" for r, v in AMD_BAD])
def test_an_amdgpu_reading_no_device_can_have_is_no_reading(tmp_path, rel, value):
    c = amd_card(tmp_path, busy=30, energy_uj=1_000_000)
    clock = FakeClock(0.0)
    s = amd_sampler(tmp_path, clock)
    try:
        steps = [{"gpu_busy_percent": 40, "hwmon/energy1_input": 16_000_000 * i}
                 for i in range(2, 5)]
        steps += [{rel: value}] * 11 + [{rel: 40 if "busy" in rel else 1}]  # 11: a slow read
        _run(s, c, clock, steps)
    finally:
        s.stop()


@pytest.mark.parametrize("rel,value", [("gpu_busy_percent", "nan"),
                                       ("hwmon/power1_input", "inf"),
                                       ("mem_info_vram_used", "1e999")],
                         ids=["busy-nan", "power-inf", "vram-1e999"])
def test_a_value_no_device_can_have_at_open_is_na_with_the_file_named(tmp_path, rel, value):
    c = amd_card(tmp_path)
    c.set(rel, value)
    s = amd_sampler(tmp_path, FakeClock(0.0))
    try:
        d = s.snapshot().devices[0]
        _sane_device(d)
        assert any(rel.split("/")[-1] in why for why in d.na.values()), d.na
    finally:
        s.stop()


XE_BAD = [("tile0/gt0/gtidle/idle_residency_ms", "nan"),
          ("tile0/gt0/gtidle/idle_residency_ms", "inf"),
          ("hwmon/energy1_input", "inf"), ("hwmon/energy1_input", "nan"),
          ("hwmon/energy1_input", 10**25)]


@pytest.mark.parametrize("rel,value", XE_BAD, ids=[f"{r.split('/')[-1]}={v}" for r, v in XE_BAD])
def test_an_xe_reading_no_device_can_have_is_no_reading(tmp_path, rel, value):
    c = xe_card(tmp_path)
    clock = FakeClock(0.0)
    s = make_sampler(None, hz=10.0, nvml_module=fk.library_not_found(), clock=clock, env={},
                     sys_root=str(tmp_path), amdsmi_module=False)
    try:
        steps = [{"tile0/gt0/gtidle/idle_residency_ms": 50 * i,
                  "hwmon/energy1_input": 10_000_000 * i} for i in range(1, 4)]
        r = _run(s, c, clock, steps + [{rel: value}] * 3)
        # a NaN idle counter was read as 100 % awake: no reading is not "busy"
        if "idle" in rel:
            assert s.snapshot().devices[0].util_pct is None
        assert r.energy_j is None or r.energy_j < 100  # no 1e19 J from one jump
    finally:
        s.stop()


def test_the_energy_counter_ignores_readings_no_counter_gives():
    ec = EnergyCounter(1e-6)
    assert ec.update(1_000_000, 0.0) == (0.0, None)
    assert ec.update(float("nan"), 0.1) == (0.0, None)
    assert ec.update(float("inf"), 0.2) == (0.0, None)
    e, p = ec.update(11_000_000, 0.3)  # 10 J over 0.3 s since the last good reading
    assert e == pytest.approx(10.0) and p == pytest.approx(10.0 / 0.3)
    e, p = ec.update(1e15, 0.4)  # 1e9 J in 0.1 s: no device, a corrupt read or a reset
    assert e == pytest.approx(10.0) and p is None
    e, p = ec.update(1e15 + 20e6, 0.5)  # counting on from its new base
    assert e == pytest.approx(30.0) and p == pytest.approx(200.0)


def test_a_power_reading_no_board_gives_does_not_condemn_a_good_energy_counter(tmp_path):
    """The energy counter is checked against the power readings over its first 2 s;
    a 1e24 W reading among them made a good counter "disagree" and be dropped."""
    c = amd_card(tmp_path, power_uw=100_000_000, energy_uj=0)
    clock = FakeClock(0.0)
    s = amd_sampler(tmp_path, clock)
    try:
        for i in range(1, 31):  # 3 s at 100 W: 10 J per 0.1 s
            c.set("hwmon/energy1_input", 10_000_000 * i)
            c.set("hwmon/power1_input", 10**30 if i == 3 else 100_000_000)
            clock.t = 0.1 * i
            s.tick()
        d = s.snapshot().devices[0]
        assert "energy" not in d.na and d.energy_j == pytest.approx(300.0), d.na
    finally:
        s.stop()
