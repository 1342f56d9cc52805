"""CPU fallback sampler: psutil utilization and RAPL powercap energy."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import namedtuple

import pytest

from prefilltui.measure.telemetry import CpuSampler, RaplReader
from prefilltui.measure.telemetry import make_sampler
from prefilltui.model.types import ProbeResult
from tests.unit.fake_nvml import FakeClock

Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")


def _no_nvml():
    from tests.unit import fake_nvml as fk

    return fk.library_not_found()


def write_rapl(root, pkg: int, energy_uj: int, max_uj: int = 262_143_328_850,
               mode: int = 0o644) -> str:
    d = root / f"intel-rapl:{pkg}"
    d.mkdir(exist_ok=True)
    (d / "name").write_text(f"package-{pkg}\n")
    (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    f = d / "energy_uj"
    f.write_text(f"{energy_uj}\n")
    os.chmod(f, mode)
    return str(f)


def test_real_machine_cpu_fallback_reports_utilization():
    """On this real machine (no NVIDIA driver) the fallback yields utilization values."""
    s = make_sampler(env={})
    try:
        snap = s.snapshot()
        if snap.kind == "gpu":
            pytest.skip("this machine has an NVIDIA GPU")
        assert snap.kind == "cpu" and snap.reason.startswith("NVML")
        assert snap.reason.endswith("— showing CPU")
        # a utilization needs the system's CPU clock (10 ms ticks) to move between two
        # samples; the sampler's own thread may have sampled just before this tick
        deadline = time.monotonic() + 5.0
        while True:
            sum(i * i for i in range(200_000))  # some CPU time between samples
            time.sleep(0.02)
            s.tick()
            d = s.snapshot().devices[0]
            if d.util_pct is not None or time.monotonic() > deadline:
                break
        assert d.label == "CPU" and d.state == "ok"
        assert d.util_pct is not None and 0.0 <= d.util_pct <= 100.0
        # RAPL: a value, or N/A with the reason (never 0 for "unknown")
        assert (d.power_w is not None) or d.na["power"].startswith("RAPL not readable")
        assert d.mem_total_bytes and d.mem_used_bytes
    finally:
        s.stop()


def test_cpu_utilization_from_cpu_times():
    seq = [Times(100, 0, 50, 850, 0, 0, 0, 0, 0, 0),   # at construction
           Times(130, 0, 60, 870, 0, 0, 0, 0, 0, 0)]   # +40 busy, +20 idle -> 66.7 %
    clock = FakeClock(0.0)
    s = CpuSampler(clock=clock, cpu_times=lambda: seq.pop(0), rapl_root="/nonexistent")
    clock.t = 0.1
    s.tick()
    d = s.snapshot().devices[0]
    assert d.util_pct == pytest.approx(200 / 3)


def test_rapl_unavailable_reason(tmp_path):
    s = CpuSampler(clock=FakeClock(), rapl_root=str(tmp_path))
    d = s.snapshot().devices[0]
    assert d.power_w is None and d.na["power"].startswith("RAPL not readable: no ")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read mode-000 files")
def test_rapl_permission_denied(tmp_path):
    write_rapl(tmp_path, 0, 1000, mode=0o000)
    r = RaplReader(str(tmp_path))
    assert not r.available
    assert r.reason.startswith("RAPL not readable: ") and "Permission denied" in r.reason


def test_rapl_power_energy_and_wraparound(tmp_path):
    max_uj = 1_000_000_000
    f0 = write_rapl(tmp_path, 0, max_uj - 2_000_000, max_uj)  # 2 J before the wrap
    f1 = write_rapl(tmp_path, 1, 0, max_uj)
    (tmp_path / "intel-rapl:0:0").mkdir()  # a sub-domain (core): must be skipped
    clock = FakeClock(0.0)
    s = CpuSampler(clock=clock, rapl_root=str(tmp_path))
    assert len(s.rapl.domains) == 2
    clock.t = 0.1
    s.tick()  # first RAPL sample: no power yet (needs two)
    # package 0 wraps: +2 J to the top, +1 to 0 (1 uJ), +3 J after -> 5.000001 J; pkg 1 +5 J
    open(f0, "w").write(f"{3_000_000}\n")
    open(f1, "w").write(f"{5_000_000}\n")
    clock.t = 1.1
    s.tick()
    d = s.snapshot().devices[0]
    assert d.power_w == pytest.approx(10.000001)
    assert d.energy_j == pytest.approx(10.000001)
    assert d.power_scope == "CPU package" and d.power_averaged
    r = ProbeResult(t_send=0.1, t_end=1.1)
    s.attribute(r)
    assert r.telemetry_device == "CPU"
    assert r.energy_j == pytest.approx(10.000001) and r.energy_source == "counter"


def test_rapl_becomes_unreadable_mid_run(tmp_path):
    f0 = write_rapl(tmp_path, 0, 100)
    clock = FakeClock(0.0)
    s = CpuSampler(clock=clock, rapl_root=str(tmp_path))
    os.remove(f0)
    clock.t = 0.1
    s.tick()
    d = s.snapshot().devices[0]
    assert d.state == "ok" and d.power_w is None
    assert d.na["power"].startswith("RAPL not readable:")


def test_process_device_shows_its_own_cpu_share():
    clock = FakeClock(0.0)
    s = make_sampler(nvml_module=_no_nvml(), clock=clock, env={},
                     processes={"me": os.getpid()})
    cpu, me = s.snapshot().devices
    assert cpu.label == "CPU" and me.label == f"me (pid {os.getpid()})"
    assert me.na["power"].startswith("per-process power")
    t0 = time.process_time()
    while time.process_time() - t0 < 0.05:  # burn ~50 ms of CPU
        pass
    clock.t = 1.0
    s.tick()
    me = s.snapshot().devices[1]
    assert me.util_pct is not None and me.util_pct > 0.0 and me.mem_used_bytes
    r = ProbeResult(t_send=0.0, t_end=1.0)
    s.attribute(r)
    # utilization from the watched process (what the probe drives), power from "CPU"
    assert r.telemetry_device == f"me (pid {os.getpid()})+CPU"
    assert r.util_peak_pct == me.util_pct


def test_process_that_is_gone_is_left_out_with_reason():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    s = make_sampler(nvml_module=_no_nvml(), clock=FakeClock(), env={},
                     processes={"llama-server": p.pid})
    snap = s.snapshot()
    assert [d.label for d in snap.devices] == ["CPU"]
    assert f"llama-server (pid {p.pid}) not sampled" in snap.reason


def test_process_exiting_mid_run_is_an_error_state():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        clock = FakeClock()
        s = make_sampler(nvml_module=_no_nvml(), clock=clock, env={},
                         processes={"srv": p.pid})
    finally:
        p.kill()
        p.wait()
    clock.t = 0.1
    s.tick()
    cpu, srv = s.snapshot().devices
    assert cpu.state == "ok" and srv.state == "error" and srv.util_pct is None
