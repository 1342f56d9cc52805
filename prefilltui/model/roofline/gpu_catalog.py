"""GPU catalog for the roofline: ``Hardware`` (dense peak FLOP/s, memory bandwidth) and ``lookup_gpu``.

Every figure comes from docs/reference (shared/reference/hardware-and-models.md in the
project notes), itself from: NVIDIA H100/H200/L4/L40S/A100 datasheets and product
briefs; stas00/ml-engineering compute/accelerator/README.md; MLPerf inference v4.1
system descriptions; Baseten's A10 vs A10G note; karpathy/nanochat issue 60 (GeForce
accumulate rates); NVML names as seen in vLLM fused_moe config file names and public
``nvidia-smi -L`` outputs.  Dense = no structured sparsity.  Fields named in
``uncertain``, and a row matched by its family's name alone, are marked "(? why)" on
screen (``Hardware.doubt``).

Most of it is data: the GPU table, each row with its source; ``lookup_gpu`` matches an
NVML device name or a catalog key to a row.  The model shapes are in ``catalog``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from prefilltui.model.types import JsonObject

GPU_SOURCE = "stas00/ml-engineering accelerator table; NVML name from vLLM config names / nvidia-smi -L"


@dataclass(frozen=True, slots=True)
class Hardware:
    """One accelerator.  TFLOP/s are dense (no sparsity); bandwidth in TB/s (1e12 B/s).

    ``peak_tflops`` is the peak for the chosen dtype (set by ``for_dtype``); ``None``
    when unknown (a CPU, an unlisted GPU without --peak-tflops)."""

    key: str
    name: str
    nvml_names: tuple[str, ...] = ()
    bf16_tflops: float | None = None
    fp8_tflops: float | None = None
    bandwidth_tbs: float | None = None
    memory_gb: float | None = None
    board_w: float | None = None
    uncertain: frozenset[str] = frozenset()
    notes: tuple[str, ...] = ()
    source: str = GPU_SOURCE
    dtype: str = "bf16"
    peak_tflops: float | None = None
    matched_by: str = "catalog"  # "catalog" | "nvml-exact" | "nvml-family (?)" | "flags"
    #: matched by family: the catalog keys of the family's rows (the names that pick one)
    variants: tuple[str, ...] = ()

    @property
    def doubt(self) -> str:
        """Why its figures are marked "(?)", in words ('' when they are not): matched by
        the family's name alone (the row taken is a guess among ``variants``), or
        fields the sources leave uncertain ("uncertain in the sources: bandwidth")."""
        parts = []
        if self.matched_by.endswith("(?)"):
            parts.append(f"matched by family: the {self.name}'s figures, a guess")
        if self.uncertain:
            parts.append("uncertain in the sources: " + ", ".join(
                _FIELD_WORDS.get(f, f) for f in sorted(self.uncertain, key=_field_order)))
        return "; ".join(parts)

    @property
    def peak_flops(self) -> float | None:
        return None if self.peak_tflops is None else self.peak_tflops * 1e12

    @property
    def bandwidth_bytes_s(self) -> float | None:
        return None if self.bandwidth_tbs is None else self.bandwidth_tbs * 1e12

    @property
    def ridge_point(self) -> float | None:
        """Peak FLOP/s / memory bytes/s (FLOP per byte), when both are known."""
        if self.peak_flops is None or not self.bandwidth_bytes_s:
            return None
        return self.peak_flops / self.bandwidth_bytes_s

    def for_dtype(self, dtype: str) -> "Hardware":
        peak = self.fp8_tflops if dtype == "fp8" else self.bf16_tflops
        return replace(self, dtype=dtype, peak_tflops=peak)

    def to_json(self) -> JsonObject:
        return {
            "key": self.key, "name": self.name, "dtype": self.dtype,
            "peak_tflops": self.peak_tflops, "bandwidth_tbs": self.bandwidth_tbs,
            "ridge_point": self.ridge_point, "memory_gb": self.memory_gb,
            "board_w": self.board_w, "uncertain": sorted(self.uncertain),
            "notes": list(self.notes), "source": self.source, "matched_by": self.matched_by,
        }


def _g(key, name, nvml, bf16, fp8, bw, gb, w, unc=(), notes=(), source=None):
    return Hardware(key=key, name=name, nvml_names=tuple(nvml), bf16_tflops=bf16,
                    fp8_tflops=fp8, bandwidth_tbs=bw, memory_gb=gb, board_w=w,
                    uncertain=frozenset(unc), notes=tuple(notes),
                    source=source or f"NVIDIA {name} datasheet / product brief; " + GPU_SOURCE)


GPUS: tuple[Hardware, ...] = (
    _g("h100-sxm", "H100 SXM", ["NVIDIA H100 80GB HBM3"], 989.4, 1978.9, 3.35, 80, 700),
    _g("h100-pcie", "H100 PCIe", ["NVIDIA H100 PCIe"], 756, 1513, 2.0, 80, 350),
    _g("h100-nvl", "H100 NVL", ["NVIDIA H100 NVL"], 835.5, 1670.5, 3.9, 94, 400, ["board_w"],
       ["board power 350-400 W (?)"]),
    _g("h200", "H200 SXM", ["NVIDIA H200"], 989.4, 1978.9, 4.8, 141, 700),
    _g("h200-nvl", "H200 NVL", ["NVIDIA H200 NVL"], 835.5, 1670.5, 4.8, 141, 600),
    _g("gh200", "GH200 (HBM3)", ["NVIDIA GH200 480GB"], 989.4, 1978.9, 4.0, 96, None, ["board_w"],
       ["module power 450-1000 W (?)"]),
    _g("b200", "B200", ["NVIDIA B200"], 2250, 4500, 8.0, 192, 1000, ["bandwidth_tbs", "memory_gb"],
       ["bandwidth 7.7-8.0 TB/s (?)", "memory 180-192 GB (?)"],
       "NVIDIA DGX B200 / HGX B200 pages; stas00/ml-engineering accelerator table; MLPerf v4.1"),
    _g("a100-sxm-40gb", "A100 SXM 40GB", ["NVIDIA A100-SXM4-40GB"], 312, None, 1.555, 40, 400),
    _g("a100-sxm-80gb", "A100 SXM 80GB", ["NVIDIA A100-SXM4-80GB"], 312, None, 2.039, 80, 400),
    _g("a100-pcie-40gb", "A100 PCIe 40GB", ["NVIDIA A100-PCIE-40GB"], 312, None, 1.555, 40, 250,
       ["nvml_name"], ["NVML name NVIDIA A100-PCIE-40GB (?)"]),
    _g("a100-pcie-80gb", "A100 PCIe 80GB", ["NVIDIA A100 80GB PCIe"], 312, None, 1.935, 80, 300),
    _g("a10", "A10", ["NVIDIA A10"], 125, None, 0.60, 24, 150),
    _g("a10g", "A10G", ["NVIDIA A10G"], 70, None, 0.60, 24, None, ["bf16_tflops", "board_w"],
       ["dense BF16 ~70 TFLOP/s (?)"], "Baseten A10 vs A10G note; NVML name from nvidia-smi -L"),
    _g("l4", "L4", ["NVIDIA L4"], 121, 242.5, 0.30, 24, 72),
    _g("l40s", "L40S", ["NVIDIA L40S"], 362, 733, 0.864, 48, 350),
    _g("l40", "L40", ["NVIDIA L40"], 181, 362, 0.864, 48, 300),
    _g("t4", "T4", ["Tesla T4"], 65, None, 0.32, 16, 70, (), ["no BF16: the FP16 peak is used"]),
    _g("v100-sxm2", "V100 SXM2", ["Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"], 125, None,
       0.90, 32, 300, (), ["no BF16: the FP16 peak is used", "16 or 32 GB"]),
    _g("rtx-4090", "RTX 4090", ["NVIDIA GeForce RTX 4090"], 165.2, 330, 1.008, 24, 450, (),
       ["165.2 TFLOP/s with FP32 accumulate; 330 with FP16 accumulate"],
       "NVIDIA Ada whitepaper; karpathy/nanochat issue 60 (GeForce accumulate rates)"),
    _g("rtx-3090", "RTX 3090", ["NVIDIA GeForce RTX 3090"], 71, None, 0.936, 24, 350, (),
       ["71 TFLOP/s with FP32 accumulate; 142 with FP16 accumulate"],
       "NVIDIA Ampere GA102 whitepaper; karpathy/nanochat issue 60 (GeForce accumulate rates)"),
    _g("rtx-6000-ada", "RTX 6000 Ada", ["NVIDIA RTX 6000 Ada Generation"], 364, 728.5, 0.96, 48, 300),
    _g("mi300x", "MI300X", ["AMD Instinct MI300X"], 1307.4, 2614.9, 5.3, 192, 750, (), (),
       "AMD Instinct MI300X data sheet; stas00/ml-engineering accelerator table"),
)

#: family token -> default key when the NVML name only names the family.
_FAMILY_DEFAULT = {
    "h100": "h100-sxm", "h200": "h200", "gh200": "gh200", "b200": "b200", "a100": "a100-sxm-80gb",
    "a10": "a10", "a10g": "a10g", "l4": "l4", "l40s": "l40s", "l40": "l40", "t4": "t4",
    "v100": "v100-sxm2", "4090": "rtx-4090", "3090": "rtx-3090", "6000": "rtx-6000-ada",
    "mi300x": "mi300x",
}
_GPU_NOISE = {"nvidia", "tesla", "geforce", "amd", "instinct", "rtx", "generation", "gpu"}


#: Words for the fields a catalog row may mark uncertain, in the order they are said.
_FIELD_WORDS = {"bf16_tflops": "BF16 peak", "fp8_tflops": "FP8 peak",
                "bandwidth_tbs": "bandwidth", "memory_gb": "memory",
                "board_w": "board power", "nvml_name": "NVML name"}


def _field_order(field: str) -> int:
    return list(_FIELD_WORDS).index(field) if field in _FIELD_WORDS else len(_FIELD_WORDS)


def _gpu_tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[\s\-_/,()]+", name.lower()) if t and t not in _GPU_NOISE]


def lookup_gpu(name: str | None) -> Hardware | None:
    """Catalog entry for an NVML device name or a catalog key ("h100-sxm"), else None.

    Exact NVML names and keys match as is; otherwise the family token (h100, a100,
    4090, ...) is matched and the variant with most shared tokens (pcie, nvl, sxm4,
    80gb ...) wins -- marked ``matched_by="nvml-family (?)"`` because it is a guess
    (e.g. "Tesla V100-PCIE-16GB" gets the SXM2 figures)."""
    if not name or not name.strip():
        return None
    low = name.strip().lower()
    for g in GPUS:
        if low == g.key or low.replace(" ", "-") == g.key or low == g.name.lower():
            return replace(g, matched_by="catalog")
        if any(low == n.lower() for n in g.nvml_names):
            return replace(g, matched_by="nvml-exact")
    toks = _gpu_tokens(name)
    if "ada" in toks and "6000" in toks:
        return replace(_by_key("rtx-6000-ada"), matched_by="nvml-family (?)",
                       variants=("rtx-6000-ada",))
    fam = next((t for t in toks if t in _FAMILY_DEFAULT), None)
    if fam is None:
        return None
    cands = [g for g in GPUS if fam in {t for n in g.nvml_names for t in _gpu_tokens(n)}
             or fam in _gpu_tokens(g.key)]
    if not cands:
        return None
    tokset = set(toks)

    def score(g: Hardware) -> tuple[int, int]:
        gt = {t for n in (g.key, g.name, *g.nvml_names) for t in _gpu_tokens(n)}
        variant = {"pcie", "nvl", "sxm", "sxm2", "sxm4", "40gb", "80gb", "hbm3"}
        return (len(tokset & gt & variant) - len((gt & variant) - tokset - {"sxm", "hbm3"}),
                int(g.key == _FAMILY_DEFAULT[fam]))

    best = max(cands, key=score)
    return replace(best, matched_by="nvml-family (?)", variants=tuple(g.key for g in cands))


def _by_key(key: str) -> Hardware:
    return next(g for g in GPUS if g.key == key)

