"""GPU/CPU telemetry: frozen snapshots, bounded sample rings and per-probe attribution.

``make_sampler(gpus=None, hz=10.0, nvml_module=None) -> Sampler`` picks the sampler:
an NVML ``GpuSampler`` (``nvml.py``) when NVML initialises and has devices, else AMD
GPUs (``amd.py``: amdsmi when installed with ROCm, else the kernel's amdgpu sysfs),
else Intel GPUs (``intel.py``: xe/i915 sysfs), both as a ``readers.ReaderSampler``,
else a ``CpuSampler`` (``cpu.py``: psutil utilization + Linux RAPL package power), else
a ``NullSampler``.  ``--gpus amd:0`` / ``intel:0`` / ``nvidia:0`` picks the vendor
(``vendors.py``).  Why the choice was made is in ``snapshot().reason``.

Layout: ``snapshots.py`` (DeviceState, the snapshots), ``base.py`` (Sampler) and
``samples.py`` (rings, window statistics) are imported by the leaves ``nvml.py``,
``cpu.py`` and ``readers.py`` (with its readers ``amd.py``, ``intel.py`` over
``sysfs.py``); only this module and ``vendors.py`` import the leaves, so nothing
imports in a circle.

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
from prefilltui.measure.telemetry.snapshots import (HISTORY_S, RETAIN_S, UTIL_WORDS,
                                                    DeviceSnapshot, DeviceState,
                                                    TelemetrySnapshot, describe_error)
from prefilltui.measure.telemetry.readers import ReaderSampler
from prefilltui.measure.telemetry.sysfs import SYS_ROOT
from prefilltui.measure.telemetry.vendors import (GpuUnavailable, open_amd, open_intel,
                                                  others_note, split_vendor)
from prefilltui.measure.telemetry.remote import (
    NO_SOURCE, RemoteGpuSampler, choose_gpu_source, is_local, local_addresses, poll_hz,
)

__all__ = [
    "DeviceSnapshot", "TelemetrySnapshot", "DeviceState", "Sampler", "NullSampler", "GpuSampler",
    "CpuSampler", "RaplReader", "NvmlUnavailable", "SampleRing", "WindowStats", "window_stats",
    "parse_gpu_selection", "describe_error", "make_sampler", "HISTORY_S", "RETAIN_S",
    "ReaderSampler", "UTIL_WORDS", "NO_SOURCE", "RemoteGpuSampler", "choose_gpu_source",
    "is_local", "local_addresses", "poll_hz", "split_vendor",
]


def make_sampler(gpus: str | None = None, hz: float = 10.0, nvml_module: Any = None, *,
                 clock: Callable[[], float] | None = None,
                 env: dict[str, str] | None = None, rapl_root: str | None = None,
                 cpu_fallback: bool = True, processes: dict[str, int] | None = None,
                 sys_root: str | None = None, amdsmi_module: Any = None) -> Sampler:
    """Pick the sampler: NVML GPUs when NVML initialises and a GPU is selected, else
    AMD GPUs (amdsmi, else amdgpu sysfs), else Intel GPUs (xe/i915 sysfs), else the
    CPU (psutil + RAPL), recording why in ``snapshot().reason``.  Not started.

    gpus: "0,1" NVML indices or UUIDs (overrides CUDA_VISIBLE_DEVICES), or the same
    indices of AMD/Intel GPUs when those are sampled; a vendor prefix ("amd:0,1",
    "intel:0", "nvidia:0", "amd") samples only that vendor.  None = all visible GPUs
    of the first vendor found.  nvml_module: a ``pynvml``-shaped module (tests inject
    a fake; default imports nvidia-ml-py's ``pynvml``).  env: environment for
    CUDA_VISIBLE_DEVICES (default ``os.environ``).  rapl_root: the powercap directory
    (tests).  sys_root: the sysfs root for AMD/Intel GPUs (default "/sys"; tests
    pass a recorded tree).  amdsmi_module: an amdsmi-shaped module (tests inject a
    fake; default imports ``amdsmi`` when installed; False: do not try amdsmi).
    processes: {name: pid} of local processes to show next to "CPU" when the CPU
    fallback is used (e.g. ``{"llama-server": server.pid}`` for the demo); a pid that
    cannot be read is left out and said in the reason.

    Raises:
        ValueError: ``gpus`` is malformed or names a GPU the vendor does not have.
    """
    root = sys_root or SYS_ROOT
    vendor, sel = split_vendor(gpus)
    whys: list[str] = []
    if vendor in (None, "nvidia"):
        try:
            gpu = GpuSampler.open(gpus=sel, hz=hz, nvml_module=nvml_module, clock=clock,
                                  env=env)
        except NvmlUnavailable as exc:
            whys.append(str(exc))
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 - an NVML surprise must not end the app
            whys.append(f"NVML unavailable: {describe_error(exc)}")
        else:
            note = others_note(root, "NVIDIA")
            if note:
                gpu.reason = f"{gpu.reason}; {note}" if gpu.reason else note
            return gpu
    for name, opener in (("amd", lambda: open_amd(sel, hz, root=root, clock=clock,
                                                  amdsmi_module=amdsmi_module)),
                         ("intel", lambda: open_intel(sel, hz, root=root, clock=clock))):
        if vendor not in (None, name):
            continue
        try:
            other = opener()
        except GpuUnavailable as exc:
            if str(exc):
                whys.append(str(exc))
            elif vendor == name:
                whys.append(f"no {name.upper() if name == 'amd' else 'Intel'} GPU in "
                            f"{root}/class/drm")
            continue
        note = others_note(root, other.devices[0].vendor or "")
        if not (note and "NVIDIA" in note):  # NVML's failure matters only beside an
            whys = [w for w in whys if not w.startswith("NVML")]  # NVIDIA card
        if whys and vendor is None:
            other.reason = "; ".join(whys + ([other.reason] if other.reason else []))
        if note:
            other.reason = f"{other.reason}; {note}" if other.reason else note
        return other
    why = "; ".join(whys) or "no GPU"
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
