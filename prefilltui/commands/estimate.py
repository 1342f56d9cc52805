"""`prefilltui estimate`: the back-of-envelope prefill estimate, no server needed.

    prefilltui estimate --model llama-3-8b --gpu h100-sxm --tokens 2000 [--efficiency 0.5]

The quick figure FLOPs(n) = 2*P*n + 2*L*d_attn*n^2 (the seed's back-of-envelope);
time = FLOPs / (efficiency * peak); arithmetic intensity n*d/(d+2n) against the ridge
point peak/bandwidth.  Beside it, labelled, the term-by-term matmul count MFU uses
(prefilltui/model/roofline/flops.py) and the ratio quick / exact.  Formulas and figures:
prefilltui/model/roofline/arithmetic.py, flops.py, catalog.py, gpu_catalog.py.  Every number
printed is an estimate.
"""

from __future__ import annotations

import json

from prefilltui.commands.argtypes import _positive_int
from prefilltui.commands.common import add_hardware_args, add_output_args, err, roofline_spec
from prefilltui.model.roofline import estimate, exact_estimate
from prefilltui.model.roofline import known_names
from prefilltui.model.spec import resolve_gpu, resolve_model
from prefilltui.render.tables import format_estimate
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
    spec = roofline_spec(args)
    if spec.config_problem:
        return _fail(f"cannot read --model-config: {spec.config_problem}")
    model, mnotes = resolve_model(spec, None)
    if model is None or not model.params or not model.layers or not model.d_attn:
        what = f"unknown model {args.model!r}" if args.model else "no model given"
        return _fail(f"{what}; use --model NAME (one of {', '.join(known_names()['models'])}) or "
                     "--params, --layers and --hidden, or --model-config config.json")
    hw, hnotes = resolve_gpu(spec, None)
    if args.gpu and (hw is None or hw.key == "flags") and not args.peak_tflops:
        return _fail(f"unknown GPU {args.gpu!r}; use one of {', '.join(known_names()['gpus'])} "
                     "or give --peak-tflops and --bandwidth-tbs")
    est = estimate(model.params, model.layers, model.d_attn, args.tokens,
                            hidden=model.hidden, peak_flops=hw.peak_flops if hw else None,
                            bandwidth_bytes_s=hw.bandwidth_bytes_s if hw else None,
                            efficiency=spec.efficiency)
    notes = mnotes + hnotes
    exact = None
    try:
        exact = exact_estimate(model, args.tokens, peak_flops=hw.peak_flops if hw else None,
                                        efficiency=spec.efficiency, quick_flops=est.flops)
    except ValueError as e:  # a shape too incomplete to count: the quick figure stands alone
        notes.append(f"no term-by-term count: {e}")
    if args.format == "json":
        print(json.dumps({**est.to_json(), "exact": exact.to_json() if exact else None,
                          "model": model.to_json(), "hardware": hw.to_json() if hw else None,
                          "notes": notes}, indent=2))
    else:
        print(format_estimate(est, model, hw, notes, exact))
    return ExitCode.OK
