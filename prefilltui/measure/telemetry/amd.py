"""AMD GPUs: the kernel's amdgpu sysfs (no library, no root), or AMD's ``amdsmi``
Python package when it and ROCm's library are installed.

amdgpu sysfs (``/sys/class/drm/card<N>/device/``, PCI vendor 0x1002; the kernel's
Documentation/gpu/amdgpu/thermal.rst and driver-misc.rst, from
drivers/gpu/drm/amd/pm/amdgpu_pm.c and amdgpu_vram_mgr.c):
  gpu_busy_percent               "how busy the GPU is as a percentage ... The SMU
                                 firmware computes a percentage of load based on the
                                 aggregate activity level in the IP cores" (its window
                                 is not documented)
  hwmon/hwmon<i>/power1_input    "instantaneous power used by the SoC in microWatts"
  hwmon/hwmon<i>/power1_average  "average power used by the SoC in microWatts" (both:
                                 "On APUs this includes the CPU")
  hwmon/hwmon<i>/power1_cap      "selected power cap in microWatts"
  hwmon/hwmon<i>/energy1_input   cumulative energy in microjoules, where the board
                                 exposes it (hwmon ABI, Documentation/hwmon/sysfs-interface.rst)
  hwmon/hwmon<i>/temp1_input     on-die temperature in millidegrees Celsius
  mem_info_vram_used / _total    VRAM in bytes
  product_name                   the board's name where its FRU has one
MI250/MI250X: each package is two dies (two PCI devices); the kernel reports power
only on the first ("Valid power data is available only from primary die",
drivers/gpu/drm/amd/pm/swsmu/smu13/aldebaran_ppt.c) and 0 on the second, so a power
reading of 0 W is shown "n/a", never 0 (a running GPU never draws 0 W).

amdsmi (ROCm/amdsmi, py-interface/README.md and amdsmi_interface.py):
  amdsmi_init(), amdsmi_get_processor_handles(), amdsmi_shut_down()
  amdsmi_get_gpu_activity(h)["gfx_activity"]      graphics engine usage, 0-100 %
  amdsmi_get_power_info(h)["current_socket_power" / "average_socket_power"]  W
  amdsmi_get_energy_count(h)                      energy_accumulator (older releases:
                                                  "power") x counter_resolution = µJ
  amdsmi_get_power_cap_info(h)["power_cap"]       µW
  amdsmi_get_gpu_vram_usage(h)["vram_used" / "vram_total"]  MiB (amd_smi.cc divides
                                                  the byte counts by 1024 * 1024)
  amdsmi_get_gpu_asic_info(h)["market_name"], amdsmi_get_gpu_device_bdf(h)
  An unsupported value reads the string "N/A" (0xFFFF from the library).
Importing amdsmi fails in several ways on a machine without ROCm: ImportError (not
installed), OSError (libamd_smi.so not found), AttributeError (amdsmi older than the
ROCm library), KeyError; it also prints to stdout when the library is missing.  Zeus
guards the same import the same way (ml-energy/zeus, zeus/device/gpu/amd.py,
``amdsmi_is_available``).  Zeus also found the energy counter wrong on some boards
(ROCm/amdsmi issue 38) and checks it against power with a loose 0.1-10x bound; so do
both readers here, for any energy counter beside a power reading.
"""

from __future__ import annotations

import contextlib
import io
import os
from typing import Any

from prefilltui.measure.telemetry.readers import EnergyCounter, reading
from prefilltui.measure.telemetry.snapshots import describe_error
from prefilltui.measure.telemetry.sysfs import DrmCard, hwmon_dir, read_text, Unreadable
from prefilltui.measure.telemetry.sysfs_files import FileSet
from prefilltui.model.types import UtilKind

__all__ = ["AmdSysfsReader", "AmdSmiReader", "AmdSmiUnavailable", "import_amdsmi",
           "open_amdsmi", "amd_name", "NO_OWN_POWER"]

#: PCI device ids of AMD Instinct boards: AMD's Instinct docs ("PCIe Bus Topology
#: Commands": 74a1 MI300X, 74a2 MI308X, 74a5 MI325X, 75a0 MI350X, 75a3 MI355X) and
#: pci.ids (74a0 MI300A, 740c MI250X/MI250, 740f MI210).  Used only when the board
#: has no ``product_name``.
DEVICE_NAMES = {0x74A1: "AMD Instinct MI300X", 0x74A2: "AMD Instinct MI308X",
                0x74A5: "AMD Instinct MI325X", 0x75A0: "AMD Instinct MI350X",
                0x75A3: "AMD Instinct MI355X", 0x74A0: "AMD Instinct MI300A",
                0x740C: "AMD Instinct MI250X / MI250", 0x740F: "AMD Instinct MI210"}

