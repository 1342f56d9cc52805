"""GPU readings from the metrics pages a fleet already serves: NVIDIA's dcgm-exporter
and nvitop's exporter.  Parsing only (the fetching is ``measure/telemetry/remote.py``).

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

A reading the page does not carry is None, never 0.  Only the lines of these names
are parsed (a dcgm page carries many more families; filtering first keeps a 100 kB
page cheap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

PageKind = Literal["dcgm-exporter", "nvitop-exporter"]
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


def _order(key: str) -> tuple:
    head, _, tail = key.partition("/")
    return (int(head) if head.isdigit() else 1 << 30, head, int(tail) if tail.isdigit() else -1)
