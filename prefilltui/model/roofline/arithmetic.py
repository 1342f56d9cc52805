"""Roofline arithmetic for prefill: FLOPs, arithmetic intensity, expected time, MFU.

Two FLOP counts (formulas: shared/reference/hardware-and-models.md, "Physics"; Kaplan
et al. 2020 Table 1; PaLM appendix B via nanoGPT ``estimate_mfu``):
  quick     FLOPs(n) = 2*P*n + 2*L*d_attn*n^2  -- the seed's back-of-envelope, shown
            by ``estimate`` only (P counts the embedding table and the LM head for
            every token: ~13 % too many FLOPs for Llama-3-8B, ~20 % for SmolLM2-135M);
  matmul    the term-by-term count of ``prefilltui.model.roofline.flops`` (projections, MLP,
            causal attention, LM head once per request, embeddings as lookups): what
            MFU, the roofline lines and the verdict use ("MFU (matmul FLOPs)").
  AI(n)     = 2*n*d^2 / (2 bytes * (d^2 + 2*n*d)) = n*d / (d + 2n)   (d x d bf16 matmul)
  ridge     = peak FLOP/s / memory bytes/s
  t(n)      = FLOPs(n) / (efficiency * peak)
  MFU       = F' / (b * peak)   (b = fitted seconds per prompt token, F' = the FLOPs
            one more prompt token costs over the fitted range, ``flops.marginal_flops``)
All figures are estimates; callers must label them so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Literal

import numpy as np

from prefilltui.model import units
from prefilltui.model.roofline import flops as flopcount
from prefilltui.model.types import JsonObject

#: MFU thresholds for the verdict.  Tuned engines reach ~40-55 % of dense peak on
#: prompts >= 2k tokens and plain matmuls ~80 % ("MAMF", reference file), so >= 40 %
#: is healthy; 20-40 % is half of what tuned engines get; < 20 % is under half of
#: even that -- a configuration problem, not tuning.
HEALTHY_MFU = 0.40
LOW_MFU = 0.20

#: How MFU is named on screen and in the summary: the count behind it.
MFU_LABEL = "MFU (matmul FLOPs)"

WHAT_TO_CHECK = ("memory-bound prompts (too short: probe >= 2k tokens)", "wrong dtype (fp32, or "
                 "a quantised model dequantising on the fly)", "CPU offload / too little GPU memory",
                 "queueing behind other requests (look at the intercept and the queue time)",
                 "chunked prefill with a small chunk", "a peak or parameter count that does not "
                 "match the deployment (--peak-tflops, --params, tensor-parallel GPUs)")


def prefill_flops(n: Any, params: float, layers: int, d_attn: int) -> Any:
    """Prefill FLOPs for ``n`` prompt tokens (scalar or ndarray): 2*P*n + 2*L*d_attn*n^2."""
    n = np.asarray(n, dtype=float)
    out = 2.0 * params * n + 2.0 * layers * d_attn * n * n
    return float(out) if out.ndim == 0 else out


def attention_share(n: float, params: float, layers: int, d_attn: int) -> float:
    """Attention FLOPs as a fraction of the linear FLOPs (what attention *adds*):
    L*d_attn*n / P.  Llama-3-8B: 0.033 at 2k, 0.52 at 32k, 1 near 61k."""
    return layers * d_attn * float(n) / params


def attention_equal_tokens(params: float, layers: int, d_attn: int) -> float:
    """Prompt length where attention FLOPs equal the linear FLOPs: P / (L*d_attn)."""
    return params / (layers * d_attn)


def arithmetic_intensity(n: Any, d: int) -> Any:
    """FLOP per byte of a d x d bf16 weight matmul over n tokens: n*d / (d + 2n)."""
    n = np.asarray(n, dtype=float)
    out = n * d / (d + 2.0 * n)
    return float(out) if out.ndim == 0 else out


def ridge_point(peak_flops: float, bandwidth_bytes_s: float) -> float:
    """Peak FLOP/s / memory bytes/s: the arithmetic intensity above which a kernel is compute-bound."""
    return peak_flops / bandwidth_bytes_s


@dataclass(frozen=True, slots=True)
class PrefillEstimate:
    """A back-of-envelope prefill estimate for one prompt of ``tokens`` tokens (every
    value an estimate).  FLOPs: ``flops`` = ``linear_flops`` (2*P*n) +
    ``attention_flops`` (2*L*d_attn*n^2); ``attention_share`` = attention / linear,
    ``attention_fraction`` = attention / total, ``attention_equal_tokens`` where they
    are equal.  ``arithmetic_intensity`` (FLOP/byte, d = ``arithmetic_intensity_d``)
    against ``ridge_point``: ``bound`` "compute" | "memory" (None without a ridge).
    Times in seconds at the peak and at ``efficiency`` of it, ``tokens_per_s`` at the
    efficiency; None when the peak is unknown."""

    tokens: int
    flops: float
    linear_flops: float
    attention_flops: float
    attention_share: float
    attention_fraction: float
    attention_equal_tokens: float
    arithmetic_intensity: float
    arithmetic_intensity_d: int
    ridge_point: float | None
    bound: Literal["compute", "memory"] | None
    peak_flops: float | None
    efficiency: float
    time_at_peak_s: float | None
    time_at_efficiency_s: float | None
    tokens_per_s: float | None
    linear_time_at_peak_s: float | None
    linear_time_at_efficiency_s: float | None
    estimate: bool = True

    def to_json(self) -> JsonObject:
        return asdict(self)


def estimate(params: float, layers: int, d_attn: int, tokens: int, *, hidden: int | None = None,
             peak_flops: float | None = None, bandwidth_bytes_s: float | None = None,
             efficiency: float = 0.5) -> PrefillEstimate:
    """Back-of-envelope prefill estimate for one prompt (``PrefillEstimate``; all values
    estimates).  Times/ridge are None when the peak/bandwidth is unknown.

    Raises:
        ValueError: for non-positive inputs or an efficiency outside (0, 1.5].
    """
    if min(params, layers, d_attn, tokens) <= 0 or not 0 < efficiency <= 1.5:
        raise ValueError("params, layers, d_attn and tokens must be > 0, efficiency in (0, 1.5]")
    lin = 2.0 * params * tokens
    att = 2.0 * layers * d_attn * float(tokens) ** 2
    flops = lin + att
    d = hidden or d_attn
    ai = arithmetic_intensity(tokens, d)
    ridge = ridge_point(peak_flops, bandwidth_bytes_s) if peak_flops and bandwidth_bytes_s else None
    t_peak = flops / peak_flops if peak_flops else None
    t_eff = flops / (peak_flops * efficiency) if peak_flops else None
    return PrefillEstimate(
        tokens=int(tokens), flops=flops, linear_flops=lin, attention_flops=att,
        attention_share=att / lin, attention_fraction=att / flops,
        attention_equal_tokens=attention_equal_tokens(params, layers, d_attn),
        arithmetic_intensity=ai, arithmetic_intensity_d=d, ridge_point=ridge,
        bound=None if ridge is None else ("compute" if ai >= ridge else "memory"),
        peak_flops=peak_flops, efficiency=efficiency,
        time_at_peak_s=t_peak, time_at_efficiency_s=t_eff,
        tokens_per_s=tokens / t_eff if t_eff else None,
        linear_time_at_peak_s=lin / peak_flops if peak_flops else None,
        linear_time_at_efficiency_s=lin / (peak_flops * efficiency) if peak_flops else None)


@dataclass(frozen=True, slots=True)
class MatmulEstimate:
    """The term-by-term matmul FLOPs of one prompt of ``tokens`` tokens and its
    expected prefill time (every value an estimate).  ``terms``: the count by term
    (``flops.FlopCount``); ``basis`` and ``attention_convention`` as there.  Times in
    seconds at the peak and at ``efficiency`` of it, ``tokens_per_s`` at the
    efficiency (None without a peak); ``quick_over_exact``: the quick 2·P figure over
    this count, when it was given."""

    tokens: int
    flops: float
    terms: flopcount.FlopCount
    basis: flopcount.Basis
    attention_convention: flopcount.Attention
    efficiency: float
    time_at_peak_s: float | None
    time_at_efficiency_s: float | None
    tokens_per_s: float | None
    quick_over_exact: float | None = None
    estimate: bool = True

    def to_json(self) -> JsonObject:
        return {"tokens": self.tokens, "flops": self.flops, "terms": self.terms.to_json(),
                "basis": self.basis, "attention_convention": self.attention_convention,
                "efficiency": self.efficiency, "time_at_peak_s": self.time_at_peak_s,
                "time_at_efficiency_s": self.time_at_efficiency_s,
                "tokens_per_s": self.tokens_per_s, "quick_over_exact": self.quick_over_exact,
                "estimate": self.estimate}


def exact_estimate(model: flopcount.Shape, tokens: int, *, peak_flops: float | None = None,
                   efficiency: float = 0.5, quick_flops: float | None = None) -> MatmulEstimate:
    """The matmul count of one prompt and its expected time (``MatmulEstimate``).

    Raises:
        ValueError: as ``flops.count`` (a shape without layers / attention width / params).
    """
    c = flopcount.count(model, tokens)
    t_peak = c.total / peak_flops if peak_flops else None
    t_eff = c.total / (peak_flops * efficiency) if peak_flops else None
    return MatmulEstimate(
        tokens=int(tokens), flops=c.total, terms=c, basis=c.basis,
        attention_convention=c.attention_convention, efficiency=efficiency,
        time_at_peak_s=t_peak, time_at_efficiency_s=t_eff,
        tokens_per_s=tokens / t_eff if t_eff else None,
        quick_over_exact=quick_flops / c.total if quick_flops and c.total else None)


def achieved_flops(slope_s_per_token: float, flops_per_token: float) -> float | None:
    """FLOP/s implied by the fitted slope: F' / b (None when b <= 0).  ``flops_per_token``
    = F', the FLOPs one more prompt token costs (``flops.marginal_flops``)."""
    return flops_per_token / slope_s_per_token if slope_s_per_token > 0 else None