NO_OWN_POWER = ("reads 0 W: this device reports no power of its own (an MI250's second "
                "die: the first die's reading is the whole package)")
#: Seconds of samples (with a mean power of at least 1 W) before the energy counter
#: is compared with the power readings; the loose bound is Zeus's (0.1x-10x).
COUNTER_CHECK_S = 2.0
COUNTER_BOUNDS = (0.1, 10.0)


def amd_name(card: DrmCard) -> str:
    """The board's ``product_name``, else the Instinct name of its PCI id, else
    "AMD GPU 0x<id>"."""
    try:
        name = read_text(os.path.join(card.device_dir, "product_name"))
    except Unreadable:
        name = ""
    if name:
        return name if name.upper().startswith("AMD") else f"AMD {name}"
    return DEVICE_NAMES.get(card.device_id, f"AMD GPU 0x{card.device_id:04x}")


class _CounterCheck:
    """Compares an energy counter's joules with the integral of the power readings
    over the first ``COUNTER_CHECK_S``; ``verdict`` None until decided, then True
    (trust the counter) or a reason (do not)."""

    def __init__(self) -> None:
        self.verdict: bool | str | None = None
        self._t0: float | None = None
        self._e0 = 0.0
        self._integral = 0.0
        self._last: tuple[float, float] | None = None

    def add(self, now: float, energy_j: float, power_w: float | None) -> None:
        if self.verdict is not None or power_w is None:
            return
        if self._t0 is None:
            self._t0, self._e0, self._last = now, energy_j, (now, power_w)
            return
        t_prev, p_prev = self._last  # type: ignore[misc]
        self._integral += (power_w + p_prev) / 2 * (now - t_prev)
        self._last = (now, power_w)
        span = now - self._t0
        if span < COUNTER_CHECK_S or self._integral < 1.0 * span:
            return
        ratio = (energy_j - self._e0) / self._integral
        lo, hi = COUNTER_BOUNDS
        self.verdict = True if lo <= ratio <= hi else (
            f"energy counter disagrees with the power readings ({ratio:.2g}x over "
            f"{span:.1f} s): not used, the power samples are integrated instead")


class AmdSysfsReader:
    """One amdgpu device read from sysfs (``card``: its ``DrmCard``); see the module
    docstring for the files.  ``index``: its position among the AMD GPUs sampled."""

    vendor = "AMD"
    source = "amdgpu sysfs"
    util_kind: UtilKind = "busy_percent"
    util_window_s: float | None = None  # the SMU's averaging window is not documented
    power_scope = "board (SoC)"

    def __init__(self, card: DrmCard, index: int) -> None:
        self.card, self.index, self.pci = card, index, card.pci
        self.label = f"GPU {index}"
        self.name = amd_name(card)
        self.no_own_power = False
        d = card.device_dir
        hw = hwmon_dir(d)
        f = self.files = FileSet()
        nohw = "no hwmon directory for this device"
        f.probe("util", os.path.join(d, "gpu_busy_percent"))
        p = f.probe("power", os.path.join(hw, "power1_input") if hw else None, nohw)
        self.power_averaged: bool | None = False if p is not None else None
        if p is None and hw:
            why = f.na.get("power", "")
            p = f.probe("power", os.path.join(hw, "power1_average"))
            if p is not None:
                self.power_averaged = True
            else:
                f.na["power"] = f"{why}; {f.na['power']}"
        self.power_window_s: float | None = None  # undocumented for power1_average
        if p == 0:
            f.drop("power", NO_OWN_POWER)
            self.no_own_power = True
        cap = f.probe("power_limit", os.path.join(hw, "power1_cap") if hw else None, nohw)
        if cap == 0:
            f.drop("power_limit", "power1_cap reads 0 (no cap of its own)")
        e = f.probe("energy", os.path.join(hw, "energy1_input") if hw else None, nohw)
        self.counter = EnergyCounter(1e-6) if e is not None else None
        self.check = _CounterCheck()
        if self.no_own_power and self.counter is not None:
            f.drop("energy", NO_OWN_POWER)
            self.counter = None
        if self.counter is None and "power" in f.paths:
            f.na["energy"] = f"{f.na.get('energy', 'no energy counter')}; integrating power"
        f.probe("mem_used", os.path.join(d, "mem_info_vram_used"))
        f.probe("mem_total", os.path.join(d, "mem_info_vram_total"))
        f.probe("temperature", os.path.join(hw, "temp1_input") if hw else None, nohw)
        self.na = self._na()

    def _na(self) -> dict[str, str]:
        na = {k: v for k, v in self.files.na.items() if k in ("util", "power", "energy",
                                                               "power_limit", "temperature")}
        if "mem_used" in self.files.na:
            na["memory"] = self.files.na["mem_used"]
        na["sm_clock"] = "not sampled from amdgpu sysfs"
        return na

    def read(self, now: float, slow: bool) -> dict[str, float | None]:
        f = self.files
        out: dict[str, float | None] = {"util": f.read("util")}
        p = f.read("power")
        # a reading no board gives (-150 W, 1e24 W) is none: never fed to the counter check
        out["power"] = None if p is None else reading("power", p / 1e6)
        if p == 0 and self.power_averaged is not None:
            out["power"] = None  # one 0 reading is no measurement either
        if self.counter is not None:
            raw = f.read("energy")
            if raw is not None:
                e, pw = self.counter.update(raw, now)
                if out["power"] is None and "power" not in f.paths:
                    out["power"] = pw
                else:  # a counter beside a power reading: checked against it first
                    self.check.add(now, e, out["power"])
                if isinstance(self.check.verdict, str):
                    f.drop("energy", self.check.verdict)
                    self.counter = None
                else:
                    out["energy"] = e
        if slow:
            cap = f.read("power_limit")
            out["power_limit"] = cap / 1e6 if cap else None
            out["mem_used"], out["mem_total"] = f.read("mem_used"), f.read("mem_total")
            t = f.read("temperature")
            out["temperature"] = None if t is None else t / 1000.0
        self.na = self._na()
        return out

    def close(self) -> None:
        return None


