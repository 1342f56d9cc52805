"""GPU readings from the metrics pages a fleet already serves: NVIDIA's dcgm-exporter,
nvitop's exporter and AMD's device-metrics-exporter.  Parsing only (the fetching is
``measure/telemetry/remote.py``).

dcgm-exporter (github.com/NVIDIA/dcgm-exporter, etc/default-counters.csv), one series
per GPU labelled ``gpu`` (index), ``UUID``, ``modelName`` (and ``GPU_I_ID`` for a MIG
instance):

  DCGM_FI_DEV_GPU_UTIL                GPU utilization, %
  DCGM_FI_DEV_POWER_USAGE             power draw, W
  DCGM_FI_PROF_PIPE_TENSOR_ACTIVE     tensor pipe active, ratio 0..1 (profiling metrics,
                                      where enabled)
  DCGM_FI_DEV_SM_CLOCK                SM clock, MHz
  DCGM_FI_DEV_FB_USED / _FB_FREE      frame buffer used / free, MiB
  DCGM_FI_DEV_GPU_TEMP                temperature, °C
  DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION energy since boot, mJ

nvitop's exporter (github.com/XuehaiPan/nvitop, nvitop-exporter/nvitop_exporter/
exporter.py; prometheus_client appends the unit to each name), labelled ``index``,
``devicename``, ``uuid``: ``gpu_utilization_Percentage``, ``gpu_power_usage_W``,
``gpu_power_limit_W``, ``gpu_clock_sm_MHz``, ``gpu_memory_used_MiB``,
``gpu_memory_total_MiB``, ``gpu_temperature_C``.

AMD's device-metrics-exporter (github.com/ROCm/device-metrics-exporter,
docs/configuration/metricslist.md; the names as registered in
pkg/amdgpu/gpuagent/gpuagent_gpu_metrics.go), labelled ``gpu_id``, ``card_model`` (a
board part number), ``card_series`` (the product name, where the exporter's config
enables that label), ``gpu_uuid``, ``gpu_partition_id``:

  gpu_gfx_activity            graphics engine usage, % (0-100)
  gpu_package_power           current socket power, W (MI3xx)
  gpu_power_usage             GPU power usage, W
  gpu_average_package_power   average socket power, W (MI2xx)
  gpu_energy_consumed         accumulated energy, µJ
  gpu_used_vram / gpu_total_vram  MB (MiB: amdsmi divides bytes by 1024 * 1024)
  gpu_junction_temperature / gpu_edge_temperature  °C
  gpu_clock{clock_type="system"}  graphics clock, MHz (one series per clock_index)
In a partitioned GPU (CPX/DPX/QPX) power, energy, temperature and clocks are the
physical GPU's and are reported on partition 0 only ("all other partitions report
0"), and gfx activity likewise ("amdsmi does not return per-partition activity data"):
those readings of the other partitions are None with that reason.  A power of 0 W is
no reading (MI250's second die reports none of its own) and is None too.

A reading the page does not carry is None, never 0.  Only the lines of these names
are parsed (a dcgm page carries many more families; filtering first keeps a 100 kB
page cheap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

PageKind = Literal["dcgm-exporter", "nvitop-exporter", "amd-device-metrics-exporter"]
MIB = 2**20

#: name -> (field, scale to the field's unit); dcgm-exporter's names.
DCGM = {
    "DCGM_FI_DEV_GPU_UTIL": ("util_pct", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active_pct", 100.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_bytes", MIB),
    "DCGM_FI_DEV_FB_FREE": ("mem_free_bytes", MIB),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3),
}
#: nvitop's exporter names (with and without the unit prometheus_client appends).
NVITOP = {
    "gpu_utilization_Percentage": ("util_pct", 1.0),
    "gpu_power_usage_W": ("power_w", 1.0),
    "gpu_power_limit_W": ("power_limit_w", 1.0),
    "gpu_clock_sm_MHz": ("sm_clock_mhz", 1.0),
    "gpu_memory_used_MiB": ("mem_used_bytes", MIB),
    "gpu_memory_total_MiB": ("mem_total_bytes", MIB),
    "gpu_temperature_C": ("temperature_c", 1.0),
}
NVITOP.update({k.rsplit("_", 1)[0]: v for k, v in list(NVITOP.items())})
#: AMD device-metrics-exporter's names (see the module docstring).
AMD = {
    "gpu_gfx_activity": ("util_pct", 1.0),
    "gpu_package_power": ("power_w", 1.0),
    "gpu_power_usage": ("power_usage_w", 1.0),
    "gpu_average_package_power": ("power_avg_w", 1.0),
    "gpu_energy_consumed": ("energy_j", 1e-6),
    "gpu_used_vram": ("mem_used_bytes", MIB),
    "gpu_total_vram": ("mem_total_bytes", MIB),
    "gpu_junction_temperature": ("temperature_c", 1.0),
    "gpu_edge_temperature": ("temp_edge_c", 1.0),
    "gpu_clock": ("clock_mhz", 1.0),
}
#: Readings of a physical AMD GPU that the exporter gives on partition 0 only.
_PHYSICAL = ("util_pct", "power_w", "energy_j", "temperature_c", "sm_clock_mhz")
PARTITION_NA = ("a partition other than 0: the exporter reports this physical GPU's "
                "reading on partition 0 only")
ZERO_POWER_NA = "reads 0 W: no power of its own (an MI250's second die: see the first)"
_NA_KEY = {"util_pct": "util", "power_w": "power", "energy_j": "energy",
           "temperature_c": "temperature", "sm_clock_mhz": "sm_clock"}


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU on a page: ``key`` (index, or index/MIG instance), its name and UUID,
    and each reading in its unit (%, W, MHz, bytes, °C, J; None: not on the page)."""

    key: str
    name: str
    uuid: str | None = None
    util_pct: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    tensor_active_pct: float | None = None
    sm_clock_mhz: float | None = None
    mem_used_bytes: float | None = None
    mem_total_bytes: float | None = None
    temperature_c: float | None = None
    energy_j: float | None = None
    vendor: str = "NVIDIA"
    #: True: averaged power (dcgm, nvitop: NVML's ~1 s; AMD's average_package_power);
    #: False: AMD's current socket power
    power_averaged: bool = True
    #: {metric: why it is None} beyond "not on the page" (``DeviceSnapshot.na`` keys)
    na: tuple[tuple[str, str], ...] = ()


