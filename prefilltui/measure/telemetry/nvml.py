"""NVIDIA GPU sampler over NVML (nvidia-ml-py's ``pynvml`` module, or any module of
the same shape: tests inject ``tests/unit/fake_nvml.py``).

NVML units (NVML API reference, nvml.h): power in milliwatts, energy in millijoules
(nvmlDeviceGetTotalEnergyConsumption, Volta and newer), clocks in MHz, memory in
bytes, temperature in degrees C, utilization.gpu in percent of the last sample period.
nvmlDeviceGetPowerUsage is averaged over ~1 s on Ampere (except GA100) and newer, so
the instantaneous field NVML_FI_DEV_POWER_INSTANT is preferred where the board reports it.
MIG: NVML reports no utilization for MIG slices or MIG-enabled GPUs, and power/energy
only for the whole GPU (read from the parent handle and labelled "whole GPU").

The driver's buffers of recent samples (nvmlDeviceGetSamples) are read by
``nvml_samples.DriverSamples``, a part the sampler owns (``GpuSampler.driver``).
"""

from __future__ import annotations

import atexit
import math
import os
import time
from typing import Any, Callable, Mapping

from prefilltui.measure.telemetry.base import Sampler
from prefilltui.model.pacing import NVML_WINDOW_MAX_S
from prefilltui.measure.telemetry.snapshots import DeviceState, describe_error
from prefilltui.measure.telemetry.nvml_samples import (DRIVER_UTIL_HZ, DriverSamples,
                                                    _capability_error, _value_members,
                                                    buffered_util, sensor_window,
                                                    util_covered)
from prefilltui.model.types import TelemetryKind

