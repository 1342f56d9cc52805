"""GPU/CPU telemetry: frozen snapshots, bounded sample rings and per-probe attribution.

``make_sampler(gpus=None, hz=10.0, nvml_module=None) -> Sampler`` picks the sampler:
an NVML ``GpuSampler`` (``nvml.py``) when NVML initialises and has devices, else a
``CpuSampler`` (``cpu.py``: psutil utilization + Linux RAPL package power), else a
``NullSampler``.  Why the choice was made is in ``snapshot().reason``.

Layout: ``snapshots.py`` (DeviceState, the snapshots), ``base.py`` (Sampler) and
``samples.py`` (rings, window statistics) are imported by the leaves ``nvml.py`` and
``cpu.py``; only this module imports the leaves, so nothing imports in a circle.

Honesty rules (STYLE.md pattern 2): a value that was not measured is ``None`` and its
reason is in ``DeviceSnapshot.na[field]``, never 0.  Units: W, J, %, MHz, bytes,
degrees C; times are ``time.perf_counter()`` seconds.
"""

from __future__ import annotations

from typing import Any, Callable

from prefilltui.measure.telemetry.base import NullSampler, Sampler
from prefilltui.measure.telemetry.cpu import CpuSampler, RaplReader
from prefilltui.measure.telemetry.nvml import GpuSampler, NvmlUnavailable, parse_gpu_selection
from prefilltui.measure.telemetry.samples import SampleRing, WindowStats, window_stats
from prefilltui.measure.telemetry.snapshots import (HISTORY_S, RETAIN_S, DeviceSnapshot,
                                                    DeviceState, TelemetrySnapshot,
                                                    describe_error)

__all__ = ["DeviceSnapshot", "TelemetrySnapshot", "DeviceState", "Sampler", "NullSampler",
           "GpuSampler", "CpuSampler", "RaplReader", "NvmlUnavailable", "SampleRing",
           "WindowStats", "window_stats", "parse_gpu_selection", "describe_error",
           "make_sampler", "HISTORY_S", "RETAIN_S"]


def make_sampler(gpus: str | None = None, hz: float = 10.0, nvml_module: Any = None, *,
                 clock: Callable[[], float] | None = None,
                 env: dict[str, str] | None = None, rapl_root: str | None = None,
                 cpu_fallback: bool = True, processes: dict[str, int] | None = None
                 ) -> Sampler:
    """Pick the sampler: NVML GPUs when NVML initialises and a GPU is selected, else
    the CPU (psutil + RAPL), recording why in ``snapshot().reason``.  Not started.

    gpus: "0,1" NVML indices or UUIDs (overrides CUDA_VISIBLE_DEVICES), None = all
    visible.  nvml_module: a ``pynvml``-shaped module (tests inject a fake; default
    imports nvidia-ml-py's ``pynvml``).  env: environment for CUDA_VISIBLE_DEVICES
    (default ``os.environ``).  rapl_root: the powercap directory (tests).
    processes: {name: pid} of local processes to show next to "CPU" when the CPU
    fallback is used (e.g. ``{"llama-server": server.pid}`` for the demo); a pid that
    cannot be read is left out and said in the reason.

    Raises:
        ValueError: ``gpus`` is malformed or names a GPU NVML does not have.
    """
    try:
        return GpuSampler.open(gpus=gpus, hz=hz, nvml_module=nvml_module, clock=clock,
                               env=env)
    except NvmlUnavailable as exc:
        why = str(exc)
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - an NVML surprise must not end the app
        why = f"NVML unavailable: {describe_error(exc)}"
    if gpus is not None and "--gpus" not in why:
        why += f" (--gpus {gpus} ignored)"
    if not cpu_fallback:
        return NullSampler(hz, clock=clock, reason=why)
    try:
        cpu = CpuSampler(hz, clock=clock, reason=f"{why} — showing CPU",
                         rapl_root=rapl_root)
        for pname, pid in (processes or {}).items():
            try:
                cpu.add_process(pname, pid)
            except Exception as exc:  # noqa: BLE001 - psutil.NoSuchProcess, AccessDenied
                cpu.reason = f"{cpu.reason}; {pname} (pid {pid}) not sampled: {describe_error(exc)}"
        return cpu
    except Exception as exc:  # noqa: BLE001 - psutil missing or /proc unreadable
        return NullSampler(hz, clock=clock, reason=f"{why}; CPU sampling failed: {exc}")
