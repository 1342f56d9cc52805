"""MLPerf Inference's TTFT limits as objectives: ``MLPERF_TTFT``, ``resolve``.

Source: mlcommons/inference ``loadgen/mlperf.conf`` (read at commit 001712e9), the keys
``<model>.Server.ttft_latency`` (milliseconds) of the Server scenario and of its
``-interactive`` model variants, all at ``*.Server.target_latency_percentile = 99``:

| benchmark model (mlperf.conf) | server | interactive |
|---|---|---|
| ``llama3_1-8b``   | 2000 ms | 500 ms (``llama3_1-8b-interactive``) |
| ``llama2-70b``    | 2000 ms | 450 ms (``llama2-70b-interactive``) |
| ``llama3_1-405b`` | 6000 ms | 4500 ms (``llama3_1-405b-interactive``) |
| ``mixtral-8x7b``  | 2000 ms | none |

A preset applies to a server whose model the model catalog (``model.roofline``)
matches to the benchmark's model; elsewhere it resolves to nothing, with a note
(an 8B objective says nothing about a 135M model).  Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from prefilltui.model.roofline import lookup_model
from prefilltui.model.slo.objective import Objective, SloItem, SloPreset

MLPERF_FILE = "mlcommons/inference loadgen/mlperf.conf"
#: ``*.Server.target_latency_percentile = 99`` (mlperf.conf): every TTFT limit is a p99.
MLPERF_PERCENTILE = 99.0


@dataclass(frozen=True, slots=True)
class MlperfLimit:
    """One benchmark model's TTFT limits (seconds; None: no such scenario)."""

    benchmark: str
    server_s: float
    interactive_s: float | None


#: By the model catalog's key (``model.roofline.ModelShape.key``); the catalog's
#: "llama-3-8b" row is Llama 3 and 3.1 8B (one shape), MLPerf's model the 3.1.
MLPERF_TTFT: dict[str, MlperfLimit] = {
    "llama-3-8b": MlperfLimit("llama3_1-8b", 2.000, 0.500),
    "llama-2-70b": MlperfLimit("llama2-70b", 2.000, 0.450),
    "llama-3.1-405b": MlperfLimit("llama3_1-405b", 6.000, 4.500),
    "mixtral-8x7b": MlperfLimit("mixtral-8x7b", 2.000, None),
}

# Llama 2 70B has no row in the model catalog (its roofline shape is not there): its
# name is matched here, "llama-2-70b" / "Llama-2-70b-chat-hf" / "llama2:70b".
_LLAMA2_70B = re.compile(r"llama[-_ ]?2\b.*\b70b|llama2:70b", re.IGNORECASE)


def _catalog_key(model: str | None) -> str | None:
    if not model:
        return None
    if _LLAMA2_70B.search(model):
        return "llama-2-70b"
    shape = lookup_model(model)
    return shape.key if shape is not None else None


def preset_objective(preset: SloPreset, model: str | None) -> tuple[Objective | None, str | None]:
    """The preset as an ``Objective`` for ``model`` (the server's model id), or
    (None, why not)."""
    key = _catalog_key(model)
    limit = MLPERF_TTFT.get(key) if key else None
    if limit is None:
        shown = model or "unknown"
        return None, (f"--slo {preset.name}: MLPerf has no TTFT limit for the model "
                      f"{shown[:60]!s} (presets: Llama 3.1 8B, Llama 2 70B, Llama 3.1 405B, "
                      "Mixtral 8x7B)")
    if preset.name == "mlperf-server":
        bench, value = limit.benchmark, limit.server_s
    else:
        if limit.interactive_s is None:
            return None, f"--slo {preset.name}: MLPerf has no interactive TTFT limit for {limit.benchmark}"
        bench, value = f"{limit.benchmark}-interactive", limit.interactive_s
    source = f"{preset.name} preset: {MLPERF_FILE} {bench}.Server.ttft_latency = {value * 1e3:g}"
    return Objective(value, MLPERF_PERCENTILE, source=source), None


def resolve(items: Iterable[SloItem], model: str | None) -> tuple[tuple[Objective, ...], tuple[str, ...]]:
    """The objectives of ``items`` for a server serving ``model``: each ``Objective`` as
    it is, each preset resolved (``preset_objective``); duplicates (same threshold and
    percentile) once.  Returns (objectives, notes on the presets that did not apply)."""
    out: list[Objective] = []
    notes: list[str] = []
    seen: set[tuple[float, float]] = set()
    for item in items:
        if isinstance(item, SloPreset):
            obj, why = preset_objective(item, model)
            if obj is None:
                notes.append(why or "")
                continue
        else:
            obj = item
        k = (obj.threshold_s, obj.percentile)
        if k not in seen:
            seen.add(k)
            out.append(obj)
    return tuple(out), tuple(notes)