#: Metrics read every tick; the rest ("slow") are read about once a second.
FAST = ("util", "power", "energy")
SLOW = ("power_limit", "sm_clock", "memory", "temperature")
SLOW_PERIOD_S = 1.0


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here; ``str()`` is the one-line reason shown to the user."""


def _s(x: Any) -> str:
    return x.decode(errors="replace") if isinstance(x, bytes) else str(x)


def parse_gpu_selection(gpus: str | None, env: Mapping[str, str] | None = None
                        ) -> tuple[list[int | str] | None, str]:
    """Which GPUs to sample: (targets, source).

    targets: None = every GPU NVML sees; else NVML indices (int) and UUIDs or UUID
    prefixes (str, "GPU-..." / "MIG-...").  source: "--gpus", "CUDA_VISIBLE_DEVICES"
    or "all".  ``--gpus`` wins over CUDA_VISIBLE_DEVICES.  CUDA_VISIBLE_DEVICES is read
    as CUDA does: the list ends at the first entry that is not an index or a UUID
    (so "" and "-1" select nothing).  Its indices are taken as NVML (PCI-order) indices,
    which match CUDA's only with CUDA_DEVICE_ORDER=PCI_BUS_ID.

    Raises:
        ValueError: a malformed ``--gpus`` value (empty entry, negative index).
    """
    if gpus is not None:
        out: list[int | str] = []
        for raw in gpus.split(","):
            item = raw.strip()
            if not item:
                raise ValueError(f"--gpus {gpus!r}: empty entry")
            if item.lstrip("-").isdigit():
                if int(item) < 0:
                    raise ValueError(f"--gpus {gpus!r}: negative index {item}")
                out.append(int(item))
            else:
                out.append(item)
        return out, "--gpus"
    env = os.environ if env is None else env
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return None, "all"
    out = []
    for raw in cvd.split(","):
        item = raw.strip()
        if item.isdigit():
            out.append(int(item))
        elif item.startswith(("GPU-", "MIG-")) and len(item) > 4:
            out.append(item)
        else:
            break
    return out, "CUDA_VISIBLE_DEVICES"


class GpuSampler(Sampler):
    """Samples NVML GPUs; build with ``GpuSampler.open(...)`` (or ``make_sampler``)."""

    kind: TelemetryKind = "gpu"
    #: where the readings come from, in words ("this machine's NVML")
    source = "NVML"

    def __init__(self, nv: Any, hz: float = 10.0, *,
                 clock: Callable[[], float] | None = None, reason: str | None = None,
                 wall: Callable[[], float] | None = None) -> None:
        super().__init__(hz, clock=clock, reason=reason)
        self.nv = nv
        #: the wall clock (unix seconds) the driver stamps its samples with (tests: fake)
        self.wall = wall or time.time
        #: the driver's sample buffers (nvmlDeviceGetSamples), a part with its own clocks
        #: (through the sampler's clocks as they are at each call: tests swap them)
        self.driver = DriverSamples(nv, lambda: self.clock(), lambda: self.wall())
        self.rows_per_s = self.hz + DRIVER_UTIL_HZ
        self.capacity = int(math.ceil(self.retain_s * self.rows_per_s)) + 1

    # -- what the driver's buffers change in the base's timing ----------------------
    def _covered(self, t: float) -> bool:
        """A sample at or after ``t`` exists and, on devices read from the driver's
        buffer, a utilization sample too (the one covering a probe's tail)."""
        return super()._covered(t) and util_covered(self.devices, t)

    @property
    def _cover_wait_s(self) -> float:
        w = self.sensor_window_s or 0.0
        return w + 2 * self.period_s if buffered_util(self.devices) else 0.0

    @property
    def sensor_window_s(self) -> float | None:
        """Seconds one reading averages over, the longest of any device
        (``nvml_samples.sensor_window``)."""
        return sensor_window(self.devices, self.period_s)

    # -- opening -------------------------------------------------------------------
    @classmethod
    def open(cls, gpus: str | None = None, hz: float = 10.0, nvml_module: Any = None, *,
             clock: Callable[[], float] | None = None,
             env: Mapping[str, str] | None = None,
             wall: Callable[[], float] | None = None) -> "GpuSampler":
        """Initialise NVML (once), select GPUs and probe each one's capabilities.

        Raises:
            NvmlUnavailable: no pynvml, no library/driver, no GPU, or none selected.
            ValueError: ``gpus`` is malformed or names a GPU NVML does not have.
        """
        targets, source = parse_gpu_selection(gpus, env)  # ValueError before any init
        nv = nvml_module
        if nv is None:
            try:
                import pynvml as nv  # nvidia-ml-py
            except ImportError as exc:
                raise NvmlUnavailable(f"NVML unavailable: nvidia-ml-py not importable ({exc})")
        try:
            nv.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, OSError...
            raise NvmlUnavailable(f"NVML unavailable: {describe_error(exc)}") from None
        try:
            self = cls(nv, hz, clock=clock, wall=wall)
            self._select(targets, source, gpus)
        except BaseException:
            try:
                nv.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
            raise
        atexit.register(self.stop)
        return self

    def _select(self, targets: list[int | str] | None, source: str, gpus: str | None) -> None:
        nv = self.nv
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001
            raise NvmlUnavailable(f"NVML unavailable: device count failed: {describe_error(exc)}")
        if count == 0:
            raise NvmlUnavailable("NVML: no NVIDIA GPU found")
        if targets is None:
            targets = list(range(count))
        if not targets:
            raise NvmlUnavailable(f"NVML: {source} selects no GPU (empty, -1 or not an index/UUID)")
        skipped: list[str] = []
        for tgt in targets:
            try:
                handle = self._resolve(tgt, count)
            except LookupError as exc:
                if source == "--gpus":
                    raise ValueError(f"--gpus {gpus}: {exc}") from None
                skipped.append(str(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - a GPU failing at open: skip it
                skipped.append(f"GPU {tgt}: {describe_error(exc)}")
                continue
            self.devices.append(self._open_dev(handle, tgt))
        if not self.devices:
            raise NvmlUnavailable(f"NVML: {source} names no GPU NVML has ({'; '.join(skipped)})")
        if skipped:
            self.reason = f"skipped {'; '.join(skipped)}" + (
                f" (from {source})" if source != "all" else "")

    def _resolve(self, tgt: int | str, count: int) -> Any:
        """An NVML handle for an index or UUID (unique prefixes allowed, as in CUDA).

        Raises LookupError with a plain reason when there is no such GPU."""
        nv = self.nv
        if isinstance(tgt, int):
            if tgt >= count:
                raise LookupError(f"no GPU {tgt} (NVML sees {count}: 0-{count - 1})")
            return nv.nvmlDeviceGetHandleByIndex(tgt)
        try:
            return nv.nvmlDeviceGetHandleByUUID(tgt)
        except Exception:  # noqa: BLE001 - try as a prefix below
            pass
        matches = []
        for i in range(count):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            if _s(nv.nvmlDeviceGetUUID(h)).startswith(tgt):
                matches.append(h)
        if len(matches) == 1:
            return matches[0]
        raise LookupError(f"no GPU with UUID {tgt}" if not matches
                          else f"UUID prefix {tgt} is ambiguous")

    def _open_dev(self, h: Any, tgt: int | str) -> DeviceState:
        nv = self.nv
        is_mig_slice = _truthy(_try(lambda: nv.nvmlDeviceIsMigDeviceHandle(h), False))
        parent = h
        if is_mig_slice:
            parent = _try(lambda: nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h), h)
        index = _try(lambda: int(nv.nvmlDeviceGetIndex(parent)),
                     tgt if isinstance(tgt, int) else None)
        mig_mode = not is_mig_slice and _try(
            lambda: nv.nvmlDeviceGetMigMode(h)[0] == getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1),
            False)
        name = _s(_try(lambda: nv.nvmlDeviceGetName(h), "NVIDIA GPU"))
        uuid = _try(lambda: _s(nv.nvmlDeviceGetUUID(h)), None)
        if is_mig_slice:
            gi = _try(lambda: int(nv.nvmlDeviceGetGpuInstanceId(h)), None)
            label = f"GPU {index} MIG {gi if gi is not None else '?'}"
        else:
            label = f"GPU {index}" if index is not None else f"GPU {uuid}"
        dev = self._new_dev(label, name, index=index, uuid=uuid)
        dev.mig = bool(is_mig_slice or mig_mode)
        dev.power_scope = "whole GPU" if dev.mig else "board"
        dev.vendor, dev.source, dev.util_kind = "NVIDIA", "NVML", "kernel_active"
        dev.extra.update(h=h, parent=parent, target=uuid or tgt,
                         power_group=_try(lambda: _s(nv.nvmlDeviceGetUUID(parent)), index))
        try:
            self._probe(dev)
        except RuntimeError as exc:
            self._mark_error(dev, self.clock(), str(exc))
        return dev

    # -- capabilities (probed once) ------------------------------------------------
    def _readers(self, dev: DeviceState) -> dict[str, Callable[[], Any]]:
        nv, x = self.nv, dev.extra
        vm = _value_members(nv)
        return {
            "util": lambda: float(nv.nvmlDeviceGetUtilizationRates(x["h"]).gpu),
            "power_instant": lambda: _field(
                nv, x["parent"], nv.NVML_FI_DEV_POWER_INSTANT, vm) / 1000.0,
            "power": lambda: nv.nvmlDeviceGetPowerUsage(x["parent"]) / 1000.0,
            "energy": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(x["parent"]) / 1000.0,
            "power_limit": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(x["parent"]) / 1000.0,
            "sm_clock": lambda: float(nv.nvmlDeviceGetClockInfo(x["h"], nv.NVML_CLOCK_SM)),
            "memory": lambda: nv.nvmlDeviceGetMemoryInfo(x["h"]),
            "temperature": lambda: float(nv.nvmlDeviceGetTemperature(
                x["parent"], nv.NVML_TEMPERATURE_GPU)),
        }

    def _probe(self, dev: DeviceState) -> None:
        """Query each metric once; keep the readers that work, N/A the rest with why.

        Raises:
            RuntimeError: a non-capability error (GPU lost, unknown); the caller puts
                the device in the error state and it is probed again on retry.
        """
        readers = self._readers(dev)
        use: dict[str, Callable[[], Any]] = {}
        vals: dict[str, Any] = {}
        dev.na.clear()
        try:
            if hasattr(self.nv, "NVML_FI_DEV_POWER_INSTANT") and hasattr(
                    self.nv, "nvmlDeviceGetFieldValues"):
                try:
                    vals["power"] = readers["power_instant"]()
                    use["power"] = readers["power_instant"]
                    dev.power_averaged = False
                except Exception as exc:  # noqa: BLE001
                    if not _capability_error(exc):
                        raise
            for name in ("util", "power", "energy") + SLOW:
                if name in use:
                    continue
                try:
                    vals[name] = readers[name]()
                except Exception as exc:  # noqa: BLE001
                    if not _capability_error(exc):
                        raise
                    dev.na[name] = self._na_reason(dev, name, exc)
                    continue
                use[name] = readers[name]
                if name == "power":
                    dev.power_averaged = True
        except Exception as exc:  # noqa: BLE001
            dev.extra["use"] = None
            raise RuntimeError(f"probing: {describe_error(exc)}") from exc
        dev.extra["use"] = use
        self.driver.probe(dev, use)
        # the driver buffer's measured period, else unknown (1/6 s .. 1 s, nvml.h)
        dev.util_window_s = dev.extra.get("util_window_s")
        dev.power_window_s = NVML_WINDOW_MAX_S if dev.power_averaged else None
        self._record(dev, self.clock(), vals, slow=True)  # the probe is the first sample

    @staticmethod
    def _na_reason(dev: DeviceState, name: str, exc: BaseException) -> str:
        why = describe_error(exc)
        if dev.mig and name == "util":
            return f"MIG: NVML reports no utilization for MIG devices ({why})"
        if dev.mig and name in ("power", "energy", "power_limit"):
            return f"MIG: whole-GPU {name} not reported ({why})"
        if name == "energy":
            return f"energy counter: {why} (needs Volta or newer); integrating power instead"
        return why

    # -- sampling ------------------------------------------------------------------
    def _sample(self, dev: DeviceState, now: float) -> None:
        x = dev.extra
        if dev.state == "error":  # a retry: fresh handle, capabilities again if never probed
            h = self._reopen(x["target"])
            x["h"] = h
            x["parent"] = h
            if dev.mig and _truthy(_try(lambda: self.nv.nvmlDeviceIsMigDeviceHandle(h), False)):
                x["parent"] = self.nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h)
            if x.get("use") is None:
                self._probe(dev)  # raises while the GPU still fails
                return  # the probe recorded this tick's sample
        use: dict[str, Callable[[], Any]] = x["use"]
        last = dev.last
        vals: dict[str, Any] = {"t": now}
        slow = self._slow_due(dev, now, SLOW_PERIOD_S) or dev.state == "error"
        buffers = x.get("buffers") or {}
        for name in FAST + (SLOW if slow else ()):
            fn = use.get(name)
            if fn is None or (name == "util" and "util" in buffers):
                continue
            try:
                vals[name] = fn()
            except Exception as exc:  # noqa: BLE001
                if not _capability_error(exc):
                    raise
                del use[name]  # stopped being supported: N/A from now on
                dev.na[name] = f"stopped reporting: {describe_error(exc)}"
                last.pop(_LAST_KEY.get(name, name), None)
        util_rows: list[tuple[float, float]] = []
        if "util" in buffers:
            util_rows = self.driver.read(dev, "util", now)
            if "util" not in x["buffers"]:  # the buffer stopped answering: poll again
                vals["util"] = use["util"]()
        if "power" in buffers and vals.get("power") is not None:
            peak = max((p for _, p in self.driver.read(dev, "power", now)), default=None)
            if peak is not None:  # mW; the tick keeps the highest power seen in it
                vals["power_peak"] = max(vals["power"], peak / 1000.0)
        self._record(dev, now, vals, slow, util_rows)

    def _record(self, dev: DeviceState, now: float, vals: dict[str, Any], slow: bool,
                util_rows: list[tuple[float, float]] = ()) -> None:
        """Store one sample's values (``vals`` keyed by metric name) in ``dev``;
        ``util_rows``: the driver's utilization samples since the last tick, stored
        before it at their own times (this tick's row then has no utilization)."""
        last = dev.last
        energy = vals.get("energy")
        if energy is not None:
            prev = last.get("energy_counter_j")
            if dev.energy0 is None:
                dev.energy0 = energy
            elif prev is not None and energy < prev:  # counter reset (GPU reset/driver)
                dev.energy0 += energy - prev
        last["t"] = now
        if util_rows:
            last["util_pct"] = util_rows[-1][1]
        elif "util" not in (dev.extra.get("buffers") or {}) or "util_pct" not in last:
            last["util_pct"] = vals.get("util")  # polled (at the probe: the first value)
        last["energy_counter_j"] = energy
        if slow:
            last["power_limit_w"] = vals.get("power_limit")
            last["sm_clock_mhz"] = vals.get("sm_clock")
            last["temperature_c"] = vals.get("temperature")
            mem = vals.get("memory")
            last["mem_used_bytes"] = int(mem.used) if mem is not None else None
            last["mem_total_bytes"] = int(mem.total) if mem is not None else None
        last["power_w"] = vals.get("power")
        prev = dev.ring.last_t()
        for t, u in util_rows:  # times never go backwards in the ring
            prev = t if prev is None else max(prev, t)
            self._append(dev, prev, u, None, None)
        if util_rows:
            dev.extra["util_t"] = util_rows[-1][0]
        buffered = "util" in (dev.extra.get("buffers") or {}) or bool(util_rows)
        self._append(dev, now, None if buffered else vals.get("util"),
                     vals.get("power_peak", vals.get("power")), energy)

    def _reopen(self, target: int | str) -> Any:
        if isinstance(target, int):
            return self.nv.nvmlDeviceGetHandleByIndex(target)
        return self.nv.nvmlDeviceGetHandleByUUID(target)

    def _close(self) -> None:
        atexit.unregister(self.stop)
        self.nv.nvmlShutdown()


_LAST_KEY = {"util": "util_pct", "power": "power_w", "energy": "energy_counter_j",
             "power_limit": "power_limit_w", "sm_clock": "sm_clock_mhz",
             "temperature": "temperature_c"}

def _try(fn: Callable[[], Any], default: Any) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 - optional facts (index, name, MIG) only
        return default


def _truthy(x: Any) -> bool:
    return bool(getattr(x, "value", x))


def _field(nv: Any, h: Any, field_id: int, members: dict[int, str]) -> float:
    """One nvmlDeviceGetFieldValues value as a number; raises the field's NVMLError
    (the call succeeds overall and reports per-field failure in ``nvmlReturn``)."""
    v = nv.nvmlDeviceGetFieldValues(h, [field_id])[0]
    ret = int(v.nvmlReturn)
    if ret != 0:  # NVML_SUCCESS
        raise nv.NVMLError(ret)
    return float(getattr(v.value, members.get(int(v.valueType), "uiVal")))
