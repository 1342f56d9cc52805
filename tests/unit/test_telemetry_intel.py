"""Intel GPU telemetry (xe, i915) from recorded sysfs trees whose counters move between
samples: utilization from the idle residency, power from the hwmon energy counter."""

from __future__ import annotations

import pytest

from prefilltui.measure.telemetry import make_sampler
from prefilltui.model.types import ProbeResult
from tests.unit import fake_nvml as fk
from tests.unit.fake_nvml import FakeClock
from tests.unit.sysfs_tree import amd_card, i915_card, set_rc6, xe_card


def intel_sampler(root, clock, gpus=None):
    return make_sampler(gpus, hz=10.0, nvml_module=fk.library_not_found(), clock=clock,
                        env={}, sys_root=str(root), amdsmi_module=False)


def test_xe_awake_share_and_power_from_the_energy_counter(tmp_path):
    c = xe_card(tmp_path, idle_ms=1000, energy_uj=5_000_000)
    clock = FakeClock(10.0)
    s = intel_sampler(tmp_path, clock)
    d = s.snapshot().devices[0]
    assert (d.vendor, d.source, d.util_kind) == ("Intel", "xe sysfs", "awake_share")
    assert d.name == "Intel GPU 0x0bd5" and d.power_limit_w == 600.0
    assert d.util_pct is None and d.power_w is None  # a counter needs two readings
    # 100 ms later: 25 ms idle (75 % awake), 30 J spent (300 W); the media GT idles
    # fully and must not pull the figure down
    c.set("tile0/gt0/gtidle/idle_residency_ms", 1025)
    c.set("tile0/gt1/gtidle/idle_residency_ms", 100)
    c.set("hwmon/energy1_input", 35_000_000)
    clock.t = 10.1
    s.tick()
    d = s.snapshot().devices[0]
    assert d.util_pct == pytest.approx(75.0) and d.power_w == pytest.approx(300.0)
    assert d.power_averaged is True and d.power_window_s == pytest.approx(0.1)
    assert d.util_window_s == pytest.approx(0.1)
    clock.t = 10.2
    c.set("tile0/gt0/gtidle/idle_residency_ms", 1125)  # idle all period
    c.set("hwmon/energy1_input", 40_000_000)
    s.tick()
    d = s.snapshot().devices[0]
    assert d.util_pct == pytest.approx(0.0) and d.power_w == pytest.approx(50.0)
    r = ProbeResult(t_send=10.0, t_end=10.2)
    s.attribute(r)
    assert r.energy_source == "counter" and r.energy_j == pytest.approx(35.0)
    s.stop()


def test_i915_rc6_residency(tmp_path):
    c = i915_card(tmp_path, rc6_ms=500, energy_uj=0)
    clock = FakeClock(0.0)
    s = intel_sampler(tmp_path, clock)
    set_rc6(c, 550)  # 50 of 100 ms idle
    c.set("hwmon/energy1_input", 12_000_000)
    clock.t = 0.1
    s.tick()
    d = s.snapshot().devices[0]
    assert d.source == "i915 sysfs" and d.util_pct == pytest.approx(50.0)
    assert d.power_w == pytest.approx(120.0)
    assert "power_limit" in d.na  # no power1_max on this card


def test_a_counter_that_goes_back_gives_no_reading_for_that_tick(tmp_path):
    c = xe_card(tmp_path, idle_ms=4_294_967_000, energy_uj=2**32 - 1000)
    clock = FakeClock(0.0)
    s = intel_sampler(tmp_path, clock)
    c.set("tile0/gt0/gtidle/idle_residency_ms", 10)  # wrapped
    c.set("hwmon/energy1_input", 500)  # wrapped
    clock.t = 0.1
    s.tick()
    d = s.snapshot().devices[0]
    assert d.state == "ok" and d.util_pct is None and d.power_w is None
    c.set("tile0/gt0/gtidle/idle_residency_ms", 60)
    c.set("hwmon/energy1_input", 500 + 20_000_000)
    clock.t = 0.2
    s.tick()
    d = s.snapshot().devices[0]
    assert d.util_pct == pytest.approx(50.0) and d.power_w == pytest.approx(200.0)
    assert d.energy_j == pytest.approx(20.0)  # the unknown interval adds nothing


def test_no_residency_or_energy_file_is_na(tmp_path):
    c = xe_card(tmp_path, energy_uj=None)
    c.remove("tile0/gt0/gtidle/idle_residency_ms")
    d = intel_sampler(tmp_path, FakeClock()).snapshot().devices[0]
    assert d.util_pct is None and "idle_residency_ms" in d.na["util"]
    assert d.power_w is None and "energy1_input" in d.na["power"]


def test_amd_before_intel_and_intel_on_request(tmp_path):
    amd_card(tmp_path, 0)
    xe_card(tmp_path, 1)
    s = intel_sampler(tmp_path, FakeClock())
    snap = s.snapshot()
    assert [d.vendor for d in snap.devices] == ["AMD"]
    assert snap.reason == "also here, not sampled: Intel card1 (--gpus intel:0)"
    s = intel_sampler(tmp_path, FakeClock(), gpus="intel:0")
    assert [d.vendor for d in s.snapshot().devices] == ["Intel"]