def _wanted(text: str, names: dict[str, tuple[str, float]]) -> str:
    """The page's lines for ``names`` only (samples and their TYPE/HELP lines)."""
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[2] in names:
                keep.append(line)
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            keep.append(line)
    return "\n".join(keep) + "\n"


def page_kind(text: str) -> PageKind | None:
    """Which exporter wrote ``text`` (None: neither's GPU names are on it)."""
    if "DCGM_FI_DEV_" in text or "DCGM_FI_PROF_" in text:
        return "dcgm-exporter"
    if any(n in text for n in ("gpu_gfx_activity", "gpu_package_power",
                               "gpu_average_package_power", "gpu_energy_consumed")):
        return "amd-device-metrics-exporter"
    if "gpu_utilization" in text or "gpu_power_usage" in text:
        return "nvitop-exporter"
    return None


def parse_gpu_page(text: str, select: tuple[str, ...] | None = None
                   ) -> tuple[PageKind | None, tuple[GpuReading, ...]]:
    """The GPUs on a dcgm-exporter or nvitop-exporter page, by index order.

    select: GPU indices (or UUIDs) to keep; None keeps every GPU.
    Raises:
        ValueError: the text is not Prometheus exposition format.
    """
    kind = page_kind(text)
    if kind is None:
        return None, ()
    if kind == "amd-device-metrics-exporter":
        return kind, _parse_amd(text, select)
    names = DCGM if kind == "dcgm-exporter" else NVITOP
    rows: dict[str, dict[str, object]] = {}
    for fam in text_string_to_metric_families(_wanted(text, names)):
        for s in fam.samples:
            spec = names.get(s.name) or names.get(fam.name)
            if spec is None or not math.isfinite(s.value):
                continue
            lab = s.labels
            if kind == "dcgm-exporter":
                index, name, uuid = lab.get("gpu", "?"), lab.get("modelName", ""), lab.get("UUID")
                mig = lab.get("GPU_I_ID")
                key = f"{index}/{mig}" if mig else index
            else:
                index, name, uuid = lab.get("index", "?"), lab.get("devicename", ""), lab.get("uuid")
                key = index
            if select is not None and index not in select and (uuid or "") not in select:
                continue
            row = rows.setdefault(key, {"key": key, "name": name or f"GPU {key}", "uuid": uuid})
            field, scale = spec
            row[field] = float(s.value) * scale
    out = []
    for key in sorted(rows, key=_order):
        r = rows[key]
        free = r.pop("mem_free_bytes", None)
        if free is not None and r.get("mem_used_bytes") is not None:
            r["mem_total_bytes"] = float(r["mem_used_bytes"]) + float(free)  # type: ignore[arg-type]
        out.append(GpuReading(**r))  # type: ignore[arg-type]
    return kind, tuple(out)


