"""AMD GPU telemetry without the hardware: recorded amdgpu sysfs trees whose values
change between samples, and a fake ``amdsmi`` module; every failure the readers
document (file missing, permission denied, "N/A", a counter that wraps, a die with no
power of its own, every way the amdsmi import fails)."""

from __future__ import annotations

import errno
import importlib.abc
import sys

import pytest

from prefilltui.measure.telemetry import make_sampler
from prefilltui.measure.telemetry import sysfs as sysfs_mod
from prefilltui.measure.telemetry.amd import import_amdsmi, AmdSmiUnavailable
from prefilltui.model.types import ProbeResult
from tests.unit import fake_nvml as fk
from tests.unit.fake_nvml import FakeClock
from tests.unit.fake_amdsmi import AmdSmiLibraryException, FakeAmdSmi, FakeGpu
from tests.unit.sysfs_tree import amd_card, nvidia_card


def amd_sampler(root, clock=None, gpus=None, amdsmi_module=False, **kw):
    """make_sampler over a recorded tree, with no NVML (and no amdsmi unless given)."""
    return make_sampler(gpus, hz=10.0, nvml_module=fk.library_not_found(),
                        clock=clock or FakeClock(), env={}, sys_root=str(root),
                        amdsmi_module=amdsmi_module, **kw)


# -- amdgpu sysfs ----------------------------------------------------------------------
def test_amdgpu_sysfs_reads_documented_files_and_follows_changes(tmp_path):
    c = amd_card(tmp_path, busy=0, power_uw=140_000_000)
    clock = FakeClock(0.0)
    s = amd_sampler(tmp_path, clock)
    d = s.snapshot().devices[0]
    assert s.kind == "gpu" and s.source == "amdgpu sysfs"
    assert (d.label, d.name, d.vendor, d.source) == ("GPU 0", "AMD Instinct MI300X", "AMD",
                                                      "amdgpu sysfs")
    assert d.util_kind == "busy_percent" and d.power_averaged is False
    assert d.util_pct == 0 and d.power_w == 140.0 and d.power_limit_w == 750.0
    assert d.mem_used_bytes == 2 * 2**30 and d.mem_total_bytes == 192 * 2**30
    assert d.temperature_c == 45.0
    # a prefill: the driver's files change between samples
    c.set("gpu_busy_percent", 87)
    c.set("hwmon/power1_input", 612_000_000)
    clock.t = 0.1
    s.tick()
    d = s.snapshot().devices[0]
    assert d.util_pct == 87 and d.power_w == 612.0
    assert [h[1] for h in d.history] == [0, 87]
    # a probe over that tick is attributed from the rings
    r = ProbeResult(t_send=0.05, t_end=0.1)
    s.attribute(r)
    assert r.telemetry_device == "GPU 0" and r.util_peak_pct == 87 and r.power_peak_w == 612.0
    assert r.energy_source == "integrated"  # no energy1_input on this board
    s.stop()


def test_power1_average_is_labelled_averaged_with_an_undocumented_window(tmp_path):
    amd_card(tmp_path, power_uw=300_000_000, average=True)
    s = amd_sampler(tmp_path)
    d = s.snapshot().devices[0]
    assert d.power_w == 300.0 and d.power_averaged is True and d.power_window_s is None
    # the SMU's windows are not documented: pacing assumes NVML's worst case (1 s)
    assert s.sensor_window_s == 1.0


def test_product_name_wins_and_unknown_ids_say_the_id(tmp_path):
    amd_card(tmp_path, 0, product_name="Instinct MI325X OAM")
    amd_card(tmp_path, 1, device=0x1234)
    names = [d.name for d in amd_sampler(tmp_path).snapshot().devices]
    assert names == ["AMD Instinct MI325X OAM", "AMD GPU 0x1234"]