# -- amdsmi -------------------------------------------------------------------------
class AmdSmiUnavailable(RuntimeError):
    """amdsmi cannot be used here; ``str()`` is the one-line reason."""


def import_amdsmi() -> Any:
    """Import ``amdsmi`` with its stdout silenced.

    Raises:
        AmdSmiUnavailable: not installed (ImportError), no libamd_smi.so (OSError),
            amdsmi older than ROCm (AttributeError), a broken install (KeyError), or
            any other import failure; the reason says which.
    """
    why = {ImportError: "not installed", OSError: "ROCm's libamd_smi.so not found"
           + ("" if os.environ.get("ROCM_PATH") else " (ROCM_PATH is not set)"),
           AttributeError: "amdsmi does not match the ROCm library (older than ROCm?)",
           KeyError: "a broken amdsmi install"}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import amdsmi  # type: ignore[import-not-found]  # optional: needs ROCm
    except Exception as exc:  # noqa: BLE001 - every way it fails without ROCm
        kind = next((w for t, w in why.items() if isinstance(exc, t)), "import failed")
        raise AmdSmiUnavailable(f"amdsmi unavailable: {kind} ({describe_error(exc)})"
                                ) from None
    return amdsmi


def open_amdsmi(module: Any = None) -> tuple[Any, list[Any]]:
    """(the amdsmi module, its processor handles) after ``amdsmi_init()``.

    module: an amdsmi-shaped module (tests inject a fake); default ``import_amdsmi()``.
    Raises:
        AmdSmiUnavailable: it cannot be imported or initialised, or sees no GPU.
    """
    mod = module if module is not None else import_amdsmi()
    try:
        mod.amdsmi_init()
    except Exception as exc:  # noqa: BLE001 - AmdSmiLibraryException, driver not loaded
        raise AmdSmiUnavailable(f"amdsmi unavailable: init failed ({describe_error(exc)})"
                                ) from None
    try:
        handles = list(mod.amdsmi_get_processor_handles())
    except Exception as exc:  # noqa: BLE001
        _shut(mod)
        raise AmdSmiUnavailable(f"amdsmi: no GPU list ({describe_error(exc)})") from None
    if not handles:
        _shut(mod)
        raise AmdSmiUnavailable("amdsmi: no AMD GPU found")
    return mod, handles


def _shut(mod: Any) -> None:
    try:
        mod.amdsmi_shut_down()
    except Exception:  # noqa: BLE001 - shutting down
        pass


