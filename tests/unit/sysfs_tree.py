"""Recorded sysfs trees for the AMD and Intel GPU readers, built under ``tmp_path``.

The files and units are the kernel's documented ones (see
``prefilltui.measure.telemetry.amd`` / ``intel`` for the documents): an amdgpu card
with gpu_busy_percent, hwmon power1_input / power1_average / power1_cap (µW),
energy1_input (µJ), temp1_input (m°C), mem_info_vram_used/_total (bytes); an xe card
with tile0/gt0/gtidle/{name,idle_residency_ms} (and the media GT gt1 "-mc") and hwmon
energy1_input (µJ) / power1_max (µW); an i915 card with gt/gt0/rc6_residency_ms; an
NVIDIA card (vendor 0x10de) that must never be sampled from sysfs.  Values are
plain files: a test writes new ones between samples with ``SysfsCard.set``.
"""

from __future__ import annotations

import os
from pathlib import Path


class SysfsCard:
    """One card in a recorded tree: ``dev`` (its device dir), ``hwmon`` (its hwmon0)."""

    def __init__(self, root: Path, n: int) -> None:
        self.card = root / "class" / "drm" / f"card{n}"
        self.dev = self.card / "device"
        self.hwmon = self.dev / "hwmon" / f"hwmon{n}"

    def set(self, rel: str, value: object) -> None:
        """Write ``value`` to ``rel`` (relative to the device dir; "hwmon/x" for hwmon)."""
        path = (self.hwmon / rel[6:]) if rel.startswith("hwmon/") else (self.dev / rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{value}\n")

    def remove(self, rel: str) -> None:
        path = (self.hwmon / rel[6:]) if rel.startswith("hwmon/") else (self.dev / rel)
        os.remove(path)


def _card(root: Path, n: int, vendor: int, device: int, pci: str, driver: str) -> SysfsCard:
    c = SysfsCard(root, n)
    c.dev.mkdir(parents=True)
    c.set("vendor", f"0x{vendor:04x}")
    c.set("device", f"0x{device:04x}")
    c.set("uevent", f"DRIVER={driver}\nPCI_CLASS=38000\nPCI_SLOT_NAME={pci}")
    # a connector entry beside the card, which is not a GPU
    (root / "class" / "drm" / f"card{n}-DP-1").mkdir(parents=True, exist_ok=True)
    return c


def amd_card(root: Path, n: int = 0, *, pci: str | None = None, device: int = 0x74A1,
             busy: int = 0, power_uw: int | None = 150_000_000, average: bool = False,
             cap_uw: int = 750_000_000, energy_uj: int | None = None,
             product_name: str | None = None, vram_used: int = 2 * 2**30,
             vram_total: int = 192 * 2**30) -> SysfsCard:
    """An amdgpu card (MI300X's PCI id by default) with the documented files."""
    c = _card(root, n, 0x1002, device, pci or f"0000:{n + 3:02x}:00.0", "amdgpu")
    c.set("gpu_busy_percent", busy)
    c.set("mem_info_vram_used", vram_used)
    c.set("mem_info_vram_total", vram_total)
    if product_name is not None:
        c.set("product_name", product_name)
    c.set("hwmon/name", "amdgpu")
    if power_uw is not None:
        c.set("hwmon/power1_average" if average else "hwmon/power1_input", power_uw)
    c.set("hwmon/power1_cap", cap_uw)
    c.set("hwmon/temp1_input", 45000)
    if energy_uj is not None:
        c.set("hwmon/energy1_input", energy_uj)
    return c


def xe_card(root: Path, n: int = 0, *, pci: str | None = None, device: int = 0x0BD5,
            idle_ms: int = 0, energy_uj: int | None = 0, pl1_uw: int = 600_000_000,
            media_idle_ms: int = 0) -> SysfsCard:
    """An xe card: the render GT gt0 ("gt0-rc"), the media GT gt1 ("gt1-mc")."""
    c = _card(root, n, 0x8086, device, pci or f"0000:{n + 0x29:02x}:00.0", "xe")
    c.set("tile0/gt0/gtidle/name", "gt0-rc")
    c.set("tile0/gt0/gtidle/idle_residency_ms", idle_ms)
    c.set("tile0/gt1/gtidle/name", "gt1-mc")
    c.set("tile0/gt1/gtidle/idle_residency_ms", media_idle_ms)
    c.set("hwmon/name", "xe")
    if energy_uj is not None:
        c.set("hwmon/energy1_input", energy_uj)
    c.set("hwmon/power1_max", pl1_uw)
    return c


def i915_card(root: Path, n: int = 0, *, rc6_ms: int = 0, energy_uj: int = 0) -> SysfsCard:
    """An i915 card: card<N>/gt/gt0/rc6_residency_ms and the device-level hwmon."""
    c = _card(root, n, 0x8086, 0x56A0, f"0000:{n + 3:02x}:00.0", "i915")
    gt = c.card / "gt" / "gt0"
    gt.mkdir(parents=True)
    (gt / "rc6_residency_ms").write_text(f"{rc6_ms}\n")
    c.set("hwmon/name", "i915")
    c.set("hwmon/energy1_input", energy_uj)
    return c


def set_rc6(c: SysfsCard, ms: int) -> None:
    (c.card / "gt" / "gt0" / "rc6_residency_ms").write_text(f"{ms}\n")


def nvidia_card(root: Path, n: int = 0) -> SysfsCard:
    """An NVIDIA card as /sys/class/drm shows it (NVML's, never sampled from sysfs)."""
    return _card(root, n, 0x10DE, 0x2335, f"0000:{n + 0x18:02x}:00.0", "nvidia")
