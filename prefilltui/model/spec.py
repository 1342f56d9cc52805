"""What the user tells the analysis: the roofline inputs and the fit settings, as frozen
records built once at the edge (``commands/`` from the command line, the exporter from
its TOML), and their resolution into a model shape and a piece of hardware.

``RooflineSpec`` holds the model shape and hardware a user gives (``--model``,
``--model-config``, ``--params`` ... ``--gpu``, ``--peak-tflops``, ``--dtype``,
``--efficiency``); ``AnalysisOptions`` the fit shown (``--fit``), the window
(``--window``), the baseline run (``--baseline``) and the roofline spec.  Each default
is ``model.defaults``'s, the one place it is set.

Precedence of the model shape: flags > --model-config > server metadata > catalog (by
--model, then the server's model id); of the hardware: --gpu > the first NVML name,
with --peak-tflops / --bandwidth-tbs overriding (or standing alone).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from prefilltui.model import defaults
from prefilltui.model.roofline import ModelShape, lookup_model, model_from_config
from prefilltui.model.roofline import Hardware, lookup_gpu
from prefilltui.model.slo import SloItem
from prefilltui.model.types import Dtype, FitMethod, ServerInfo


@dataclass(frozen=True, slots=True)
class RooflineSpec:
    """The roofline inputs a user gave; None = not given (resolved from the server's
    metadata, the catalog or NVML, see ``resolve_model`` / ``resolve_gpu``).

    model: a name to look up in the catalog (HF id, GGUF file name, catalog key).
    model_config: the path of a Hugging Face config.json; ``config_shape`` is the shape
        read from it once at the edge (``read_model_config``), ``config_problem`` why it
        could not be read (then the analysis says so in a note).
    params (parameters doing matmuls), layers, hidden, attn_width: shape overrides.
    gpu: a catalog GPU name; peak_tflops (dense, TFLOP/s) and bandwidth_tbs (TB/s)
        override the catalog; dtype: whose peak to use.
    efficiency: the fraction of peak of the expected-time line, in (0, 1.5].
    """

    model: str | None = None
    model_config: str | None = None
    config_shape: ModelShape | None = field(default=None, compare=False)
    config_problem: str | None = None
    params: float | None = None
    layers: int | None = None
    hidden: int | None = None
    attn_width: int | None = None
    gpu: str | None = None
    peak_tflops: float | None = None
    bandwidth_tbs: float | None = None
    dtype: Dtype = defaults.DTYPE
    efficiency: float = defaults.EFFICIENCY


@dataclass(frozen=True, slots=True)
class AnalysisOptions:
    """How a run is analysed: the fit shown (``fit``), the sliding window in probes
    (``window``), a baseline run file to compare against (``baseline``, a path read by
    the caller, never by the model), the roofline inputs and the TTFT objectives
    (``slo``: ``--slo``, the TOML ``slo``; each an ``Objective`` or a preset resolved by
    the server's model, ``model.slo``)."""

    fit: FitMethod = defaults.FIT_METHOD
    window: int = defaults.WINDOW
    baseline: str | None = None
    roofline: RooflineSpec = RooflineSpec()
    slo: tuple[SloItem, ...] = ()


def read_model_config(spec: RooflineSpec) -> RooflineSpec:
    """``spec`` with its ``--model-config`` file read (``catalog.model_from_config``)
    into ``config_shape``, or the reason it could not be into ``config_problem``.
    Called once, where the spec is built; never raises."""
    if not spec.model_config:
        return spec
    try:
        return replace(spec, config_shape=model_from_config(spec.model_config),
                       config_problem=None)
    except (OSError, ValueError) as e:
        return replace(spec, config_shape=None, config_problem=str(e))


def resolve_model(spec: RooflineSpec | None, server_info: ServerInfo | None = None
                  ) -> tuple[ModelShape | None, list[str]]:
    """Model shape from flags > --model-config > the config.json of the server's model
    directory (vLLM's /v1/models ``root``, ``ServerInfo.config_path``; labelled with its
    path) > server metadata > catalog (by ``spec.model`` / the server's model id).  Returns (shape or None, notes).  An
    unreadable --model-config (``spec.config_problem``) is skipped here; callers say
    so in their own words."""
    spec = spec or RooflineSpec()
    notes: list[str] = []
    shape: ModelShape | None = spec.config_shape
    cfg = server_info.config_path if server_info is not None else None
    if shape is None and cfg:
        try:
            shape = replace(model_from_config(cfg),
                            source=f"{cfg} (the server's /v1/models root)")
            notes.append(f"model shape from {cfg} (the directory /v1/models names as root)")
        except (OSError, ValueError) as e:
            notes.append(f"the server's model directory has an unreadable config.json ({e})")
    names = [spec.model] + ([server_info.model] if server_info else [])
    if shape is None:
        for nm in names:
            if nm and (shape := lookup_model(nm)) is not None:
                notes.append(f"model {nm!r} -> catalog {shape.name} ({shape.source})")
                break
    si = server_info
    if si is not None and (si.params or si.hidden or si.layers):
        upd = {k: v for k, v in (("params", si.params), ("hidden", si.hidden),
                                  ("layers", si.layers)) if v}
        if shape is None:
            shape = ModelShape(key="server", name=str(si.model or "server model"), params=None,
                               layers=None, hidden=None, source="server metadata",
                               uncertain=frozenset({"attn_width"}),
                               notes=("attention width assumed = hidden (?)",))
        if "hidden" in upd and shape.hidden and upd["hidden"] != shape.hidden:
            upd["attn_width"] = None
        shape = replace(shape, **upd, source=shape.source + " + server metadata")
        notes.append("model shape from the server's metadata (" + ", ".join(sorted(upd)) + ")")
    flags = {k: v for k, v in (("params", spec.params), ("layers", spec.layers),
                               ("hidden", spec.hidden), ("attn_width", spec.attn_width)) if v}
    if flags:
        if shape is None:
            shape = ModelShape(key="flags", name="given by flags", params=None, layers=None,
                               hidden=None, source="command-line flags")
        if "layers" in flags:
            flags["layers"] = int(flags["layers"])
        shape = replace(shape, **flags)
        notes.append("model shape overridden by " + ", ".join("--" + k.replace("_", "-") for k in flags))
    return shape, notes


def resolve_gpu(spec: RooflineSpec | None, nvml_names: list[str] | None = None
                ) -> tuple[Hardware | None, list[str]]:
    """Hardware from --gpu > the first NVML name > None, with --peak-tflops /
    --bandwidth-tbs overriding (or standing alone).  Returns (hardware or None, notes);
    hardware.peak_tflops None means the peak is unknown."""
    spec = spec or RooflineSpec()
    notes: list[str] = []
    dtype = spec.dtype or defaults.DTYPE
    hw = None
    if spec.gpu:
        hw = lookup_gpu(spec.gpu)
        if hw is None:
            notes.append(f"GPU {spec.gpu!r} is not in the catalog; give --peak-tflops and --bandwidth-tbs")
    elif nvml_names:
        hw = lookup_gpu(nvml_names[0])
        if hw is None:
            notes.append(f"GPU {nvml_names[0]!r} is not in the catalog; MFU needs --peak-tflops")
        if len(set(nvml_names)) > 1:
            notes.append("several GPU models visible; using the first")
    if hw is not None:
        hw = hw.for_dtype(dtype)
        if hw.matched_by.endswith("(?)"):
            names = " or ".join(", ".join(hw.variants).rsplit(", ", 1))
            notes.append(f"GPU {spec.gpu or nvml_names[0]!r} matched to {hw.name} by family, a "
                         f"guess" + (f" (--gpu {names} names the exact one)"
                                     if len(hw.variants) > 1 else ""))
        if hw.peak_tflops is None:
            notes.append(f"{hw.name} has no {dtype} peak in the catalog")
    if spec.peak_tflops or spec.bandwidth_tbs:
        if hw is None:
            hw = Hardware(key="flags", name="hardware from flags:", source="command-line flags",
                          dtype=dtype, matched_by="flags")
        hw = replace(hw, peak_tflops=spec.peak_tflops or hw.peak_tflops,
                     bandwidth_tbs=spec.bandwidth_tbs or hw.bandwidth_tbs)
        notes.append("peak/bandwidth overridden by flags")
    return hw, notes