def mfu(slope_s_per_token: float, flops_per_token: float, peak_flops: float | None) -> float | None:
    """Model FLOPs utilisation F' / (b * peak); None when the peak is unknown or b <= 0."""
    if not peak_flops or slope_s_per_token <= 0:
        return None
    return flops_per_token / (slope_s_per_token * peak_flops)


def mfu_with_attention(a_b_c: tuple[float, float, float], n: float, model: flopcount.Shape,
                       peak_flops: float | None) -> float | None:
    """MFU at prompt length n when the quadratic fit applies: the request's matmul
    FLOPs less the LM head (a per-request cost, in the intercept) over the fitted
    prefill time b n + c n², over the peak.  None without a peak or a positive time."""
    _a, b, c = a_b_c
    t = b * n + c * n * n
    if not peak_flops or t <= 0:
        return None
    f = flopcount.count(model, n)
    return (f.total - f.lm_head) / (t * peak_flops)


def verdict(mfu_value: float | None, *, achieved: float | None = None,
            throughput: str | None = None, max_tokens: float | None = None,
            ridge: float | None = None, hidden: int | None = None) -> tuple[str, str]:
    """(level, plain-words judgement).  level: "healthy" | "below" | "wrong" |
    "impossible" | "unknown-peak" | "short-prompts".

    ``throughput`` says the throughput of the slope ``achieved`` and ``mfu_value`` come
    from (1 / b: one slope for all three), as ``analysis.assess`` words it ("4,042
    prompt tok/s (the quadratic fit's linear term)", or that it is too noisy yet, with
    no ``achieved``: ``fit.throughput_text``).
    Thresholds: HEALTHY_MFU (0.40) and LOW_MFU (0.20), see their comment.  When the
    longest prompt's arithmetic intensity is below the ridge point the prompts are
    memory-bound, so a low MFU is expected and the verdict says to probe longer ones.
    """
    ach = "" if achieved is None else f"{units.flops(achieved)} achieved"
    facts = ", ".join(s for s in (throughput, ach) if s)
    if mfu_value is None:
        est = "" if achieved is None and throughput else " (estimate)"  # the FLOP/s are
        return ("unknown-peak", f"Peak unknown (CPU or unlisted GPU): {facts or 'no fit yet'}"
                f"{est}. MFU needs --peak-tflops (and --gpu / --params if not detected).")
    pct = f"{MFU_LABEL} {mfu_value:.0%} of dense peak (estimate)"
    if mfu_value > 1.05:
        return ("impossible", f"{pct} is above 100 %: the peak, the parameter count or the token "
                "count is wrong (prefix-cache hits not reported? tensor-parallel over several "
                "GPUs? MoE active params?). Check --peak-tflops and --params.")
    short = False
    if max_tokens and ridge and hidden:
        short = arithmetic_intensity(max_tokens, hidden) < ridge
    if mfu_value >= HEALTHY_MFU:
        return ("healthy", f"{pct}: healthy compute-bound prefill ({facts}).")
    if short:
        return ("short-prompts", f"{pct}, but the longest prompt ({max_tokens:,.0f} tokens) is "
                f"below the ridge point ({ridge:.0f} FLOP/byte): memory-bound by nature. Probe "
                "prompts of 2k tokens or more before judging.")
    if mfu_value >= LOW_MFU:
        return ("below", f"{pct}: below expectations (tuned engines reach 40-55 % on prompts "
                f">= 2k). Worth checking: {WHAT_TO_CHECK[4]}; {WHAT_TO_CHECK[1]}.")
    return ("wrong", f"{pct}: something is wrong. Check: " + "; ".join(WHAT_TO_CHECK) + ".")


