"""CPU fallback sampler: utilization of all cores (psutil) and package power from the
Linux powercap RAPL energy counters, labelled "CPU".

RAPL (Linux Documentation/power/powercap/powercap.rst): each package domain
``/sys/class/powercap/intel-rapl:N`` has ``energy_uj`` (a counter in microjoules that
wraps at ``max_energy_range_uj``) and ``name`` ("package-N"); sub-domains
``intel-rapl:N:M`` (core, uncore, dram) are inside the package figure and are skipped.
AMD CPUs expose the same interface on recent kernels.  Since the 2020 PLATYPUS fix
(CVE-2020-8694) ``energy_uj`` is readable by root only on most distributions; then
power is N/A with the reason.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import platform
from typing import Callable, Mapping

import psutil

from prefilltui.measure.telemetry.base import Sampler
from prefilltui.measure.telemetry.snapshots import DeviceState
from prefilltui.measure.telemetry.samples import WindowStats, window_stats
from prefilltui.model.types import TelemetryKind

RAPL_ROOT = "/sys/class/powercap"


#: Seconds between two reads of the machine's memory (``/proc/meminfo``): shown as a
#: figure, never attributed to a probe, so once a second is plenty; read on every
#: 10-Hz tick it was a third of the sampler's CPU.
MEM_EVERY_S = 1.0


class RaplReader:
    """Sum of the package energy counters, unwrapped into a monotonic counter (J).

    ``available`` is False with ``reason`` ("RAPL not readable: <why>") when no
    package domain can be read.  ``read()`` returns joules since construction, or
    raises OSError when a counter stops being readable.
    """

    def __init__(self, root: str = RAPL_ROOT) -> None:
        self.root = root
        self.domains: list[tuple[str, int]] = []  # (energy_uj path, max range uJ)
        self.reason: str | None = None
        self._last: list[int] = []
        self._total_uj = 0
        paths = sorted(p for p in glob.glob(os.path.join(root, "intel-rapl:*"))
                       if os.path.basename(p).count(":") == 1)
        if not paths:
            self.reason = (f"RAPL not readable: no {root}/intel-rapl:* "
                           "(no RAPL driver, a VM or a container without /sys/class/powercap)")
            return
        errors = []
        for p in paths:
            f = os.path.join(p, "energy_uj")
            try:
                with open(f) as fh:
                    first = int(fh.read())
                with open(os.path.join(p, "max_energy_range_uj")) as fh:
                    rng = int(fh.read())
            except (OSError, ValueError) as exc:
                errors.append(f"{f}: {getattr(exc, 'strerror', None) or exc}")
                continue
            self.domains.append((f, rng))
            self._last.append(first)
        if not self.domains:
            self.reason = "RAPL not readable: " + "; ".join(errors)

    @property
    def available(self) -> bool:
        return bool(self.domains)

    def read(self) -> float:
        """Joules spent by all packages since construction (wraparound handled)."""
        for i, (path, rng) in enumerate(self.domains):
            with open(path) as fh:
                cur = int(fh.read())
            delta = cur - self._last[i]
            if delta < 0:  # wrapped at max_energy_range_uj
                delta += rng + 1 if rng > 0 else 0
            self._total_uj += max(0, delta)
            self._last[i] = cur
        return self._total_uj / 1e6


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


class CpuSampler(Sampler):
    """Samples the host CPU as one device labelled "CPU".

    util_pct: busy share of all cores over the last sample interval (from
    ``psutil.cpu_times()`` deltas, the same formula as ``psutil.cpu_percent`` but with
    our own state, so other callers of cpu_percent do not disturb it).
    power_w: RAPL package power averaged over the last interval (energy delta / time).
    processes: optional {name: pid} of local processes (e.g. the demo's llama-server)
    shown as extra display-only devices labelled "<name> (pid N)" whose util_pct is
    the process's CPU time over the interval as a share of all cores (same scale as
    "CPU"); on a shared machine this shows the server's own spike when the
    system-wide figure is already saturated.  Attribution: power and energy from the
    "CPU" package; utilization from the processes when there are any (a probe drives
    the server, not the machine), else from "CPU".
    """

    kind: TelemetryKind = "cpu"
    source = "CPU"

    def __init__(self, hz: float = 10.0, *, clock: Callable[[], float] | None = None,
                 reason: str | None = None, rapl_root: str | None = None,
                 cpu_times: Callable[[], object] | None = None,
                 processes: Mapping[str, int] | None = None) -> None:
        super().__init__(hz, clock=clock, reason=reason)
        self._cpu_times = cpu_times or psutil.cpu_times
        self.rapl = RaplReader(rapl_root or RAPL_ROOT)
        ncpu = psutil.cpu_count() or 1
        dev = self._new_dev("CPU", f"{_cpu_name()} ({ncpu} cores)")
        dev.power_averaged = True
        dev.power_scope = "CPU package"
        dev.source, dev.util_kind = "psutil + RAPL", "cpu_busy"
        dev.util_window_s = dev.power_window_s = self.period_s
        dev.na.update(sm_clock="not sampled for CPU", temperature="not sampled for CPU",
                      power_limit="not reported by RAPL powercap here")
        if not self.rapl.available:
            dev.na["power"] = dev.na["energy"] = self.rapl.reason or "RAPL not readable"
        self.devices.append(dev)
        self._ncpu = ncpu
        for pname, pid in (processes or {}).items():
            self.add_process(pname, pid)
        self._prev = self._busy_total()
        self._prev_t: float | None = None
        self._prev_e: float | None = self.rapl.read() if self.rapl.available else None
        self._mem: tuple[float, int, int] | None = None  # (read at, used, total) bytes

    def add_process(self, pname: str, pid: int) -> None:
        """Add a display-only device for one local process (psutil.NoSuchProcess and
        AccessDenied propagate to the caller)."""
        proc = psutil.Process(pid)
        dev = self._new_dev(f"{pname} (pid {pid})", proc.name())
        dev.source, dev.util_kind, dev.util_window_s = "psutil", "cpu_busy", self.period_s
        ct = proc.cpu_times()
        dev.extra.update(proc=proc, display_only=True,
                         prev=(ct.user + ct.system, self.clock()))
        for k in ("power", "energy"):
            dev.na[k] = "per-process power is not measured (see CPU)"
        dev.na.update(power_limit="not sampled for a process",
                      sm_clock="not sampled for a process",
                      temperature="not sampled for a process")
        self.devices.append(dev)

    def _sample_process(self, dev: DeviceState, now: float) -> None:
        proc: psutil.Process = dev.extra["proc"]
        with proc.oneshot():  # NoSuchProcess -> error state, retried with back-off
            ct = proc.cpu_times()
            rss = proc.memory_info().rss
        used = ct.user + ct.system
        prev_used, prev_t = dev.extra["prev"]
        util = None
        if prev_t is not None and now > prev_t:
            util = max(0.0, min(100.0, 100.0 * (used - prev_used) / (now - prev_t)
                                / self._ncpu))
        dev.extra["prev"] = (used, now)
        dev.last.update(t=now, util_pct=util, mem_used_bytes=int(rss),
                        mem_total_bytes=None)
        self._append(dev, now, util, None, None)

    def window(self, t0: float, t1: float) -> WindowStats | None:
        """Like ``Sampler.window`` (the CPU package's power and energy), with the
        utilization of the watched processes when any has samples there; ``device``
        then names them first, e.g. "llama-server (pid 42)+CPU"."""
        w = super().window(t0, t1)
        procs = [d for d in self.devices if "proc" in d.extra and d.state == "ok"]
        if w is None or not procs:
            return w
        with self._lock:
            per = [d.ring.ordered() for d in procs]
        pw = window_stats(per, "+".join(d.label for d in procs), t0, t1)
        if pw is None or pw.util_peak_pct is None:
            return w
        return dataclasses.replace(w, device=f"{pw.device}+{w.device}",
                                   util_peak_pct=pw.util_peak_pct,
                                   util_mean_pct=pw.util_mean_pct)

    def _busy_total(self) -> tuple[float, float]:
        ct = self._cpu_times()
        total = sum(ct)  # type: ignore[arg-type]
        idle = getattr(ct, "idle", 0.0) + getattr(ct, "iowait", 0.0)
        # guest time is already counted in user on Linux (psutil does the same)
        total -= getattr(ct, "guest", 0.0) + getattr(ct, "guest_nice", 0.0)
        return total - idle, total

    def _sample(self, dev: DeviceState, now: float) -> None:
        if "proc" in dev.extra:
            return self._sample_process(dev, now)
        busy, total = self._busy_total()
        pbusy, ptotal = self._prev
        self._prev = (busy, total)
        dt_cpu = total - ptotal
        util = None
        if dt_cpu > 0:
            util = max(0.0, min(100.0, 100.0 * (busy - pbusy) / dt_cpu))
        power = energy = None
        if self.rapl.available and "power" not in dev.na:
            try:
                energy = self.rapl.read()
            except OSError as exc:
                dev.na["power"] = dev.na["energy"] = f"RAPL not readable: {exc.strerror or exc}"
            else:
                if dev.energy0 is None:
                    dev.energy0 = 0.0
                if self._prev_t is not None and self._prev_e is not None and now > self._prev_t:
                    power = (energy - self._prev_e) / (now - self._prev_t)
                self._prev_e = energy
        self._prev_t = now
        if self._mem is None or not 0 <= now - self._mem[0] < MEM_EVERY_S:
            mem = psutil.virtual_memory()
            self._mem = (now, int(mem.total - mem.available), int(mem.total))
        dev.last.update(t=now, util_pct=util, power_w=power, energy_counter_j=energy,
                        mem_used_bytes=self._mem[1], mem_total_bytes=self._mem[2])
        self._append(dev, now, util, power, energy)
