"""Reading the kernel's sysfs files for GPU telemetry, and finding the GPUs there.

No library and no root: every value is one small text file the driver writes
(``/sys/class/drm/card<N>/device/...``).  The root is injectable (``root``, default
``/sys``) so tests build recorded trees under ``tmp_path``.

``read_number(path)`` reads one number and says plainly why it cannot: the file is
missing (the driver or this board does not expose it), permission denied, a value that
is not a number (``N/A``, empty), or the driver's own error (``EOPNOTSUPP``, ``EBUSY``
during a reset).  ``drm_cards(root)`` lists the DRM cards with their PCI vendor,
device id, PCI address and driver; a card is listed once per PCI address (a
render-only node or a second ``card`` link to the same device is not a second GPU).

Files used (kernel ABI and driver docs):
  device/vendor, device/device      PCI ids (Documentation/ABI/testing/sysfs-bus-pci)
  device/uevent                     DRIVER= and PCI_SLOT_NAME= lines (the driver core)
  device/hwmon/hwmon<i>/...         hwmon ABI, Documentation/hwmon/sysfs-interface.rst:
                                    power<i>_average / power<i>_input / power<i>_cap in
                                    microwatts, energy<i>_input in microjoules
"""

from __future__ import annotations

import errno
import glob
import math
import os
import re
from dataclasses import dataclass

__all__ = ["SYS_ROOT", "Unreadable", "read_number", "read_text", "try_number", "DrmCard",
           "drm_cards", "hwmon_dir", "VENDORS"]

SYS_ROOT = "/sys"
#: PCI vendor ids (the PCI-SIG registry, as in pci.ids).
VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel"}


class Unreadable(Exception):
    """A sysfs file that cannot give a value; ``str()`` is the plain reason and
    ``capability`` says whether it means "not supported here" (missing, permission,
    not a number, EOPNOTSUPP/ENODATA) rather than a passing failure (EBUSY, EIO ...)."""

    def __init__(self, reason: str, capability: bool) -> None:
        super().__init__(reason)
        self.capability = capability


#: errnos a driver returns for "this board cannot report that" (amdgpu: EOPNOTSUPP
#: from amdgpu_dpm_read_sensor; ENODATA/ENODEV/EINVAL from hwmon show functions).
_NOT_SUPPORTED = {errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENODATA, errno.ENODEV,
                  errno.EINVAL, errno.ENOSYS}


def read_text(path: str) -> str:
    """The file's text, stripped.

    Raises:
        Unreadable: missing, permission denied or any other OSError, with the reason.
    """
    try:
        with open(path) as fh:
            return fh.read().strip()
    except FileNotFoundError:
        raise Unreadable(f"no {os.path.basename(path)} (not exposed by this driver/board)",
                         True) from None
    except PermissionError:
        raise Unreadable(f"{os.path.basename(path)}: permission denied", True) from None
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise Unreadable(f"{os.path.basename(path)}: {why}",
                         exc.errno in _NOT_SUPPORTED) from None


def read_number(path: str) -> float:
    """One number from a sysfs file (an int or a decimal, as the drivers write them).

    Raises:
        Unreadable: see ``read_text``; a value that is not a number ("N/A", empty)
            is a capability problem, with the value quoted; so is one that is not finite
    ("nan", "inf", 1e400).
    """
    text = read_text(path)
    try:
        v = float(int(text, 0)) if re.fullmatch(r"[+-]?(0x[0-9a-fA-F]+|\d+)", text) \
            else float(text)
        if not math.isfinite(v):  # "nan", "inf", 1e400: no driver's counter or reading
            raise ValueError(text)
        return v
    except (ValueError, OverflowError):
        shown = text if len(text) <= 20 else text[:19] + "…"
        raise Unreadable(f"{os.path.basename(path)} reads {shown!r}, not a number",
                         True) from None


def try_number(path: str) -> tuple[float | None, str | None]:
    """(value, None) or (None, reason): ``read_number`` without raising."""
    try:
        return read_number(path), None
    except Unreadable as exc:
        return None, str(exc)


def hwmon_dir(device_dir: str) -> str | None:
    """The first ``hwmon<i>`` directory of a device (None: no hwmon)."""
    found = sorted(glob.glob(os.path.join(device_dir, "hwmon", "hwmon*")),
                   key=lambda p: int(re.sub(r"\D", "", os.path.basename(p)) or 0))
    return found[0] if found else None


@dataclass(frozen=True, slots=True)
class DrmCard:
    """One DRM card: ``card`` ("card0"), ``device_dir`` (its ``device`` directory),
    PCI ``vendor`` / ``device_id`` (ints), ``vendor_name`` ("AMD", ...), ``pci`` (the
    PCI address "0000:03:00.0", or the card name when unknown) and ``driver``
    ("amdgpu", "xe", "i915", "nvidia", ...; "" when unknown)."""

    card: str
    device_dir: str
    vendor: int
    device_id: int
    vendor_name: str
    pci: str
    driver: str


def _uevent(device_dir: str) -> dict[str, str]:
    try:
        text = read_text(os.path.join(device_dir, "uevent"))
    except Unreadable:
        return {}
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def drm_cards(root: str = SYS_ROOT) -> list[DrmCard]:
    """The DRM cards under ``root``/class/drm, by card number, each PCI device once.

    Connector entries ("card0-DP-1") and render nodes are skipped; a card whose
    vendor file cannot be read is skipped (nothing to say about it).  Never raises.
    """
    base = os.path.join(root, "class", "drm")
    try:
        names = os.listdir(base)
    except OSError:
        return []
    out: list[DrmCard] = []
    seen: set[str] = set()
    for name in sorted((n for n in names if re.fullmatch(r"card\d+", n)),
                       key=lambda n: int(n[4:])):
        dev = os.path.join(base, name, "device")
        try:
            vendor = int(read_number(os.path.join(dev, "vendor")))
        except Unreadable:
            continue
        dev_id, _ = try_number(os.path.join(dev, "device"))
        ue = _uevent(dev)
        pci = ue.get("PCI_SLOT_NAME") or (os.path.basename(os.path.realpath(dev))
                                          if os.path.islink(dev) else name)
        if pci in seen:
            continue
        seen.add(pci)
        out.append(DrmCard(name, dev, vendor, int(dev_id or 0),
                           VENDORS.get(vendor, f"0x{vendor:04x}"), pci, ue.get("DRIVER", "")))
    return out
