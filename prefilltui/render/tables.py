"""Text views of the summary's other parts: the depth table, the diagnosis (TTFT
breakdown, chunked prefill, cache warning, drift) and the ``estimate`` command's
figures.  Each reads a typed part (``DepthTable``, ``Diagnosis``, ``PrefillEstimate``)
and returns text; ms and µs on screen, estimates labelled.
"""

from __future__ import annotations

from prefilltui.model.diagnosis import Breakdown
from prefilltui.model.roofline import ModelShape
from prefilltui.model.roofline import Hardware
from prefilltui.model.depth import DepthTable
from prefilltui.model.fit import throughput_text
from prefilltui.model.diagnosis import Diagnosis
from prefilltui.model.roofline import MatmulEstimate, PrefillEstimate
from prefilltui.model.units import MISSING, duration, ms
from prefilltui.render.text import doubt, finite


def _x(v: float | None) -> str:
    return MISSING if v is None else f"{v:.2f}×"


def format_depth(t: DepthTable | None) -> list[str]:
    """Text lines for a depth table (ms/µs on screen); [] for None."""
    if not t:
        return []
    out = ["Prefill at context depth (x = new tokens after a cached prefix of D tokens):",
           f"  {'depth':>6} {'prefix':>7} {'cached':>7} {'probes':>7}  "
           f"{'slope µs/token [95%]':<26} {'tok/s':>7} {'ratio':>6} {'formula':>8}"]
    for r in t.rows:
        f = r.fit
        if f is not None and finite(f.slope_s_per_token) is not None:
            lo, hi = finite(f.slope_ci[0]), finite(f.slope_ci[1])
            ci = f"[{lo * 1e6:,.0f} to {hi * 1e6:,.0f}]" if lo is not None and hi is not None else ""
            slope = f"{f.slope_s_per_token * 1e6:,.0f} {ci}"
            tps = throughput_text(f, "") or MISSING
        else:
            slope, tps = "too few probes", MISSING
        probes = f"{r.verified}/{r.probes}"
        cached = MISSING if not r.depth else (f"{r.cached_tokens:,}" if r.cached_tokens
                                              is not None else "?")
        prefix = f"{r.prefix_tokens:,}" if r.prefix_tokens else MISSING
        out.append(f"  {r.depth:>6,} {prefix:>7} {cached:>7} {probes:>7}  "
                   f"{slope:<26} {tps:>7} "
                   f"{_x(r.ratio):>6} {_x(r.expected_ratio):>8}")
    out.append("  prefix, cached: server-counted tokens; probes: verified/sent; ratio: slope / "
               "depth-0 slope;")
    out.append("  formula: the same ratio from the matmul FLOPs per new token, linear + "
               "4·L·d_attn·(D + (n+1)/2) (estimate)")
    for r in t.rows:
        if r.flagged:
            out.append(f"  depth {r.depth:,}: {r.flagged} probe(s) left out: "
                       + "; ".join(r.flags[:3]))
    out += [f"  note: {n}" for n in t.notes]
    return out


def format_breakdown(b: Breakdown) -> str:
    """Text lines for a TTFT breakdown (ms on screen), for the sweep summary."""
    if not b.available or b.median is None:
        return "TTFT breakdown: " + (b.cause or MISSING)
    m = b.median
    lines = [f"TTFT breakdown (median): overhead {duration(m.overhead_s)}, queue "
             f"{duration(m.queue_s)}, prefill {duration(m.prefill_s)} of "
             f"{duration(m.ttft_s)}"]
    ic = b.intercept
    if ic is not None and ic.pinned:
        lines.append(f"intercept {duration(ic.intercept_s)} = server prefill "
                     f"{duration(ic.prefill_s)} + queue {duration(ic.queue_s)} + overhead "
                     f"{duration(ic.overhead_s)}")
    for note in ic.notes if ic is not None else ():
        lines.append(f"  ({note})")
    lines.append(b.cause)
    return "\n".join(lines)


def format_diagnosis(d: Diagnosis) -> str:
    """Text lines for a diagnosis (ms on screen)."""
    lines = [format_breakdown(d.breakdown)]
    if d.chunking.line:
        lines.append(d.chunking.line)
    if d.cache_warning:
        lines.append("warning: " + d.cache_warning)
    if d.baseline and d.baseline_used:
        lines.append("drift: " + (d.drift or "none beyond the uncertainty") + " (baseline "
                     + d.baseline + ")")
    lines += [f"note: {n}" for n in d.notes]
    return "\n".join(lines)


