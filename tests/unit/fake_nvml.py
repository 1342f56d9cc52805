"""A fake ``pynvml`` (nvidia-ml-py) for tests: same function names, constants, units
(mW, mJ, MHz, bytes) and exception classes (NVMLError and its generated subclasses
NVMLError_NotSupported, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...).

Use::

    from tests.unit.fake_nvml import fake_gpus, FakeGpu, FakeNvml
    nv = fake_gpus(2, util=[10, 95, 97], power_mw=[60_000, 610_000])
    sampler = make_sampler(nvml_module=nv, clock=clock)

A scripted value is a number, a list (one item per call, the last one repeats) or a
callable ``f()`` (e.g. reading a fake clock).  ``gpu.fail[metric] = exc`` makes that
query raise until removed (a GPU erroring mid-run); ``gpu.unsupported`` is a set of
metrics that raise NVMLError_NotSupported.  ``nv.calls`` counts calls per function.
Metric names: util, power (nvmlDeviceGetPowerUsage), power_instant (the
NVML_FI_DEV_POWER_INSTANT field), energy, power_limit, sm_clock, memory, temperature.

The driver's sample buffers (nvmlDeviceGetSamples): ``gpu.samples[kind]`` is a list of
``(timestamp_us, value)`` the test appends to (kind NVML_GPU_UTILIZATION_SAMPLES:
percent, NVML_TOTAL_POWER_SAMPLES: mW); a kind without a list raises
NVMLError_NotSupported, and nothing newer than ``lastSeenTimeStamp`` raises
NVMLError_NotFound, as the real call does.  Values come back as unsigned int
(NVML_VALUE_TYPE_UNSIGNED_INT), timestamps in microseconds on the wall clock (an H200
on driver 580 stamps them with gettimeofday time).
"""

from __future__ import annotations

import string
import sys
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

# ---- constants (values as in pynvml) -------------------------------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_TOTAL_POWER_SAMPLES = 0
NVML_GPU_UTILIZATION_SAMPLES = 1
NVML_MEMORY_UTILIZATION_SAMPLES = 2
NVML_FI_DEV_POWER_AVERAGE = 185
NVML_FI_DEV_POWER_INSTANT = 186
NVML_FI_DEV_ENERGY = 191

_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Like pynvml.NVMLError: ``NVMLError(code)`` returns the code's subclass."""

    _valClassMapping: dict[int, type] = {}

    def __new__(typ, value):
        if typ is NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return _STRINGS.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = Exception.__hash__


