"""MFU of one sweep under each FLOP count, beside PyTorch's count of the same forward pass.

    python tests/bench/gpu/mfu_counts.py SUMMARY.json [COUNTER.json] [--model llama-3-8b]

SUMMARY.json: ``prefilltui sweep --format json`` (or ``report --format json``) of a
run; its fit gives the slope b (seconds per prompt token) over prompts x_min..x_max and
its roofline the peak FLOP/s.  COUNTER.json: ``tests/flopcount/count_torch.py`` output
for the same shape (``--shapes llama-3-8b`` on the GPU box) at two or more lengths.

MFU = (FLOPs one more prompt token costs over the fitted range) / (b x peak), for
- the quick estimate 2·P (what prefilltui showed before it counted matmuls);
- the matmul count, linear layers only;
- the matmul count with attention's causal half (what prefilltui shows: "MFU (matmul FLOPs)");
- the matmul count with attention's full square (what eager/SDPA kernels and vLLM bill);
- PyTorch's FlopCounterMode (full square; its counts are exactly quadratic in n, so
  the secant over the fitted range comes from a quadratic through them).
Prints one line per count and the counter's ratio to prefilltui's full-square count at
each counted length (1.000000 expected: tests/unit/test_flops.py).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from prefilltui.model.roofline import flops
from prefilltui.model.roofline import lookup_model


def counter_secant(counts: dict[str, dict], lo: float, hi: float) -> float:
    """(C(hi) - C(lo)) / (hi - lo) from a quadratic through the counter's totals.

    ``counts``: {"n": {"total": FLOPs}} with at least 2 lengths (3 for the n² term;
    with 2 the secant is the line through them).  Raises ValueError with fewer."""
    ns = sorted(int(k) for k in counts)
    if len(ns) < 2:
        raise ValueError("the counter needs at least two lengths")
    ys = [float(counts[str(n)]["total"]) for n in ns]
    coef = np.polyfit(np.array(ns, float), np.array(ys), min(2, len(ns) - 1))
    f = np.poly1d(coef)
    if hi <= lo:
        return float(f.deriv()(lo))
    return float((f(hi) - f(lo)) / (hi - lo))


def rows(summary: dict, model_name: str, counter: dict | None) -> list[tuple[str, float, float]]:
    """(count name, FLOPs per prompt token over the fitted range, MFU) rows.

    Raises KeyError/ValueError when the summary has no fit or no peak FLOP/s."""
    m = lookup_model(model_name)
    if m is None:
        raise ValueError(f"unknown model {model_name!r}")
    fit = summary["fit"]
    b, lo, hi = float(fit["slope_s_per_token"]), float(fit["x_min"]), float(fit["x_max"])
    peak = float(summary["roofline"]["peak_flops"])
    if b <= 0 or peak <= 0:
        raise ValueError("the fit's slope and the peak must be positive")
    per_token = [
        ("quick 2·P", 2.0 * float(m.params)),
        ("matmul, linear layers only", sum(flops.linear_flops_per_token(m)[:2])),
        ("matmul, causal attention (shown)", flops.marginal_flops(m, lo, hi, 0, "causal")),
        ("matmul, full-square attention", flops.marginal_flops(m, lo, hi, 0, "full")),
    ]
    if counter is not None:
        per_token.append(("PyTorch FlopCounterMode (full square)",
                          counter_secant(counter["counts"], lo, hi)))
    return [(name, f, f / (b * peak)) for name, f in per_token]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("summary")
    ap.add_argument("counter", nargs="?")
    ap.add_argument("--model", default="llama-3-8b")
    a = ap.parse_args(argv)
    with open(a.summary, encoding="utf-8") as f:
        summary = json.load(f)
    counter = None
    if a.counter:
        with open(a.counter, encoding="utf-8") as f:
            shapes = json.load(f)["shapes"]
        counter = next(iter(shapes.values()))
    fit, roof = summary.get("fit"), summary.get("roofline")
    if not fit or not roof or not roof.get("peak_flops"):
        print(f"{a.summary}: no fit or no peak FLOP/s in the summary (no GPU identified?); "
              "nothing to compute", file=sys.stderr)
        return 1
    print(f"fit: {fit['slope_s_per_token'] * 1e6:.2f} µs/token over {fit['x_min']:,.0f}–"
          f"{fit['x_max']:,.0f} prompt tokens; peak {summary['roofline']['peak_flops'] / 1e12:,.1f} TFLOP/s")
    for name, f, mfu in rows(summary, a.model, counter):
        print(f"  {name:40s} {f / 1e9:8.3f} GFLOP/token   MFU {mfu:6.1%}")
    shown = (summary.get("roofline") or {}).get("mfu")
    if shown is not None:
        print(f"  prefilltui's summary shows MFU {shown:.1%}")
    if counter is not None:
        m = lookup_model(a.model)
        for n, c in sorted(counter["counts"].items(), key=lambda kv: int(kv[0])):
            print(f"  n={int(n):,}: prefilltui full-square count / counter = "
                  f"{flops.total(m, int(n), 0, 'full') / c['total']:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