def format_estimate(e: PrefillEstimate, model: ModelShape, hw: Hardware | None,
                    notes: list[str], exact: MatmulEstimate | None = None) -> str:
    """Text for the ``estimate`` command (ms on screen; every figure an estimate): the
    quick 2·P figure, then ``exact``, the matmul count MFU uses, with the ratio."""
    lines = [f"Prefill estimate, quick 2·P figure (estimates, not measurements) — "
             f"{model.name}{doubt(model.doubt)}: "
             f"P = {model.params / 1e9:.3g}e9, L = {model.layers}, d_attn = {model.d_attn}"]
    if hw and hw.peak_tflops:
        lines.append(f"  hardware: {hw.name} {hw.dtype} dense peak {hw.peak_tflops:g} TFLOP/s"
                     + (f", {hw.bandwidth_tbs:g} TB/s" if hw.bandwidth_tbs else "")
                     + doubt(hw.doubt))
    lines += [
        f"  prompt:    {e.tokens:,} tokens",
        f"  FLOPs:     {e.flops / 1e12:.3g} TFLOP quick 2·P estimate ({e.linear_flops / 1e12:.3g} "
        f"linear 2·P·n + {e.attention_flops / 1e12:.3g} attention 2·L·d_attn·n²)",
        f"  attention: adds {e.attention_share:.1%} to the linear FLOPs; equal to them near "
        f"{e.attention_equal_tokens:,.0f} tokens",
    ]
    ai = (f"  arithmetic intensity: {e.arithmetic_intensity:,.0f} FLOP/byte "
          f"(d = {e.arithmetic_intensity_d})")
    if e.ridge_point:
        ai += f" vs ridge point {e.ridge_point:,.0f}: {e.bound}-bound"
    lines.append(ai)
    if e.time_at_peak_s:
        lines += [
            f"  time:      {ms(e.time_at_peak_s)} at peak, "
            f"{ms(e.time_at_efficiency_s)} at {e.efficiency:.0%} of peak "
            f"(linear FLOPs alone: {ms(e.linear_time_at_peak_s, unit=False)} / "
            f"{ms(e.linear_time_at_efficiency_s)})",
            f"  prefill:   {e.tokens_per_s:,.0f} prompt tokens/s at {e.efficiency:.0%} of peak",
        ]
    else:
        lines.append("  time:      needs a peak: give --gpu NAME or --peak-tflops T")
    lines += _matmul_lines(exact)
    lines += [f"  note: {n}" for n in notes]
    return "\n".join(lines)


def _tf(v: float) -> str:
    return f"{v / 1e12:.3g}"


def _matmul_lines(x: MatmulEstimate | None) -> list[str]:
    """The term-by-term matmul count beside the quick figure (what MFU uses)."""
    if x is None:
        return []
    t = x.terms
    basis = {"shape": "", "params": " (linear part from P less embeddings: shape incomplete)",
             "quick": " (linear part 2·P: vocabulary unknown)"}[x.basis]
    linear = (f"projections {_tf(t.projections)} + MLP {_tf(t.mlp)}" if x.basis == "shape"
              else f"linear {_tf(t.linear)}")
    out = [f"Matmul FLOPs, counted term by term (what MFU uses; estimate){basis}:",
           f"  matmul:    {_tf(x.flops)} TFLOP = {linear} + attention {_tf(t.attention)} "
           f"({x.attention_convention}) + LM head {_tf(t.lm_head)} (once); embeddings 0"]
    if x.quick_over_exact is not None:
        out.append(f"  ratio:     quick 2·P estimate / matmul count = {x.quick_over_exact:.3f}")
    if x.time_at_peak_s and x.time_at_efficiency_s and x.tokens_per_s:
        out.append(f"  time:      {ms(x.time_at_peak_s)} at peak, "
                   f"{ms(x.time_at_efficiency_s)} at {x.efficiency:.0%} of peak; "
                   f"{x.tokens_per_s:,.0f} prompt tokens/s")
    return out
