"""PyTorch's own FLOP count of a transformers Llama forward pass, for the FLOP tests.

Run with a python that has torch and transformers (never prefilltui's own venv: torch
is no dependency of the app); prints one JSON object on stdout:

    $TORCH_PY tests/flopcount/count_torch.py [--lengths 16,64,...]
        [--shapes smollm2-135m,llama-3-8b-2layers] [--attn eager] [--device cpu]

For each shape and prompt length n: a ``LlamaForCausalLM`` built from a config of
that shape with random weights (``torch.manual_seed(0)``, fp32, on the CPU; the
meta device cannot run transformers' mask code), one forward pass of n random token ids with ``logits_to_keep=1``
(only the last position's logits, as a serving engine computes them) under
``torch.utils.flop_counter.FlopCounterMode``.  Recorded: the total and the counter's
per-operator totals.  ``attn_implementation="eager"``: attention as two batched
matmuls the counter sees (the full n x n score matrix, masked entries included);
torch's CPU SDPA kernel (``_scaled_dot_product_flash_attention_for_cpu``) has no FLOP
formula registered in torch 2.13, so under "sdpa" the counter misses attention on a CPU.

Shapes: SmolLM2-135M (HuggingFaceTB/SmolLM2-135M config.json) and a 2-layer slice of
Llama-3-8B (meta-llama/Meta-Llama-3-8B config.json with num_hidden_layers=2).
tests/unit/fixtures/flop_counter.json is this script's output (see its "command").
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

SHAPES = {
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                         vocab_size=49152, tie_word_embeddings=True, max_position_embeddings=8192,
                         rope_theta=100000.0, rms_norm_eps=1e-5),
    "llama-3-8b-2layers": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
                               num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                               vocab_size=128256, tie_word_embeddings=False,
                               max_position_embeddings=8192, rope_theta=500000.0,
                               rms_norm_eps=1e-5),
}
#: the whole Llama-3-8B (32 layers): for the GPU device check (tests/bench/gpu/run.sh),
#: where the sweep's model is this shape; 16 GB in bf16, too big for the CPU tests
SHAPES["llama-3-8b"] = dict(SHAPES["llama-3-8b-2layers"], num_hidden_layers=32)


def count(name: str, lengths: list[int], device: str, attn: str) -> dict:
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**SHAPES[name], attn_implementation=attn)
    torch.manual_seed(0)
    # the count does not depend on the dtype; bf16 halves a GPU's memory for the weights
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype).eval()
    out = {"config": SHAPES[name], "counts": {}}
    for n in lengths:
        ids = torch.randint(0, cfg.vocab_size, (1, n), device=device)
        t0 = time.perf_counter()
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            model(input_ids=ids, logits_to_keep=1, use_cache=False)
        by_op = {str(k): int(v) for k, v in fc.get_flop_counts().get("Global", {}).items()}
        out["counts"][str(n)] = {"total": int(fc.get_total_flops()), "by_op": by_op,
                                 "seconds": round(time.perf_counter() - t0, 3)}
        print(f"{name} n={n}: {fc.get_total_flops():.6g} FLOPs", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", default="16,64,256,1024,4096")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"])
    ap.add_argument("--device", default="cpu", help="cpu (the tests' fixture) or cuda")
    a = ap.parse_args(argv)
    import torch
    import transformers

    lengths = [int(x) for x in a.lengths.split(",")]
    res = {"command": "python tests/flopcount/count_torch.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "torch": torch.__version__, "transformers": transformers.__version__,
           "python": platform.python_version(), "device": a.device, "attn_implementation": a.attn,
           "logits_to_keep": 1, "shapes": {}}
    for name in a.shapes.split(","):
        res["shapes"][name] = count(name, lengths, a.device, a.attn)
    print(json.dumps(res, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
