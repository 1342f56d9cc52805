"""`prefilltui estimate`: the back-of-envelope prefill estimate, no server needed.

    prefilltui estimate --model llama-3-8b --gpu h100-sxm --tokens 2000 [--efficiency 0.5]

The quick figure FLOPs(n) = 2*P*n + 2*L*d_attn*n^2 (the seed's back-of-envelope);
time = FLOPs / (efficiency * peak); arithmetic intensity n*d/(d+2n) against the ridge
point peak/bandwidth.  Beside it, labelled, the term-by-term matmul count MFU uses
(prefilltui/model/flops.py) and the ratio quick / exact.  Formulas and figures:
prefilltui/model/roofline.py, flops.py, catalog.py.  Every number printed is an estimate.
"""

from __future__ import annotations

import json

from prefilltui.commands.common import _positive_int, add_hardware_args, add_output_args, err
from prefilltui.model import roofline
from prefilltui.model.catalog import known_names, resolve_gpu, resolve_model
from prefilltui.exit_codes import ExitCode


def register(sub) -> None:
    p = sub.add_parser(
        "estimate", help="back-of-envelope prefill time for a model on a GPU (no server)",
        description="Estimate prefill FLOPs, time at peak and at an efficiency, prompt tokens/s, "
                    "arithmetic intensity vs the ridge point, and the attention share. "
                    "All figures are estimates from datasheet peaks and config.json shapes.")
    p.add_argument("--model", metavar="NAME",
                   help="catalog model name, HF id or GGUF file name (e.g. llama-3-8b)")
    p.add_argument("--tokens", type=_positive_int, default=2000, metavar="N",
                   help="prompt length in tokens (default 2000)")
    add_hardware_args(p)
    add_output_args(p)
    p.set_defaults(func=run)


def _fail(msg: str) -> ExitCode:
    """The one-line reason on stderr; a missing or unknown input is a usage error."""
    err(msg)
    return ExitCode.USAGE


def run(args) -> int:
    try:
        model, mnotes = resolve_model(args, None)
    except (OSError, ValueError) as e:
        return _fail(f"cannot read --model-config: {e}")
    if model is None or not model.params or not model.layers or not model.d_attn:
        what = f"unknown model {args.model!r}" if args.model else "no model given"
        return _fail(f"{what}; use --model NAME (one of {', '.join(known_names()['models'])}) or "
                     "--params, --layers and --hidden, or --model-config config.json")
    hw, hnotes = resolve_gpu(args, None)
    if args.gpu and (hw is None or hw.key == "flags") and not args.peak_tflops:
        return _fail(f"unknown GPU {args.gpu!r}; use one of {', '.join(known_names()['gpus'])} "
                     "or give --peak-tflops and --bandwidth-tbs")
    est = roofline.estimate(model.params, model.layers, model.d_attn, args.tokens,
                            hidden=model.hidden, peak_flops=hw.peak_flops if hw else None,
                            bandwidth_bytes_s=hw.bandwidth_bytes_s if hw else None,
                            efficiency=args.efficiency)
    exact = None
    try:
        exact = roofline.exact_estimate(model, args.tokens, peak_flops=hw.peak_flops if hw else None,
                                        efficiency=args.efficiency, quick_flops=est["flops"])
    except ValueError as e:  # a shape too incomplete to count: the quick figure stands alone
        mnotes.append(f"no term-by-term count: {e}")
    out = {**est, "exact": exact, "model": model.to_json(), "hardware": hw.to_json() if hw else None,
           "notes": mnotes + hnotes}
    if args.format == "json":
        print(json.dumps(out, indent=2))
    else:
        print(format_estimate(out))
    return ExitCode.OK


