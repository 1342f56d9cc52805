"""A sampler over per-device readers: AMD (amdgpu sysfs or amdsmi) and Intel (xe/i915
sysfs) GPUs, each device a small object that owns its files or handle and its counters.

A reader (``GpuReader``) says once what it measures (vendor, source, ``util_kind``,
whether power is averaged and over what window, and ``na``: the metrics it cannot
report, with why) and returns one tick's values from ``read(now)``; ``ReaderSampler``
keeps the rings, the history and the error/back-off of ``base.Sampler`` for them.

``EnergyCounter`` turns a driver's cumulative energy counter into joules since the
sampler opened and a power over the last interval; a counter that goes backwards
(wrapped, or reset with the GPU or driver) gives no power for that interval and is
re-based, never a negative or a huge figure; so does a step that implies more than
``MAX_POWER_W``.  ``plausible`` turns a reading no device can have into no reading.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Protocol

from prefilltui.measure.telemetry.base import Sampler
from prefilltui.measure.telemetry.snapshots import DeviceState, describe_error
from prefilltui.model.pacing import NVML_WINDOW_MAX_S
from prefilltui.model.types import TelemetryKind, UtilKind

__all__ = ["GpuReader", "ReaderSampler", "EnergyCounter", "SLOW_PERIOD_S", "MAX_POWER_W",
           "READING_RANGES", "plausible", "reading"]

#: Power limit, memory and temperature are read about once a second (as for NVML).
SLOW_PERIOD_S = 1.0
#: The most power one device may draw (W): five times the largest board today (MI355X,
#: B300: 1.4 kW; an MI300A APU counts its CPU too).  A reading past it, or an energy
#: counter step implying it, is a corrupt read or a counter reset, not a measurement.
MAX_POWER_W = 10_000.0
#: The most memory one device may report (bytes): 1 PiB (an MI355X has 288 GB).
MAX_MEM_BYTES = 2.0**50
#: What each reading of ``GpuReader.read`` may be, in its unit (inclusive); a value
#: outside (NaN, inf, a busy percent of 250, -150 W, 1e305 degrees) is no reading for
#: that tick, as a driver's "N/A" is, never a figure on the gauges or a probe.
READING_RANGES: dict[str, tuple[float, float]] = {
    "util": (0.0, 100.0), "power": (0.0, MAX_POWER_W), "power_limit": (0.0, MAX_POWER_W),
    "mem_used": (0.0, MAX_MEM_BYTES), "mem_total": (0.0, MAX_MEM_BYTES),
    "temperature": (-100.0, 250.0),
}


def reading(key: str, v: float | None) -> float | None:
    """``v`` when a device can read it as ``key`` (``READING_RANGES``, finite), else None."""
    if v is None:
        return None
    lo, hi = READING_RANGES.get(key, (-math.inf, math.inf))
    return v if math.isfinite(v) and lo <= v <= hi else None


def plausible(vals: dict[str, float | None]) -> dict[str, float | None]:
    """``vals`` with every reading outside ``READING_RANGES`` (or not finite) as None."""
    return {k: reading(k, v) for k, v in vals.items()}


class GpuReader(Protocol):
    """One GPU's readings.  ``read(now)`` returns the keys it has of "util" (%),
    "power" (W), "energy" (J since open, monotonic), "power_limit" (W), "mem_used" /
    "mem_total" (bytes), "temperature" (degrees C); ``slow`` asks for the once-a-second
    ones too.  Raises on a failure that may pass (the device goes to "error" and is
    retried with back-off); a metric that stops being supported moves to ``na``."""

    label: str
    name: str
    index: int
    pci: str
    vendor: str
    source: str
    util_kind: UtilKind
    util_window_s: float | None
    power_averaged: bool | None
    power_window_s: float | None
    power_scope: str
    na: dict[str, str]
    #: True when the device reports no power of its own (MI250's second die)
    no_own_power: bool

    def read(self, now: float, slow: bool) -> dict[str, float | None]: ...

    def close(self) -> None: ...


class EnergyCounter:
    """A cumulative energy counter (any unit; ``scale`` converts one count to J).

    ``update(raw, now)`` -> (joules since the first reading, power in W over the
    interval since the last reading, or None on the first reading or when the counter
    went backwards).
    """

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.total_j = 0.0
        self._prev: tuple[float, float] | None = None  # (raw, t)

    def update(self, raw: float, now: float) -> tuple[float, float | None]:
        if not math.isfinite(raw) or raw < 0:  # no counter reads that: skipped, the
            return self.total_j, None          # next good reading counts from the last
        prev, self._prev = self._prev, (raw, now)
        if prev is None:
            return self.total_j, None
        d = raw - prev[0]
        dt = now - prev[1]
        # wrapped or reset (backwards), or a step no device draws (``MAX_POWER_W``: a
        # corrupt read, a counter re-based): this interval's energy is unknown
        if d < 0 or d * self.scale > MAX_POWER_W * max(dt, 0.0) + 1.0:
            return self.total_j, None
        self.total_j += d * self.scale
        return self.total_j, (d * self.scale / dt if dt > 0 else None)


class ReaderSampler(Sampler):
    """Samples ``readers`` (one device each, in order) at ``hz``.

    Devices are labelled by the reader ("GPU 0" ...) and carry its vendor, source
    and what it measures.  A device that reports no power of its own (MI250's second
    die) is put in the power group of the device before it, whose reading covers the
    package: the sum over a probe window counts that reading once.
    """

    kind: TelemetryKind = "gpu"

    def __init__(self, readers: list[GpuReader], hz: float = 10.0, *,
                 clock: Callable[[], float] | None = None, reason: str | None = None,
                 source: str = "sysfs", closer: Callable[[], Any] | None = None) -> None:
        super().__init__(hz, clock=clock, reason=reason)
        self.source = source
        self._closer = closer
        prev: DeviceState | None = None
        for r in readers:
            dev = self._new_dev(r.label, r.name, index=r.index)
            dev.vendor, dev.source, dev.util_kind = r.vendor, r.source, r.util_kind
            dev.util_window_s, dev.power_window_s = r.util_window_s, r.power_window_s
            dev.power_averaged, dev.power_scope = r.power_averaged, r.power_scope
            dev.na.update(r.na)
            group = r.pci
            if r.no_own_power and prev is not None and not prev.extra["reader"].no_own_power:
                group = prev.extra["power_group"]
            dev.extra.update(reader=r, power_group=group)
            self.devices.append(dev)
            prev = dev
        now = self.clock()
        for dev in self.devices:  # the first reading (counters need a start)
            try:
                self._sample(dev, now)
            except Exception as exc:  # noqa: BLE001 - said in the device's state
                self._mark_error(dev, now, describe_error(exc))

    def _sample(self, dev: DeviceState, now: float) -> None:
        r: GpuReader = dev.extra["reader"]
        slow = self._slow_due(dev, now, SLOW_PERIOD_S) or dev.state == "error"
        vals = plausible(r.read(now, slow))
        dev.na.clear()
        dev.na.update(r.na)
        energy = vals.get("energy")
        if energy is not None and dev.energy0 is None:
            dev.energy0 = energy
        last = dev.last
        last.update(t=now, util_pct=vals.get("util"), power_w=vals.get("power"),
                    energy_counter_j=energy)
        if slow:
            last.update(power_limit_w=vals.get("power_limit"),
                        mem_used_bytes=_int(vals.get("mem_used")),
                        mem_total_bytes=_int(vals.get("mem_total")),
                        temperature_c=vals.get("temperature"))
        self._append(dev, now, vals.get("util"), vals.get("power"), energy)

    @property
    def sensor_window_s(self) -> float | None:
        """Seconds one reading averages over, the longest of any device: its own
        window where the source documents one, else NVML's documented worst case (1 s)
        for a firmware average whose window is not documented."""
        if not self.devices:
            return None
        w = self.period_s
        for d in self.devices:
            if "util" not in d.na:
                w = max(w, d.util_window_s if d.util_window_s is not None
                        else NVML_WINDOW_MAX_S)
            if "power" not in d.na and d.power_averaged:
                w = max(w, d.power_window_s if d.power_window_s is not None
                        else NVML_WINDOW_MAX_S)
        return w

    def _close(self) -> None:
        for d in self.devices:
            try:
                d.extra["reader"].close()
            except Exception:  # noqa: BLE001 - shutting down
                pass
        if self._closer is not None:
            self._closer()


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)