def _make_error_classes() -> None:
    mod = sys.modules[__name__]
    for name in [n for n in dir(mod) if n.startswith("NVML_ERROR_")]:
        cls_name = "NVMLError_" + string.capwords(
            name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        val = getattr(mod, name)

        def gen_new(v):
            def new(typ, *args):
                return NVMLError.__new__(typ, v)
            return new

        cls = type(cls_name, (NVMLError,), {"__new__": gen_new(val)})
        cls.__module__ = __name__
        setattr(mod, cls_name, cls)
        NVMLError._valClassMapping[val] = cls


_make_error_classes()
NVMLError_NotSupported: type[NVMLError]
NVMLError_LibraryNotFound: type[NVMLError]
NVMLError_DriverNotLoaded: type[NVMLError]
NVMLError_GpuIsLost: type[NVMLError]
NVMLError_Unknown: type[NVMLError]
NVMLError_NoPermission: type[NVMLError]
NVMLError_Uninitialized: type[NVMLError]
NVMLError_NotFound: type[NVMLError]


def _script(v: Any) -> Any:
    """Current value of a scripted value; lists are consumed (last item repeats)."""
    if callable(v):
        return v()
    if isinstance(v, list):
        return v.pop(0) if len(v) > 1 else v[0]
    return v


@dataclass(eq=False)
class FakeGpu:
    """One fake GPU (or a MIG slice when ``parent`` is set); it is its own handle."""

    index: int = 0
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = ""
    util: Any = 0  # percent
    power_mw: Any = 70_000  # nvmlDeviceGetPowerUsage, mW
    power_instant_mw: Any = None  # NVML_FI_DEV_POWER_INSTANT, mW; None = same as power_mw
    energy_mj: Any = None  # nvmlDeviceGetTotalEnergyConsumption; None = integrate nothing, 0
    power_limit_mw: Any = 700_000
    sm_clock_mhz: Any = 1980
    mem_used: Any = 1 << 30
    mem_total: int = 80 << 30
    temperature_c: Any = 40
    mig_mode: bool = False
    parent: "FakeGpu | None" = None
    gpu_instance_id: int = 0
    unsupported: set[str] = field(default_factory=set)
    fail: dict[str, BaseException] = field(default_factory=dict)
    samples: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.uuid:
            self.uuid = f"GPU-{self.index:08x}-fake-4000-8000-{self.index:012x}"

    def read(self, metric: str, value: Any) -> Any:
        if metric in self.fail:
            raise self.fail[metric]
        if (metric in self.unsupported or "*" in self.unsupported
                or (metric == "power_instant" and "power" in self.unsupported)):
            raise NVMLError_NotSupported()
        return _script(value)


class FakeNvml:
    """An object with pynvml's module-level names (pass it as ``nvml_module``)."""

    def __init__(self, gpus: list[FakeGpu] | None = None, *,
                 init_error: BaseException | None = None, mig_slices: list[FakeGpu] = ()):
        self.gpus = list(gpus or [])
        self.mig_slices = list(mig_slices)
        self.init_error = init_error
        self.initialised = 0
        self.calls: Counter[str] = Counter()
        mod = sys.modules[__name__]
        for name in dir(mod):
            if name.startswith(("NVML_", "NVMLError")):
                setattr(self, name, getattr(mod, name))

    # -- init ----------------------------------------------------------------------
    def _count(self, fn: str) -> None:
        self.calls[fn] += 1
        if fn not in ("nvmlInit", "nvmlShutdown") and self.initialised <= 0:
            raise NVMLError_Uninitialized()

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise self.init_error
        self.initialised += 1

    def nvmlInitWithFlags(self, flags: int) -> None:
        self.nvmlInit()

    def nvmlShutdown(self) -> None:
        self._count("nvmlShutdown")
        if self.initialised <= 0:
            raise NVMLError_Uninitialized()
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._count("nvmlSystemGetDriverVersion")
        return "550.54.15"

    # -- handles -------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._count("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        self._count("nvmlDeviceGetHandleByIndex")
        if not 0 <= i < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[i]

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> FakeGpu:
        self._count("nvmlDeviceGetHandleByUUID")
        u = uuid.decode() if isinstance(uuid, bytes) else uuid
        for g in self.gpus + self.mig_slices:
            if g.uuid == u:
                return g
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetIndex(self, h: FakeGpu) -> int:
        self._count("nvmlDeviceGetIndex")
        if h.parent is not None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return h.index

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        self._count("nvmlDeviceGetName")
        return h.name

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        self._count("nvmlDeviceGetUUID")
        return h.uuid

    def nvmlDeviceIsMigDeviceHandle(self, h: FakeGpu) -> int:
        self._count("nvmlDeviceIsMigDeviceHandle")
        return int(h.parent is not None)

    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> list[int]:
        self._count("nvmlDeviceGetMigMode")
        if h.parent is not None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        m = NVML_DEVICE_MIG_ENABLE if h.mig_mode else NVML_DEVICE_MIG_DISABLE
        return [m, m]

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h: FakeGpu) -> FakeGpu:
        self._count("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        if h.parent is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return h.parent

    def nvmlDeviceGetGpuInstanceId(self, h: FakeGpu) -> int:
        self._count("nvmlDeviceGetGpuInstanceId")
        return h.gpu_instance_id

    # -- metrics -------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> SimpleNamespace:
        self._count("nvmlDeviceGetUtilizationRates")
        if h.parent is not None or h.mig_mode:  # as real NVML: no utilization under MIG
            raise NVMLError_NotSupported()
        return SimpleNamespace(gpu=int(h.read("util", h.util)), memory=0)

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        self._count("nvmlDeviceGetPowerUsage")
        if h.parent is not None:
            raise NVMLError_NotSupported()
        return int(h.read("power", h.power_mw))

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGpu) -> int:
        self._count("nvmlDeviceGetTotalEnergyConsumption")
        if h.parent is not None or h.energy_mj is None:
            raise NVMLError_NotSupported()
        return int(h.read("energy", h.energy_mj))

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        self._count("nvmlDeviceGetEnforcedPowerLimit")
        if h.parent is not None:
            raise NVMLError_NotSupported()
        return int(h.read("power_limit", h.power_limit_mw))

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, clock_type: int) -> int:
        self._count("nvmlDeviceGetClockInfo")
        return int(h.read("sm_clock", h.sm_clock_mhz))

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu, version: Any = None) -> SimpleNamespace:
        self._count("nvmlDeviceGetMemoryInfo")
        used = int(h.read("memory", h.mem_used))
        return SimpleNamespace(total=h.mem_total, used=used, free=h.mem_total - used)

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        self._count("nvmlDeviceGetTemperature")
        return int(h.read("temperature", h.temperature_c))

    def nvmlDeviceGetSamples(self, h: FakeGpu, sampling_type: int, last_seen: int
                             ) -> tuple[int, list[SimpleNamespace]]:
        """(value type, samples newer than ``last_seen`` µs), like pynvml's wrapper."""
        self._count("nvmlDeviceGetSamples")
        if "samples" in h.fail:
            raise h.fail["samples"]
        buf = h.samples.get(sampling_type)
        if buf is None or h.parent is not None:
            raise NVMLError_NotSupported()
        new = [(ts, v) for ts, v in buf if ts > last_seen]
        if not new:
            raise NVMLError_NotFound()
        return NVML_VALUE_TYPE_UNSIGNED_INT, [
            SimpleNamespace(timeStamp=ts, sampleValue=SimpleNamespace(
                uiVal=v, ulVal=v, ullVal=v, dVal=float(v), sllVal=v, siVal=v, usVal=v))
            for ts, v in new]

    def nvmlDeviceGetFieldValues(self, h: FakeGpu, field_ids: list) -> list[SimpleNamespace]:
        self._count("nvmlDeviceGetFieldValues")
        out = []
        for fid in field_ids:
            ret, val = NVML_SUCCESS, 0
            try:
                if fid == NVML_FI_DEV_POWER_INSTANT and h.parent is None:
                    src = h.power_instant_mw if h.power_instant_mw is not None else h.power_mw
                    val = int(h.read("power_instant", src))
                else:
                    ret = NVML_ERROR_NOT_SUPPORTED
            except NVMLError as exc:
                ret = exc.value
            out.append(SimpleNamespace(
                fieldId=fid, scopeId=0, timestamp=0, latencyUsec=0,
                valueType=NVML_VALUE_TYPE_UNSIGNED_INT, nvmlReturn=ret,
                value=SimpleNamespace(dVal=float(val), uiVal=val, ulVal=val, ullVal=val,
                                      sllVal=val, siVal=val, usVal=val)))
        return out