def format_estimate(e: dict) -> str:
    """Text for an ``estimate`` dict (ms on screen; every figure marked as an estimate)."""
    m, hw = e["model"], e["hardware"]
    q = lambda unc: " (?)" if unc else ""  # noqa: E731
    lines = [f"Prefill estimate, quick 2·P figure (estimates, not measurements) — {m['name']}{q(m['uncertain'])}: "
             f"P = {m['params'] / 1e9:.3g}e9, L = {m['layers']}, d_attn = {m['attn_width']}"]
    if hw and hw.get("peak_tflops"):
        lines.append(f"  hardware: {hw['name']} {hw['dtype']} dense peak {hw['peak_tflops']:g} TFLOP/s"
                     + (f", {hw['bandwidth_tbs']:g} TB/s" if hw.get("bandwidth_tbs") else "")
                     + q(hw["uncertain"] or str(hw.get("matched_by")).endswith("(?)")))
    lines += [
        f"  prompt:    {e['tokens']:,} tokens",
        f"  FLOPs:     {e['flops'] / 1e12:.3g} TFLOP quick 2·P estimate ({e['linear_flops'] / 1e12:.3g} "
        f"linear 2·P·n + {e['attention_flops'] / 1e12:.3g} attention 2·L·d_attn·n²)",
        f"  attention: adds {e['attention_share']:.1%} to the linear FLOPs; equal to them near "
        f"{e['attention_equal_tokens']:,.0f} tokens",
    ]
    ai = f"  arithmetic intensity: {e['arithmetic_intensity']:,.0f} FLOP/byte (d = {e['arithmetic_intensity_d']})"
    if e["ridge_point"]:
        ai += f" vs ridge point {e['ridge_point']:,.0f}: {e['bound']}-bound"
    lines.append(ai)
    if e["time_at_peak_s"]:
        lines += [
            f"  time:      {e['time_at_peak_s'] * 1e3:.1f} ms at peak, "
            f"{e['time_at_efficiency_s'] * 1e3:.1f} ms at {e['efficiency']:.0%} of peak "
            f"(linear FLOPs alone: {e['linear_time_at_peak_s'] * 1e3:.1f} / "
            f"{e['linear_time_at_efficiency_s'] * 1e3:.1f} ms)",
            f"  prefill:   {e['tokens_per_s']:,.0f} prompt tokens/s at {e['efficiency']:.0%} of peak",
        ]
    else:
        lines.append("  time:      needs a peak: give --gpu NAME or --peak-tflops T")
    lines += _exact_lines(e.get("exact"))
    lines += [f"  note: {n}" for n in e.get("notes", [])]
    return "\n".join(lines)


def _tf(v: float) -> str:
    return f"{v / 1e12:.3g}"


def _exact_lines(x: dict | None) -> list[str]:
    """The term-by-term matmul count beside the quick figure (what MFU uses)."""
    if not x:
        return []
    t = x["terms"]
    basis = {"shape": "", "params": " (linear part from P less embeddings: shape incomplete)",
             "quick": " (linear part 2·P: vocabulary unknown)"}[x["basis"]]
    linear = (f"projections {_tf(t['projections'])} + MLP {_tf(t['mlp'])}" if x["basis"] == "shape"
              else f"linear {_tf(t['linear'])}")
    out = [f"Matmul FLOPs, counted term by term (what MFU uses; estimate){basis}:",
           f"  matmul:    {_tf(x['flops'])} TFLOP = {linear} + attention {_tf(t['attention'])} "
           f"({x['attention_convention']}) + LM head {_tf(t['lm_head'])} (once); embeddings 0",
           f"  ratio:     quick 2·P estimate / matmul count = {x['quick_over_exact']:.3f}"]
    if x["time_at_peak_s"]:
        out.append(f"  time:      {x['time_at_peak_s'] * 1e3:.1f} ms at peak, "
                   f"{x['time_at_efficiency_s'] * 1e3:.1f} ms at {x['efficiency']:.0%} of peak; "
                   f"{x['tokens_per_s']:,.0f} prompt tokens/s")
    return out