@dataclass(frozen=True, slots=True)
class ServerFlopsCheck:
    """The server's own FLOP count per probe against ``prefill_flops``: ``probes`` used,
    the ratio server / formula (median, min, max), and ``rows`` (tokens, server FLOPs,
    formula FLOPs, ratio) sorted by tokens."""

    probes: int
    ratio_median: float
    ratio_min: float
    ratio_max: float
    rows: tuple[tuple[int, float, float, float], ...]

    def to_json(self) -> JsonObject:
        return {"probes": self.probes, "ratio_median": self.ratio_median,
                "ratio_min": self.ratio_min, "ratio_max": self.ratio_max,
                "rows": [list(r) for r in self.rows]}


def server_flops_check(points: Any, formula: Callable[[int], float]
                       ) -> ServerFlopsCheck | None:
    """The server's own FLOP count per probe beside prefilltui's (vLLM
    ``--enable-mfu-metrics``: ``vllm:estimated_flops_per_gpu_total`` deltas).

    ``points``: (prompt tokens, server FLOPs) pairs; ``formula(n)``: prefilltui's FLOPs
    for n prompt tokens (``flops.total``, the matmul count MFU uses).  None when no
    point is usable.  vLLM counts attention's n² in full and the LM head per prefill
    step (``flops.vllm_expected_flops``), so the ratio is a cross-check of the counts,
    not a correction of either.  Raises what ``formula`` raises.
    """
    rows = []
    for n, f in points:
        if n and n > 0 and f and f > 0:
            mine = float(formula(int(n)))
            rows.append((int(n), float(f), mine, float(f) / mine))
    if not rows:
        return None
    rows.sort()
    ratios = sorted(r[3] for r in rows)
    mid = len(ratios) // 2
    med = ratios[mid] if len(ratios) % 2 else 0.5 * (ratios[mid - 1] + ratios[mid])
    return ServerFlopsCheck(len(rows), med, ratios[0], ratios[-1], tuple(rows))