def fake_gpus(n: int = 1, *, util: Any = 0, power_mw: Any = 70_000,
              energy_mj: Any = None, instant: bool = True, name: str = "NVIDIA H100 80GB HBM3",
              **kw: Any) -> FakeNvml:
    """A FakeNvml with ``n`` GPUs.  ``util`` / ``power_mw`` / ``energy_mj`` are one
    scripted value for all GPUs or a list of per-GPU scripted values when given as a
    tuple (e.g. ``util=([10, 90], [5, 50])``).  ``instant=False`` makes the
    NVML_FI_DEV_POWER_INSTANT field unsupported (averaged power only)."""
    def per(v: Any, i: int) -> Any:
        if isinstance(v, tuple):
            v = v[i]
        return list(v) if isinstance(v, list) else v

    gpus = []
    for i in range(n):
        g = FakeGpu(index=i, name=name, util=per(util, i), power_mw=per(power_mw, i),
                    energy_mj=per(energy_mj, i), **kw)
        if not instant:
            g.unsupported.add("power_instant")
        gpus.append(g)
    return FakeNvml(gpus)


def library_not_found() -> FakeNvml:
    """A FakeNvml whose nvmlInit raises NVMLError_LibraryNotFound (no driver installed)."""
    return FakeNvml(init_error=NVMLError_LibraryNotFound())


def driver_not_loaded() -> FakeNvml:
    """A FakeNvml whose nvmlInit raises NVMLError_DriverNotLoaded."""
    return FakeNvml(init_error=NVMLError_DriverNotLoaded())


class FakeClock:
    """A clock the test sets (``clock.t = 1.5``): the samplers' and readers' ``clock``."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def run_ticks(sampler, clock: FakeClock, steps, dt: float = 0.1) -> None:
    """``sampler.tick()`` at each step of ``steps`` (``clock.t`` = step x ``dt`` s)."""
    for i in steps:
        clock.t = i * dt
        sampler.tick()
