"""Intel GPUs from the xe and i915 drivers' sysfs (no library, no root).

Utilization: the GT's idle residency, a counter of milliseconds spent in the RC6/C6
power-gated idle state, read each tick: utilization = 100 × (1 − Δidle / Δwall), the
share of the last sample period the GT was awake.  It is an upper bound on busy
(the GT stays awake for its idle hysteresis after work), labelled "awake".
  xe:   device/tile<t>/gt<g>/gtidle/idle_residency_ms, its ``name`` "gt<g>-rc" for the
        render/compute GT, "gt<g>-mc" for the media GT (skipped)
        (drivers/gpu/drm/xe/xe_gt_idle.c, DOC: Xe GT Idle; the tile/gt directories:
        xe_gt_sysfs.c)
  i915: card<N>/gt/gt<g>/rc6_residency_ms, else card<N>/power/rc6_residency_ms (the
        legacy file, the same counter as gt0)
Power: hwmon ``energy1_input`` ("Card energy input of device in microjoules",
Documentation/ABI/testing/sysfs-driver-intel-xe-hwmon; "Energy input of device or gt
in microjoules", sysfs-driver-intel-i915-hwmon, device-level hwmon named "i915"),
power = Δenergy / Δt over the sample period (an average over it).  Power limit:
hwmon ``power1_max``, the sustained PL1 limit in microwatts (0 = disabled).
VRAM and temperature are not read (not in these drivers' documented sysfs for every
platform).
"""

from __future__ import annotations

import glob
import os

from prefilltui.measure.telemetry.readers import EnergyCounter
from prefilltui.measure.telemetry.sysfs import DrmCard, Unreadable, read_text
from prefilltui.measure.telemetry.sysfs_files import FileSet
from prefilltui.model.types import UtilKind

__all__ = ["IntelSysfsReader", "residency_files"]


def residency_files(card: DrmCard) -> list[str]:
    """The idle-residency counters (ms) of a card's render/compute GTs, xe or i915."""
    d = card.device_dir
    xe = sorted(glob.glob(os.path.join(d, "tile*", "gt*", "gtidle", "idle_residency_ms")))
    out = []
    for f in xe:
        try:
            name = read_text(os.path.join(os.path.dirname(f), "name"))
        except Unreadable:
            name = ""
        if not name.endswith("-mc"):  # the media GT idles apart from compute
            out.append(f)
    if xe:
        return out
    card_dir = os.path.dirname(d.rstrip("/"))
    gts = sorted(glob.glob(os.path.join(card_dir, "gt", "gt*", "rc6_residency_ms")))
    if gts:
        return gts
    legacy = os.path.join(card_dir, "power", "rc6_residency_ms")
    return [legacy] if os.path.exists(legacy) else []


def _hwmon(card: DrmCard) -> str | None:
    """The device-level hwmon: the one named as the driver ("xe", "i915"), else the
    first with an energy counter."""
    found = sorted(glob.glob(os.path.join(card.device_dir, "hwmon", "hwmon*")))
    named = [h for h in found if _name(h) in ("xe", "i915")]
    with_energy = [h for h in found if os.path.exists(os.path.join(h, "energy1_input"))]
    pick = named or with_energy or found
    return pick[0] if pick else None


def _name(h: str) -> str:
    try:
        return read_text(os.path.join(h, "name"))
    except Unreadable:
        return ""


class IntelSysfsReader:
    """One Intel GPU (xe or i915) read from sysfs; see the module docstring."""

    vendor = "Intel"
    util_kind: UtilKind = "awake_share"
    power_scope = "card"
    no_own_power = False

    def __init__(self, card: DrmCard, index: int, period_s: float) -> None:
        self.card, self.index, self.pci = card, index, card.pci
        self.label = f"GPU {index}"
        self.source = f"{card.driver or 'xe/i915'} sysfs"
        self.name = f"Intel GPU 0x{card.device_id:04x}"
        self.util_window_s: float | None = period_s  # Δ over our own sample period
        self.power_window_s: float | None = period_s
        self.power_averaged: bool | None = True
        f = self.files = FileSet()
        self._gts = residency_files(card)
        for i, path in enumerate(self._gts):
            f.probe(f"idle{i}", path)
        self._gts = [g for i, g in enumerate(self._gts) if f.has(f"idle{i}")]
        self._idle_keys = [k for k in f.paths if k.startswith("idle")]
        self._prev: dict[str, tuple[float, float]] = {}
        self.na: dict[str, str] = {}
        if not self._idle_keys:
            first = next((v for k, v in f.na.items() if k.startswith("idle")), None)
            self.na["util"] = first or ("no gtidle/idle_residency_ms or rc6_residency_ms "
                                        "(not an xe/i915 GPU, or an SR-IOV VF)")
        hw = _hwmon(card)
        nohw = "no hwmon directory for this device"
        e = f.probe("energy", os.path.join(hw, "energy1_input") if hw else None, nohw)
        self.counter = EnergyCounter(1e-6) if e is not None else None
        if self.counter is None:
            self.na["power"] = self.na["energy"] = f.na["energy"]
            self.power_averaged = None
        cap = f.probe("power_limit", os.path.join(hw, "power1_max") if hw else None, nohw)
        if cap == 0:
            f.drop("power_limit", "power1_max reads 0 (PL1 disabled)")
        if "power_limit" in f.na:
            self.na["power_limit"] = f.na["power_limit"]
        self.na.update(memory="not read from xe/i915 sysfs",
                       temperature="not read from xe/i915 sysfs",
                       sm_clock="not sampled from xe/i915 sysfs")

    def read(self, now: float, slow: bool) -> dict[str, float | None]:
        f = self.files
        out: dict[str, float | None] = {}
        shares = []
        for k in self._idle_keys:
            idle = f.read(k)
            prev = self._prev.get(k)
            if idle is None:
                continue
            self._prev[k] = (idle, now)
            if prev is None:
                continue
            d_idle, d_wall = idle - prev[0], (now - prev[1]) * 1000.0
            if d_idle < 0 or d_wall <= 0:  # the counter went back: no reading this tick
                continue
            shares.append(max(0.0, min(100.0, 100.0 * (1.0 - d_idle / d_wall))))
        out["util"] = sum(shares) / len(shares) if shares else None
        if self.counter is not None:
            raw = f.read("energy")
            if raw is not None:
                out["energy"], out["power"] = self.counter.update(raw, now)
        if slow and f.has("power_limit"):
            cap = f.read("power_limit")
            out["power_limit"] = cap / 1e6 if cap else None
        return out

    def close(self) -> None:
        return None