def _num(v: Any) -> float | None:
    """An amdsmi value as a number; "N/A" (or anything not a number) is None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


class AmdSmiReader:
    """One AMD GPU read through amdsmi (``mod``: the module, ``h``: its handle)."""

    vendor = "AMD"
    source = "amdsmi"
    util_kind: UtilKind = "gfx_activity"
    util_window_s: float | None = None  # the SMU's window is not documented
    power_window_s: float | None = None
    power_scope = "socket"

    def __init__(self, mod: Any, h: Any, index: int) -> None:
        self.mod, self.h, self.index = mod, h, index
        self.label = f"GPU {index}"
        self.no_own_power = False
        self.na: dict[str, str] = {"sm_clock": "not sampled from amdsmi"}
        self.pci = str(self._try(lambda: mod.amdsmi_get_gpu_device_bdf(h), f"amdsmi:{index}"))
        name = self._try(lambda: mod.amdsmi_get_gpu_asic_info(h)["market_name"], None)
        self.name = name if isinstance(name, str) and name and name != "N/A" \
            else "AMD GPU"
        self.power_key: str | None = None
        self.power_averaged: bool | None = None
        self.use: set[str] = set()
        self._probe()
        self.check = _CounterCheck()

    @staticmethod
    def _try(fn: Any, default: Any) -> Any:
        try:
            return fn()
        except Exception:  # noqa: BLE001 - optional facts only
            return default

    def _probe(self) -> None:
        mod, h, na = self.mod, self.h, self.na
        try:
            act = _num(mod.amdsmi_get_gpu_activity(h).get("gfx_activity"))
            self.use.add("util") if act is not None else na.setdefault(
                "util", "amdsmi gfx_activity reads N/A")
        except Exception as exc:  # noqa: BLE001
            na["util"] = f"amdsmi_get_gpu_activity: {describe_error(exc)}"
        try:
            info = mod.amdsmi_get_power_info(h)
            for key, averaged in (("current_socket_power", False),
                                  ("average_socket_power", True)):
                v = _num(info.get(key))
                if v is not None:
                    self.power_key, self.power_averaged = key, averaged
                    if v == 0:
                        self.no_own_power = True
                    break
            if self.no_own_power:
                na["power"] = na["energy"] = NO_OWN_POWER.replace("reads 0 W", "amdsmi reads 0 W")
            elif self.power_key is None:
                na["power"] = "amdsmi current/average_socket_power read N/A"
        except Exception as exc:  # noqa: BLE001
            na["power"] = f"amdsmi_get_power_info: {describe_error(exc)}"
        if not self.no_own_power:
            try:
                self._energy_raw()
                self.use.add("energy")
                self.counter = EnergyCounter(1.0)
            except Exception as exc:  # noqa: BLE001
                na["energy"] = f"amdsmi_get_energy_count: {describe_error(exc)}"
        for name, fn in (("power_limit", self._cap), ("memory", self._vram)):
            try:
                if fn() is not None:
                    self.use.add(name)
                else:
                    na[name] = f"amdsmi {name} reads N/A"
            except Exception as exc:  # noqa: BLE001
                na[name] = describe_error(exc)
        na.setdefault("temperature", "not sampled from amdsmi")

    def _energy_raw(self) -> float:
        """Joules from amdsmi_get_energy_count (its µJ count x resolution)."""
        d = self.mod.amdsmi_get_energy_count(self.h)
        acc = d["energy_accumulator"] if "energy_accumulator" in d else d["power"]
        return float(acc) * float(d["counter_resolution"]) / 1e6

    def _cap(self) -> float | None:
        v = _num(self.mod.amdsmi_get_power_cap_info(self.h).get("power_cap"))
        return v / 1e6 if v else None

    def _vram(self) -> tuple[float, float] | None:
        d = self.mod.amdsmi_get_gpu_vram_usage(self.h)
        used, total = _num(d.get("vram_used")), _num(d.get("vram_total"))
        if used is None or total is None:
            return None
        return used * 2**20, total * 2**20

    def read(self, now: float, slow: bool) -> dict[str, float | None]:
        """One tick; amdsmi's exceptions propagate (the device is retried)."""
        mod, h = self.mod, self.h
        out: dict[str, float | None] = {}
        if "util" in self.use:
            out["util"] = _num(mod.amdsmi_get_gpu_activity(h).get("gfx_activity"))
        if self.power_key is not None and not self.no_own_power:
            p = _num(mod.amdsmi_get_power_info(h).get(self.power_key))
            out["power"] = reading("power", p) if p else None
        if "energy" in self.use:
            e, _ = self.counter.update(self._energy_raw(), now)
            self.check.add(now, e, out.get("power"))
            if isinstance(self.check.verdict, str):
                self.use.discard("energy")
                self.na["energy"] = self.check.verdict
            else:
                out["energy"] = e
        if slow:
            if "power_limit" in self.use:
                out["power_limit"] = self._cap()
            if "memory" in self.use:
                vr = self._vram()
                out["mem_used"], out["mem_total"] = vr if vr else (None, None)
        return out

    def close(self) -> None:
        return None