def test_mi250_second_die_shows_na_never_zero_and_the_package_counts_once(tmp_path):
    a = amd_card(tmp_path, 0, device=0x740C, power_uw=300_000_000, busy=10)
    b = amd_card(tmp_path, 1, device=0x740C, power_uw=0, busy=20)
    clock = FakeClock(0.0)
    s = amd_sampler(tmp_path, clock)
    d0, d1 = s.snapshot().devices
    assert d0.power_w == 300.0
    assert d1.power_w is None and "no power of its own" in d1.na["power"]
    assert d1.power_limit_w == 750.0 or d1.power_limit_w is None  # the cap is not power
    a.set("hwmon/power1_input", 500_000_000)
    b.set("gpu_busy_percent", 90)
    clock.t = 0.1
    s.tick()
    r = ProbeResult(t_send=0.0, t_end=0.1)
    s.attribute(r)
    # the first die's reading is the package's: summed once, not lost to the NaN
    assert r.telemetry_device == "GPU 0+GPU 1"
    assert r.power_peak_w == 500.0 and r.energy_j is not None and r.energy_j > 0
    assert s.snapshot().devices[1].power_w is None


def test_energy_counter_gives_per_probe_energy_and_survives_a_wrap(tmp_path):
    c = amd_card(tmp_path, power_uw=400_000_000, energy_uj=10_000_000)
    clock = FakeClock(0.0)
    s = amd_sampler(tmp_path, clock)
    for i in range(1, 11):  # 400 W for 1 s: 40 J per 0.1 s tick
        clock.t = i * 0.1
        c.set("hwmon/energy1_input", 10_000_000 + i * 40_000_000)
        s.tick()
    r = ProbeResult(t_send=0.2, t_end=0.9)
    s.attribute(r)
    assert r.energy_source == "counter" and r.energy_j == pytest.approx(280.0)
    assert s.snapshot().devices[0].energy_j == pytest.approx(400.0)
    # the counter goes back (wrapped, or reset with the GPU): no negative joules
    clock.t = 1.1
    c.set("hwmon/energy1_input", 5)
    s.tick()
    clock.t = 1.2
    c.set("hwmon/energy1_input", 5 + 40_000_000)
    s.tick()
    d = s.snapshot().devices[0]
    assert d.energy_j == pytest.approx(440.0) and d.state == "ok"


def test_missing_file_is_na_with_the_file_named(tmp_path):
    c = amd_card(tmp_path)
    c.remove("gpu_busy_percent")
    c.remove("hwmon/power1_input")
    d = amd_sampler(tmp_path).snapshot().devices[0]
    assert d.util_pct is None and "no gpu_busy_percent" in d.na["util"]
    assert d.power_w is None and "power1_input" in d.na["power"] \
        and "power1_average" in d.na["power"]