def _parse_amd(text: str, select: tuple[str, ...] | None) -> tuple[GpuReading, ...]:
    """The GPUs of an AMD device-metrics-exporter page (see the module docstring)."""
    rows: dict[str, dict] = {}
    for fam in text_string_to_metric_families(_wanted(text, AMD)):
        for s in fam.samples:
            spec = AMD.get(s.name) or AMD.get(fam.name)
            if spec is None or not math.isfinite(s.value):
                continue
            lab = s.labels
            if spec[0] == "clock_mhz" and lab.get("clock_type") != "system":
                continue
            key, uuid = lab.get("gpu_id", "?"), lab.get("gpu_uuid") or None
            if select is not None and key not in select and (uuid or "") not in select:
                continue
            name = lab.get("card_series") or lab.get("card_model") or ""
            row = rows.setdefault(key, {"key": key, "uuid": uuid, "clocks": [],
                                        "partition": lab.get("gpu_partition_id", ""),
                                        "name": (name if name.upper().startswith("AMD")
                                                 else f"AMD {name}") if name else f"AMD GPU {key}"})
            if spec[0] == "clock_mhz":
                row["clocks"].append(float(s.value))
            else:
                row[spec[0]] = float(s.value) * spec[1]
    out = []
    for key in sorted(rows, key=_order):
        r = rows[key]
        na: dict[str, str] = {}
        clocks = r.pop("clocks")
        if clocks:
            r["sm_clock_mhz"] = sum(clocks) / len(clocks)
        edge = r.pop("temp_edge_c", None)
        r.setdefault("temperature_c", edge)
        averaged = False
        if r.get("power_w") is None:
            r["power_w"] = r.get("power_usage_w")
        if r.get("power_w") is None and r.get("power_avg_w") is not None:
            r["power_w"], averaged = r["power_avg_w"], True
        r.pop("power_usage_w", None)
        r.pop("power_avg_w", None)
        if r.pop("partition") not in ("", "0", "NA"):
            for f in _PHYSICAL:
                r[f] = None
                na[_NA_KEY[f]] = PARTITION_NA
        elif r.get("power_w") == 0:
            r["power_w"] = None
            na["power"] = ZERO_POWER_NA
        out.append(GpuReading(**r, vendor="AMD", power_averaged=averaged,
                              na=tuple(na.items())))
    return tuple(out)


def _order(key: str) -> tuple:
    head, _, tail = key.partition("/")
    return (int(head) if head.isdigit() else 1 << 30, head, int(tail) if tail.isdigit() else -1)
