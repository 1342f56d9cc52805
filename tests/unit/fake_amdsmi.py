"""A fake ``amdsmi`` module of the documented shape (ROCm/amdsmi py-interface/README.md):
the functions the AMD reader calls, their dict keys, units (power W, power cap µW,
VRAM MiB, energy counts × counter_resolution µJ) and "N/A" for an unsupported value.

``FakeAmdSmi(gpus)`` is a module object (``types.ModuleType``) so tests inject it as
``sys.modules["amdsmi"]`` or pass it as ``amdsmi_module``; each ``FakeGpu`` holds the
values a test changes between samples.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, code: int, info: str = "") -> None:
        super().__init__(f"amdsmi error {code}: {info}")
        self.err_code = code


@dataclass
class FakeGpu:
    name: str = "AMD Instinct MI300X"
    bdf: str = "0000:05:00.0"
    gfx: object = 0            # % or "N/A"
    current_w: object = 150    # W or "N/A"
    average_w: object = 148
    energy_count: int = 0      # counts of ``resolution`` µJ
    resolution: float = 15.3
    cap_uw: int = 750_000_000
    vram_used_mib: int = 2048
    vram_total_mib: int = 196_592
    old_energy_key: bool = False  # before amdsmi 6.2.1 the count was under "power"
    fail: dict = field(default_factory=dict)  # function name -> exception to raise


class FakeAmdSmi(types.ModuleType):
    def __init__(self, gpus: list[FakeGpu], init_error: Exception | None = None) -> None:
        super().__init__("amdsmi")
        self.gpus = gpus
        self.init_error = init_error
        self.calls: list[str] = []
        self.AmdSmiException = AmdSmiException
        self.AmdSmiLibraryException = AmdSmiLibraryException

    def _gpu(self, fn: str, h: FakeGpu) -> FakeGpu:
        self.calls.append(fn)
        if fn in h.fail:
            raise h.fail[fn]
        return h

    def amdsmi_init(self, *flags) -> None:
        self.calls.append("amdsmi_init")
        if self.init_error is not None:
            raise self.init_error

    def amdsmi_shut_down(self) -> None:
        self.calls.append("amdsmi_shut_down")

    def amdsmi_get_processor_handles(self) -> list[FakeGpu]:
        return list(self.gpus)

    def amdsmi_get_gpu_device_bdf(self, h: FakeGpu) -> str:
        return self._gpu("amdsmi_get_gpu_device_bdf", h).bdf

    def amdsmi_get_gpu_asic_info(self, h: FakeGpu) -> dict:
        return {"market_name": self._gpu("amdsmi_get_gpu_asic_info", h).name,
                "vendor_id": "0x1002", "device_id": "0x74a1"}

    def amdsmi_get_gpu_activity(self, h: FakeGpu) -> dict:
        g = self._gpu("amdsmi_get_gpu_activity", h)
        return {"gfx_activity": g.gfx, "umc_activity": 0, "mm_activity": "N/A"}

    def amdsmi_get_power_info(self, h: FakeGpu) -> dict:
        g = self._gpu("amdsmi_get_power_info", h)
        return {"current_socket_power": g.current_w, "average_socket_power": g.average_w,
                "gfx_voltage": "N/A", "soc_voltage": "N/A", "mem_voltage": "N/A",
                "power_limit": 750}

    def amdsmi_get_energy_count(self, h: FakeGpu) -> dict:
        g = self._gpu("amdsmi_get_energy_count", h)
        key = "power" if g.old_energy_key else "energy_accumulator"
        return {key: g.energy_count, "counter_resolution": g.resolution, "timestamp": 0}

    def amdsmi_get_power_cap_info(self, h: FakeGpu) -> dict:
        g = self._gpu("amdsmi_get_power_cap_info", h)
        return {"power_cap": g.cap_uw, "default_power_cap": g.cap_uw, "dpm_cap": 0,
                "min_power_cap": 0, "max_power_cap": g.cap_uw}

    def amdsmi_get_gpu_vram_usage(self, h: FakeGpu) -> dict:
        g = self._gpu("amdsmi_get_gpu_vram_usage", h)
        return {"vram_used": g.vram_used_mib, "vram_total": g.vram_total_mib}
