"""Which local GPUs to sample beyond NVML: AMD (amdsmi, else amdgpu sysfs) and Intel
(xe/i915 sysfs), and the ``--gpus`` vendor prefix.

One vendor is sampled at a time, in the order NVIDIA (NVML), AMD, Intel (see
docs/telemetry.md): the gauges and each probe's utilization then cover the GPUs that
run the model, never averaged with a display GPU of another vendor (a workstation's
Intel iGPU beside its NVIDIA card).  ``--gpus amd:0,1`` / ``intel:0`` /
``nvidia:0`` picks the vendor; the GPUs of the vendors not sampled are named in the
sampler's reason.  Each device appears once: a card is keyed by its PCI address
(``sysfs.drm_cards``), amdsmi's devices replace the sysfs ones of the same address,
and NVIDIA cards in /sys/class/drm are NVML's.
"""

from __future__ import annotations

from typing import Any, Callable

from prefilltui.measure.telemetry.amd import (AmdSmiReader, AmdSmiUnavailable,
                                              AmdSysfsReader, open_amdsmi, _shut)
from prefilltui.measure.telemetry.intel import IntelSysfsReader
from prefilltui.measure.telemetry.readers import GpuReader, ReaderSampler
from prefilltui.measure.telemetry.sysfs import SYS_ROOT, DrmCard, drm_cards

__all__ = ["GpuUnavailable", "split_vendor", "open_amd", "open_intel", "others_note",
           "VENDOR_PREFIXES"]

VENDOR_PREFIXES = ("nvidia", "amd", "intel")


class GpuUnavailable(RuntimeError):
    """No GPU of that vendor can be sampled; ``str()`` says why (may be "")."""


def split_vendor(gpus: str | None) -> tuple[str | None, str | None]:
    """``--gpus`` -> (vendor or None, the selection after the prefix or None).
    "amd:0,1" -> ("amd", "0,1"); "amd" -> ("amd", None); "0,1" -> (None, "0,1").

    Raises:
        ValueError: an unknown prefix ("foo:0").
    """
    if gpus is None:
        return None, None
    head, sep, rest = gpus.partition(":")
    low = head.strip().lower()
    if low in VENDOR_PREFIXES and (sep or rest == ""):
        return low, (rest.strip() or None)
    if sep and not low.startswith(("gpu-", "mig-")) and not low.isdigit():
        raise ValueError(f"--gpus {gpus!r}: unknown vendor {head!r} "
                         f"(one of {', '.join(VENDOR_PREFIXES)})")
    return None, gpus


def _select(items: list[Any], sel: str | None, vendor: str) -> list[Any]:
    """The items at the ``sel`` indices ("0,2"); all when ``sel`` is None.

    Raises:
        ValueError: not indices, or an index out of range.
    """
    if sel is None:
        return items
    out = []
    for raw in sel.split(","):
        item = raw.strip()
        if not item.isdigit():
            raise ValueError(f"--gpus {sel!r}: {vendor} GPUs are chosen by index "
                             "(their order on the PCI bus), not by UUID")
        i = int(item)
        if i >= len(items):
            raise ValueError(f"--gpus {sel!r}: no {vendor} GPU {i} "
                             f"({len(items)} found)")
        out.append(items[i])
    return out


def _cards(root: str, vendor: int, drivers: tuple[str, ...]) -> list[DrmCard]:
    return [c for c in drm_cards(root) if c.vendor == vendor
            and (not c.driver or c.driver in drivers)]


def open_amd(sel: str | None, hz: float, *, root: str = SYS_ROOT, amdsmi_module: Any = None,
             clock: Callable[[], float] | None = None) -> ReaderSampler:
    """AMD GPUs through amdsmi when it imports and initialises, else amdgpu sysfs.

    amdsmi_module: an amdsmi-shaped module (tests); False: do not try amdsmi.
    Raises:
        GpuUnavailable: no AMD GPU here (the reason says what was tried).
        ValueError: a bad selection.
    """
    why = ""
    if amdsmi_module is not False:
        try:
            mod, handles = open_amdsmi(amdsmi_module or None)
        except AmdSmiUnavailable as exc:
            why = str(exc)
        else:
            try:
                readers: list[GpuReader] = [AmdSmiReader(mod, h, i) for i, h in
                                            enumerate(_select(handles, sel, "AMD"))]
            except BaseException:
                _shut(mod)
                raise
            return ReaderSampler(_renumber(readers, sel), hz, clock=clock, source="amdsmi",
                                 closer=lambda: _shut(mod))
    cards = _cards(root, 0x1002, ("amdgpu",))
    if not cards:
        # amdsmi not installed and no card: nothing AMD to say
        quiet = not why or "not installed" in why
        raise GpuUnavailable("" if quiet else f"{why}; no amdgpu card in sysfs")
    readers = [AmdSysfsReader(c, i) for i, c in enumerate(_select(cards, sel, "AMD"))]
    reason = f"{why} — AMD GPUs from amdgpu sysfs" if why and "not installed" not in why \
        else None
    return ReaderSampler(_renumber(readers, sel), hz, clock=clock, reason=reason,
                         source="amdgpu sysfs")


def open_intel(sel: str | None, hz: float, *, root: str = SYS_ROOT,
               clock: Callable[[], float] | None = None) -> ReaderSampler:
    """Intel GPUs (xe, i915) from sysfs.

    Raises:
        GpuUnavailable: no Intel GPU card here.
        ValueError: a bad selection.
    """
    cards = _cards(root, 0x8086, ("xe", "i915"))
    if not cards:
        raise GpuUnavailable("")
    period = 1.0 / hz
    readers: list[GpuReader] = [IntelSysfsReader(c, i, period)
                                for i, c in enumerate(_select(cards, sel, "Intel"))]
    source = "/".join(sorted({c.driver for c in cards if c.driver})) or "xe/i915"
    return ReaderSampler(_renumber(readers, sel), hz, clock=clock, source=f"{source} sysfs")


def _renumber(readers: list[GpuReader], sel: str | None) -> list[GpuReader]:
    """Label each device by its index among all of its vendor's GPUs ("GPU 2" for
    ``--gpus amd:2``), not by its place in the selection."""
    if sel is not None:
        for r, raw in zip(readers, sel.split(",")):
            r.index = int(raw.strip())
            r.label = f"GPU {r.index}"
    return readers


def others_note(root: str, sampled: str) -> str | None:
    """"also here, not sampled: AMD GPU card1 (--gpus amd:0)" for the cards of the
    vendors other than ``sampled`` ("NVIDIA" / "AMD" / "Intel"); None when none."""
    prefix = {"AMD": "amd", "Intel": "intel", "NVIDIA": "nvidia"}
    rest: dict[str, list[str]] = {}
    for c in drm_cards(root):
        if c.vendor_name in prefix and c.vendor_name != sampled:
            rest.setdefault(c.vendor_name, []).append(c.card)
    if not rest:
        return None
    parts = [f"{v} {', '.join(cs)} (--gpus {prefix[v]}:0)" for v, cs in rest.items()]
    return "also here, not sampled: " + "; ".join(parts)
