"""The driver's buffers of recent NVML samples: ``DriverSamples``, a part
``nvml.GpuSampler`` owns (given the NVML module and its clocks).

The driver's buffer of recent samples (nvmlDeviceGetSamples; "CPU timestamp in
microseconds", values as the union member named by the returned value type, unsigned
int for utilization in percent and power in mW; NVML_ERROR_NOT_FOUND when nothing is
newer than ``lastSeenTimeStamp``) is read each tick where supported: utilization
samples go into the history and the rings at their own timestamps, so a prefill
shorter than the polling interval still leaves its mark; instantaneous power samples
raise a tick's power to the highest one seen in it.  Measured on an H200 (driver 580):
utilization samples 0.2 s apart, power samples 20 ms apart (about 2.4 s kept),
timestamps on the wall clock.

Also home of the NVML error and value helpers both modules use.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable

from prefilltui.model.pacing import NVML_WINDOW_MAX_S
from prefilltui.measure.telemetry.snapshots import DeviceState

#: NVML's shortest utilization sample period is 1/6 s (nvmlUtilization_t): at most this
#: many driver samples a second join each device's polled rows.
DRIVER_UTIL_HZ = 6.0
#: A driver timestamp is placed on our time line through the clock it is within this
#: many seconds of (the wall clock, else CLOCK_MONOTONIC); else the buffer is not used.
CLOCK_MATCH_S = 120.0


class DriverSamples:
    """nvmlDeviceGetSamples for one sampler: ``nv`` (the pynvml module), ``clock`` (the
    sampler's time line) and ``wall`` (the clock the driver stamps samples with).  Its
    state per device is kept on the device (``dev.extra["buffers"]``:
    {"util"|"power": {"kind", "handle", "last"}}; ``dev.extra["util_t"]``: the time of
    the newest utilization sample stored)."""

    def __init__(self, nv: Any, clock: Callable[[], float], wall: Callable[[], float]) -> None:
        self.nv, self.clock, self.wall = nv, clock, wall

    def probe(self, dev: DeviceState, use: dict[str, Callable[[], Any]]) -> None:
        """Which sample buffers to read each tick: utilization where it is read at all,
        power where the board gives instantaneous power.  Starts after the newest
        sample already kept (no back-fill) and measures the utilization period."""
        x, nv = dev.extra, self.nv
        x["buffers"] = {}
        if not hasattr(nv, "nvmlDeviceGetSamples"):
            return
        wanted = []
        if "util" in use:
            wanted.append(("util", getattr(nv, "NVML_GPU_UTILIZATION_SAMPLES", None), "h"))
        if "power" in use and dev.power_averaged is False:
            wanted.append(("power", getattr(nv, "NVML_TOTAL_POWER_SAMPLES", None), "parent"))
        for name, kind, handle in wanted:
            if kind is None:
                continue
            try:
                vt, samples = nv.nvmlDeviceGetSamples(x[handle], kind, 0)
            except Exception as exc:  # noqa: BLE001
                if _not_found(exc):  # supported, nothing buffered yet
                    x["buffers"][name] = {"kind": kind, "handle": handle, "last": 0}
                elif not _capability_error(exc):
                    raise
                continue
            ts = [int(smp.timeStamp) for smp in samples]
            if ts and self.offset(ts[-1]) is None:
                continue  # timestamps on a clock we cannot place: keep polling
            x["buffers"][name] = {"kind": kind, "handle": handle, "last": max(ts, default=0)}
            if name == "util" and len(ts) >= 3:
                x["util_window_s"] = statistics.median(
                    (b - a) / 1e6 for a, b in zip(ts, ts[1:]))

    def offset(self, ts_us: int) -> float | None:
        """Seconds to subtract from a driver timestamp to get ``clock()`` time, through
        the clock the timestamp is close to (wall, else monotonic); None: neither."""
        ts = ts_us / 1e6
        now = self.clock()
        for ref in (self.wall, time.monotonic):
            r = ref()
            if abs(ts - r) < CLOCK_MATCH_S:
                return r - now
        return None

    def read(self, dev: DeviceState, name: str, now: float) -> list[tuple[float, float]]:
        """New samples of one buffer as (clock() time, value), oldest first, never later
        than ``now``.  A buffer that stops being supported is dropped (polling goes on)."""
        x = dev.extra
        buf = x["buffers"][name]
        try:
            vt, samples = self.nv.nvmlDeviceGetSamples(x[buf["handle"]], buf["kind"],
                                                       buf["last"])
        except Exception as exc:  # noqa: BLE001
            if _not_found(exc):
                return []
            if _capability_error(exc):
                del x["buffers"][name]
                return []
            raise
        member = _value_members(self.nv).get(int(vt), "uiVal")
        out = []
        for smp in samples:
            ts = int(smp.timeStamp)
            if ts <= buf["last"]:
                continue
            buf["last"] = ts
            off = self.offset(ts)
            if off is None:
                continue
            out.append((min(ts / 1e6 - off, now), float(getattr(smp.sampleValue, member))))
        return out


def buffered_util(devices: list[DeviceState]) -> bool:
    """Whether any device's utilization is read from the driver's buffer."""
    return any("util" in (d.extra.get("buffers") or {}) for d in devices)


def util_covered(devices: list[DeviceState], t: float) -> bool:
    """On every device read from the driver's buffer, a utilization sample at or after
    ``t`` is stored (the one covering a probe's tail)."""
    return all(d.extra.get("util_t", -math.inf) >= t for d in devices
               if "util" in (d.extra.get("buffers") or {}))


def sensor_window(devices: list[DeviceState], period_s: float) -> float | None:
    """Seconds one reading averages over, the longest of any device (see
    model/pacing.py): utilization from the driver's buffer, its measured sample
    period, else NVML's documented worst case (1 s); averaged power 1 s; None without
    devices."""
    if not devices:
        return None
    w = period_s
    for d in devices:
        x = d.extra
        use = x.get("use") or {}
        if "util" in use:
            w = max(w, x.get("util_window_s", NVML_WINDOW_MAX_S)
                    if "util" in x.get("buffers", {}) else NVML_WINDOW_MAX_S)
        if "power" in use and d.power_averaged:
            w = max(w, NVML_WINDOW_MAX_S)
    return w


#: NVML errors that mean "this GPU/driver cannot report that", not "the GPU failed".
_CAPABILITY_ERRORS = ("NVMLError_NotSupported", "NVMLError_NoPermission",
                      "NVMLError_FunctionNotFound", "NVMLError_NoData")


def _not_found(exc: BaseException) -> bool:
    """NVML_ERROR_NOT_FOUND (6): nvmlDeviceGetSamples has nothing newer to return."""
    return any(c.__name__ == "NVMLError_NotFound" for c in type(exc).__mro__) or (
        type(exc).__name__.startswith("NVMLError") and getattr(exc, "value", None) == 6)


def _capability_error(exc: BaseException) -> bool:
    return any(c.__name__ in _CAPABILITY_ERRORS for c in type(exc).__mro__) or isinstance(
        exc, (AttributeError, NotImplementedError))


def _value_members(nv: Any) -> dict[int, str]:
    """NVML_VALUE_TYPE_* -> the c_nvmlValue_t union member holding that type."""
    return {getattr(nv, "NVML_VALUE_TYPE_DOUBLE", 0): "dVal",
            getattr(nv, "NVML_VALUE_TYPE_UNSIGNED_INT", 1): "uiVal",
            getattr(nv, "NVML_VALUE_TYPE_UNSIGNED_LONG", 2): "ulVal",
            getattr(nv, "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", 3): "ullVal",
            getattr(nv, "NVML_VALUE_TYPE_SIGNED_LONG_LONG", 4): "sllVal",
            getattr(nv, "NVML_VALUE_TYPE_SIGNED_INT", 5): "siVal",
            getattr(nv, "NVML_VALUE_TYPE_UNSIGNED_SHORT", 6): "usVal"}