def test_permission_denied_is_na_with_why(tmp_path, monkeypatch):
    amd_card(tmp_path)
    real_open = open

    def deny(path, *a, **kw):  # tests run as root: chmod would not stop a read
        if str(path).endswith("gpu_busy_percent"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr(sysfs_mod, "open", deny, raising=False)
    d = amd_sampler(tmp_path).snapshot().devices[0]
    assert d.util_pct is None and d.na["util"] == "gpu_busy_percent: permission denied"
    assert d.power_w == 150.0  # the other files still read


def test_na_value_at_open_and_mid_run(tmp_path):
    c = amd_card(tmp_path)
    c.set("hwmon/power1_cap", "N/A")
    clock = FakeClock(0.0)
    s = amd_sampler(tmp_path, clock)
    d = s.snapshot().devices[0]
    assert d.power_limit_w is None and "reads 'N/A'" in d.na["power_limit"]
    c.set("gpu_busy_percent", "N/A")  # one tick without a value is no error
    clock.t = 0.1
    s.tick()
    d = s.snapshot().devices[0]
    assert d.state == "ok" and d.util_pct is None and d.power_w == 150.0


def test_driver_error_mid_run_is_an_error_state_then_recovers(tmp_path, monkeypatch):
    amd_card(tmp_path, busy=5)
    clock = FakeClock(0.0)
    s = amd_sampler(tmp_path, clock)
    real_open = open
    busy = {"on": True}

    def ebusy(path, *a, **kw):  # amdgpu answers EPERM/EBUSY during a GPU reset
        if busy["on"] and str(path).endswith("gpu_busy_percent"):
            raise OSError(errno.EBUSY, "Device or resource busy", str(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr(sysfs_mod, "open", ebusy, raising=False)
    clock.t = 0.1
    s.tick()
    d = s.snapshot().devices[0]
    assert d.state == "error" and "busy" in d.error.lower() and d.util_pct is None
    busy["on"] = False
    clock.t = 1.2  # past the 1 s back-off
    s.tick()
    d = s.snapshot().devices[0]
    assert d.state == "ok" and d.util_pct == 5


def test_nvidia_card_in_drm_is_not_sampled_twice(tmp_path):
    nvidia_card(tmp_path, 0)
    s = make_sampler(None, nvml_module=fk.fake_gpus(1, util=50), clock=FakeClock(), env={},
                     sys_root=str(tmp_path), amdsmi_module=False)
    snap = s.snapshot()
    assert [d.source for d in snap.devices] == ["NVML"] and snap.reason is None
    s.stop()


def test_nvml_first_and_the_amd_card_beside_it_is_named(tmp_path):
    nvidia_card(tmp_path, 0)
    amd_card(tmp_path, 1)
    s = make_sampler(None, nvml_module=fk.fake_gpus(1, util=50), clock=FakeClock(), env={},
                     sys_root=str(tmp_path), amdsmi_module=False)
    snap = s.snapshot()
    assert [d.vendor for d in snap.devices] == ["NVIDIA"]
    assert snap.reason == "also here, not sampled: AMD card1 (--gpus amd:0)"
    s.stop()
    s = make_sampler("amd", nvml_module=fk.fake_gpus(1, util=50), clock=FakeClock(), env={},
                     sys_root=str(tmp_path), amdsmi_module=False)
    assert [d.vendor for d in s.snapshot().devices] == ["AMD"]
    assert "NVIDIA card0" in s.snapshot().reason


def test_gpus_selects_amd_by_index_and_rejects_bad_values(tmp_path):
    amd_card(tmp_path, 0)
    amd_card(tmp_path, 1, product_name="Instinct MI300X #2")
    s = amd_sampler(tmp_path, gpus="amd:1")
    assert [(d.label, d.name) for d in s.snapshot().devices] == [
        ("GPU 1", "AMD Instinct MI300X #2")]
    with pytest.raises(ValueError, match="no AMD GPU 5"):
        amd_sampler(tmp_path, gpus="amd:5")
    with pytest.raises(ValueError, match="by index"):
        amd_sampler(tmp_path, gpus="amd:GPU-abc")
    with pytest.raises(ValueError, match="unknown vendor"):
        amd_sampler(tmp_path, gpus="matrox:0")


def test_no_amd_card_and_no_amdsmi_keeps_the_cpu_fallback_line(tmp_path):
    s = amd_sampler(tmp_path, amdsmi_module=None)  # the real import: not installed here
    snap = s.snapshot()
    assert snap.kind == "cpu"
    assert snap.reason == "NVML unavailable: NVML Shared Library Not Found — showing CPU"
    s.stop()
    s = amd_sampler(tmp_path, gpus="amd")
    assert s.snapshot().reason.startswith("NVML unavailable") is False
    assert "no AMD GPU in" in s.snapshot().reason
    s.stop()


# -- amdsmi ----------------------------------------------------------------------------
def test_amdsmi_fake_module_reads_activity_power_and_energy(tmp_path):
    g = FakeGpu(gfx=3, current_w=160, energy_count=0, resolution=15.3)
    mod = FakeAmdSmi([g])
    amd_card(tmp_path, 0, pci=g.bdf)  # the same board in sysfs: shown once
    clock = FakeClock(0.0)
    s = amd_sampler(tmp_path, clock, amdsmi_module=mod)
    snap = s.snapshot()
    assert len(snap.devices) == 1
    d = snap.devices[0]
    assert (d.source, d.name, d.util_kind) == ("amdsmi", "AMD Instinct MI300X", "gfx_activity")
    assert d.util_pct == 3 and d.power_w == 160 and d.power_averaged is False
    assert d.power_limit_w == 750.0 and d.mem_total_bytes == 196_592 * 2**20
    g.gfx, g.current_w = 95, 700
    for i in range(1, 31):  # 700 W: 70 J a tick = 70e6/15.3 counts
        clock.t = i * 0.1
        g.energy_count = round(i * 70e6 / 15.3)
        s.tick()
    d = s.snapshot().devices[0]
    assert d.util_pct == 95 and d.power_w == 700
    assert d.energy_j == pytest.approx(2100.0, rel=1e-3)
    r = ProbeResult(t_send=0.5, t_end=2.5)
    s.attribute(r)
    assert r.energy_source == "counter" and r.energy_j == pytest.approx(1400.0, rel=1e-3)
    s.stop()
    assert mod.calls[-1] == "amdsmi_shut_down"


def test_amdsmi_na_values_fall_back_and_say_why(tmp_path):
    g = FakeGpu(gfx="N/A", current_w="N/A", average_w=210, old_energy_key=True)
    d = amd_sampler(tmp_path, amdsmi_module=FakeAmdSmi([g])).snapshot().devices[0]
    assert d.util_pct is None and "N/A" in d.na["util"]
    assert d.power_w == 210 and d.power_averaged is True
    g2 = FakeGpu(current_w="N/A", average_w="N/A")
    d2 = amd_sampler(tmp_path, amdsmi_module=FakeAmdSmi([g2])).snapshot().devices[0]
    assert d2.power_w is None and "N/A" in d2.na["power"]


def test_amdsmi_second_die_reads_zero_power_shown_na(tmp_path):
    gpus = [FakeGpu(name="AMD Instinct MI250X", bdf="0000:c1:00.0", current_w="N/A",
                    average_w=320),
            FakeGpu(name="AMD Instinct MI250X", bdf="0000:c6:00.0", current_w="N/A",
                    average_w=0)]
    d0, d1 = amd_sampler(tmp_path, amdsmi_module=FakeAmdSmi(gpus)).snapshot().devices
    assert d0.power_w == 320 and d1.power_w is None
    assert "no power of its own" in d1.na["power"] and d1.energy_j is None


def test_amdsmi_energy_counter_that_disagrees_with_power_is_not_used(tmp_path):
    g = FakeGpu(current_w=500, energy_count=0, resolution=1.0)
    clock = FakeClock(0.0)
    s = amd_sampler(tmp_path, clock, amdsmi_module=FakeAmdSmi([g]))
    for i in range(1, 31):  # 500 W, but the counter says 0.5 W (ROCm/amdsmi issue 38)
        clock.t = i * 0.1
        g.energy_count = i * 50_000
        s.tick()
    d = s.snapshot().devices[0]
    assert d.energy_j is None and "disagrees" in d.na["energy"]
    r = ProbeResult(t_send=2.5, t_end=2.9)
    s.attribute(r)
    assert r.energy_source == "integrated" and r.energy_j == pytest.approx(200.0)


def test_amdsmi_init_failure_falls_back_to_sysfs_with_the_reason(tmp_path):
    amd_card(tmp_path)
    mod = FakeAmdSmi([], init_error=AmdSmiLibraryException(34, "driver not loaded"))
    s = amd_sampler(tmp_path, amdsmi_module=mod)
    snap = s.snapshot()
    assert snap.devices[0].source == "amdgpu sysfs"
    assert "amdsmi unavailable: init failed" in snap.reason
    assert "AMD GPUs from amdgpu sysfs" in snap.reason


def test_amdsmi_injected_through_sys_modules(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", FakeAmdSmi([FakeGpu(gfx=12)]))
    s = amd_sampler(tmp_path, amdsmi_module=None)
    assert [(d.source, d.util_pct) for d in s.snapshot().devices] == [("amdsmi", 12)]


class _Raising(importlib.abc.MetaPathFinder):
    """A finder that makes ``import amdsmi`` raise ``exc`` (as a broken ROCm does)."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def find_spec(self, name, path=None, target=None):
        if name == "amdsmi":
            raise self.exc
        return None


@pytest.mark.parametrize("exc,words", [
    (ImportError("No module named 'amdsmi'"), "not installed"),
    (OSError("libamd_smi.so: cannot open shared object file"), "libamd_smi.so not found"),
    (AttributeError("module has no attribute 'amdsmi_get_gpu_metrics_info'"),
     "does not match the ROCm library"),
    (KeyError("ROCM_PATH"), "broken amdsmi install"),
])
def test_every_amdsmi_import_failure_is_a_reason_not_a_crash(monkeypatch, tmp_path, exc, words):
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Raising(exc)] + sys.meta_path)
    with pytest.raises(AmdSmiUnavailable, match=words):
        import_amdsmi()
    amd_card(tmp_path)  # the sysfs still works
    s = amd_sampler(tmp_path, amdsmi_module=None)
    assert s.snapshot().devices[0].source == "amdgpu sysfs"


def test_amdsmi_query_failing_mid_run_is_retried(tmp_path):
    g = FakeGpu(gfx=40)
    clock = FakeClock(0.0)
    s = amd_sampler(tmp_path, clock, amdsmi_module=FakeAmdSmi([g]))
    g.fail["amdsmi_get_gpu_activity"] = AmdSmiLibraryException(8, "timeout")
    clock.t = 0.1
    s.tick()
    assert s.snapshot().devices[0].state == "error"
    g.fail.clear()
    clock.t = 1.2
    s.tick()
    d = s.snapshot().devices[0]
    assert d.state == "ok" and d.util_pct == 40


def test_a_pci_device_is_one_card_and_connectors_are_not_cards(tmp_path):
    from prefilltui.measure.telemetry.sysfs import drm_cards

    amd_card(tmp_path, 0, pci="0000:05:00.0")
    amd_card(tmp_path, 1, pci="0000:05:00.0")  # a second node of the same board
    nvidia_card(tmp_path, 2)
    cards = drm_cards(str(tmp_path))
    assert [(c.card, c.vendor_name, c.driver) for c in cards] == [
        ("card0", "AMD", "amdgpu"), ("card2", "NVIDIA", "nvidia")]
    assert drm_cards(str(tmp_path / "nowhere")) == []  # no /sys/class/drm: none, no error
    assert len(amd_sampler(tmp_path, gpus="amd").snapshot().devices) == 1


def test_sysfs_energy_counter_that_disagrees_with_power_is_dropped(tmp_path):
    c = amd_card(tmp_path, power_uw=400_000_000, energy_uj=0)
    clock = FakeClock(0.0)
    s = amd_sampler(tmp_path, clock)
    for i in range(1, 31):  # 400 W read, but the counter says 40 kW
        clock.t = i * 0.1
        c.set("hwmon/energy1_input", i * 4_000_000_000)
        s.tick()
    d = s.snapshot().devices[0]
    assert d.energy_j is None and "disagrees" in d.na["energy"] and d.power_w == 400.0
    r = ProbeResult(t_send=2.5, t_end=2.9)
    s.attribute(r)
    assert r.energy_source == "integrated" and r.energy_j == pytest.approx(160.0)
