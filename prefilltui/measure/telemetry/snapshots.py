"""Telemetry's data types: the frozen snapshots handed to the UI and the mutable
per-device state a sampler thread keeps, with the history and retention spans.

``DeviceSnapshot`` (one device at one tick), ``TelemetrySnapshot`` (every device at
one moment), ``DeviceState`` (what ``base.Sampler`` and its subclasses fill),
``METRICS`` (the ``na`` keys) and ``describe_error``.  A value that was not measured
is ``None`` with its reason in ``na``, never 0.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from prefilltui.measure.telemetry.samples import SampleRing
from prefilltui.model.types import DeviceStatus, TelemetryKind, UtilKind

__all__ = ["DeviceSnapshot", "TelemetrySnapshot", "DeviceState", "describe_error",
           "HISTORY_S", "RETAIN_S", "METRICS", "UTIL_WORDS"]

#: Seconds of history handed to the UI in each snapshot.
HISTORY_S = 60.0
#: Seconds of samples kept for attribution (a probe window must fit; probes time out at 120 s).
RETAIN_S = 600.0


#: What each utilization reading measures, in the words a gauge uses (short) and the
#: help/docs use (long).  Sources: NVML reference (nvmlUtilization_t.gpu), the kernel's
#: amdgpu_pm.c (DOC: gpu_busy_percent), amdsmi's py-interface README
#: (amdsmi_get_gpu_activity), the kernel's xe_gt_idle.c (DOC: Xe GT Idle) and i915's
#: rc6_residency_ms, psutil.cpu_times.
UTIL_WORDS: dict[str, tuple[str, str]] = {
    "kernel_active": ("util", "share of the last sample period in which a kernel ran (NVML)"),
    "busy_percent": ("busy", "the SMU firmware's busy percent of the IP cores (amdgpu "
                     "gpu_busy_percent)"),
    "gfx_activity": ("gfx", "graphics/compute engine activity (amdsmi gfx_activity)"),
    "awake_share": ("awake", "share of wall time the GT was out of its RC6/C6 idle state "
                    "(an upper bound on busy: the GT stays awake a little after work)"),
    "cpu_busy": ("util", "busy share of all CPU cores (psutil)"),
}

#: The metric names used as ``DeviceSnapshot.na`` keys.
METRICS = ("util", "power", "energy", "power_limit", "sm_clock", "memory", "temperature")


def describe_error(exc: BaseException) -> str:
    """One plain line for an exception (NVML errors read "GPU is lost" etc.)."""
    text = str(exc).strip()
    name = type(exc).__name__
    if name.startswith("NVMLError") or isinstance(exc, RuntimeError):
        return text or name
    return f"{name}: {text}" if text else name


@dataclass(frozen=True, slots=True)
class DeviceSnapshot:
    """One device at one tick (GPU or the CPU package).

    label: "GPU 0" (NVML index), "GPU 0 MIG 1" (GPU instance 1 of GPU 0) or "CPU".
    state: "ok" | "error" (a query failed mid-run; retried with back-off 1, 2, 4 ..
    30 s; ``error`` says why, and every metric is then None with
    na[name] = "error: <why> (retrying)", so stale values never show as current).
    Every metric is ``None`` when not measured, with the reason in ``na[name]`` (keys:
    "util", "power", "power_limit", "energy", "sm_clock", "memory", "temperature").
    power_w: instantaneous where the device supports it, else averaged
    (``power_averaged`` True; NVML's nvmlDeviceGetPowerUsage averages over ~1 s on
    Ampere and newer boards; the CPU's RAPL power is averaged over one sample period).
    power_scope: what the power covers: "board", "whole GPU" (a MIG slice shows its
    parent GPU's power), "CPU package" (RAPL, all packages summed).
    energy_j: joules since the sampler opened (energy counter where supported, else
    None).  tensor_active_pct: share of time the tensor pipes were active (dcgm-exporter's
    DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, remote pages only; None elsewhere).  history:
    ``(t_perf, util_pct|None, power_w|None)`` for the last ~60 s.
    vendor: "NVIDIA" | "AMD" | "Intel" (None: the CPU or a process).  source: where
    the readings come from ("NVML", "amdgpu sysfs", "amdsmi", "xe sysfs", "i915 sysfs",
    "dcgm-exporter", "amd-device-metrics-exporter", "psutil", ...).  util_kind: what
    ``util_pct`` measures (``UTIL_WORDS``).  util_window_s / power_window_s: seconds one
    reading covers (None: not documented by the source); power_averaged says whether
    ``power_w`` is an average (True) or an instantaneous reading (False).
    """

    label: str
    name: str
    index: int | None = None
    uuid: str | None = None
    state: DeviceStatus = "ok"
    error: str | None = None
    t: float | None = None
    util_pct: float | None = None
    power_w: float | None = None
    power_averaged: bool | None = None
    power_scope: str | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None
    sm_clock_mhz: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temperature_c: float | None = None
    tensor_active_pct: float | None = None
    mig: bool = False
    na: dict[str, str] = field(default_factory=dict)
    history: tuple[tuple[float, float | None, float | None], ...] = ()
    vendor: str | None = None
    source: str | None = None
    util_kind: UtilKind | None = None
    util_window_s: float | None = None
    power_window_s: float | None = None

    def reason(self, name: str) -> str | None:
        """Why ``name`` is N/A (None when it has a value or no reason is known)."""
        return self.na.get(name)


@dataclass(frozen=True, slots=True)
class TelemetrySnapshot:
    """Everything the UI shows about telemetry at one moment.

    kind: "gpu" | "cpu" | "none".  available: False when nothing can be sampled.
    reason: one plain line on why this kind was chosen or why nothing is available
    (e.g. "NVML unavailable: NVML Shared Library Not Found — showing CPU"), else None.
    """

    kind: TelemetryKind
    available: bool
    reason: str | None = None
    devices: tuple[DeviceSnapshot, ...] = ()
    t: float | None = None
    hz: float = 0.0
    running: bool = False


@dataclass(slots=True)
class DeviceState:
    """Mutable per-device state owned by the sampler thread (subclasses fill it).

    ring/hist: samples for attribution and for the UI history; ``last``: the latest
    values keyed by ``DeviceSnapshot`` field name (plus "energy_counter_j");
    ``extra``: what a subclass keeps per device (NVML handles, a psutil.Process,
    "display_only", "power_group").
    """

    label: str
    name: str
    ring: SampleRing
    hist: deque = field(default_factory=deque)  # (t, util, power) for the last history_s
    index: int | None = None
    uuid: str | None = None
    state: DeviceStatus = "ok"
    error: str | None = None
    na: dict[str, str] = field(default_factory=dict)
    last: dict[str, Any] = field(default_factory=dict)
    power_averaged: bool | None = None
    power_scope: str | None = None
    mig: bool = False
    vendor: str | None = None
    source: str | None = None
    util_kind: UtilKind | None = None
    util_window_s: float | None = None
    power_window_s: float | None = None
    energy0: float | None = None  # first energy counter reading (J)
    retry_at: float = 0.0
    backoff_s: float = 0.0
    slow_t: float | None = None  # time of the last reading of the slow fields (s)
    extra: dict[str, Any] = field(default_factory=dict)  # subclass handles etc.
