"""Chunk-budget detection on the real demo targets, and fit vs server prefill.

    python -m tests.bench.bench_chunk_budgets [--engine vllm|llama.cpp] [--budget N ...]
                                             [--points 28] [--max-tokens 3900]

Per budget it starts the target (vLLM ``--max-num-batched-tokens N``; llama.cpp
``-b N``, "default" for the server's own), sweeps ``--points`` lengths spread
uniformly at random over 64..``--max-tokens`` (one probe each, one warm-up), and
prints what ``detect_chunking`` says, the step test's figures, and the throughput of
the robust fit of TTFT against the same fit of the server's own prefill time (vLLM
``request_prefill_time_seconds`` histogram deltas; llama.cpp ``timings.prompt_ms``).
Nothing is asserted: the figures go to the notes.  Never builds or installs: a target
that is not cached is skipped with the command that obtains it.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path


def sweep(url: str, lengths: list[int], out: Path) -> dict:
    import contextlib
    import io

    from prefilltui.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["sweep", url, "--lengths", ",".join(map(str, lengths)), "--warmup", "1",
                   "--no-telemetry", "--out", str(out), "--format", "json"])
    if rc:
        raise RuntimeError(f"sweep exited {rc}")
    return json.loads(buf.getvalue())


def agreement(out: Path) -> dict:
    """Robust-fit throughput of TTFT and of the server's prefill time, same probes."""
    from prefilltui.model.fit import fit_robust
    from prefilltui.measure.runfile import read_run

    rs = [r for r in read_run(out)[0] if r.fit_eligible and r.server_prefill_s is not None]
    x = [r.tokens for r in rs]
    f_ttft = fit_robust(x, [r.ttft_s for r in rs])
    f_srv = fit_robust(x, [r.server_prefill_s for r in rs])
    a, b = f_ttft.prefill_tokens_per_s, f_srv.prefill_tokens_per_s
    flops = [(r.tokens, r.server_flops) for r in rs if r.server_flops]
    return {"probes": len(rs), "fit_tok_s": a, "server_tok_s": b,
            "diff_pct": 100.0 * (a / b - 1.0) if a and b else None,
            "server_flops": sorted(flops)}


def run_one(engine: str, budget: str, lengths: list[int]) -> dict:
    from prefilltui.model.diagnosis.chunking import detect_chunking, step_test
    from prefilltui.measure.runfile import read_run, read_session
    from prefilltui.model.types import server_info_from_session

    tmp = Path(tempfile.mkdtemp(prefix="prefilltui-bench-chunk-"))
    out = tmp / "run.jsonl"
    if engine == "vllm":
        from prefilltui.demo.vllm import VllmServer, installed, prepare_vllm
        if not installed():
            return {"skipped": "vLLM not installed: run `prefilltui demo --engine vllm "
                               "--prepare-only`"}
        extra = [] if budget == "default" else ["--max-num-batched-tokens", budget]
        srv = VllmServer(prepare_vllm(), extra_args=extra)
    else:
        from prefilltui.demo.server import LlamaServer
        from prefilltui.demo.target import find_llama_server
        from prefilltui.demo.model import ensure_gguf
        from prefilltui.demo.steps import DemoSetupError
        try:
            binary = find_llama_server(build=False)
        except DemoSetupError:
            return {"skipped": "llama-server not built: run `prefilltui demo --prepare-only`"}
        extra = [] if budget == "default" else ["-b", budget]
        # one thread: on a shared 2-core machine two llama.cpp threads wait on each other
        srv = LlamaServer(binary, ensure_gguf(fetch=False), threads=1, extra_args=extra)
    with srv:
        ready = srv.ready_s
        d = sweep(srv.base_url, lengths, out)
    rs = [r for r in read_run(out)[0] if r.fit_eligible]
    info = server_info_from_session(read_session(out).get("server"))
    chunk = detect_chunking(rs, server_info=info)
    blind = step_test([r.tokens for r in rs], [r.ttft_s for r in rs])  # no stated size
    return {"engine": engine, "budget": budget, "ready_s": ready,
            "stated": {"max_num_batched_tokens": info.max_num_batched_tokens,
                       "n_batch": info.n_batch, "n_ubatch": info.n_ubatch},
            "detection": chunk.line, "blind_search": blind.describe() if blind else None,
            "blind_significant": bool(blind and blind.significant),
            "fit": (d["fit"] or {}).get("prefill_tokens_per_s"),
            "agreement": agreement(out), "run_file": str(out),
            "points": [(r.tokens, round(r.ttft_s, 5)) for r in rs]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=("vllm", "llama.cpp"), default="vllm")
    p.add_argument("--budget", action="append", default=None)
    p.add_argument("--points", type=int, default=28)
    p.add_argument("--max-tokens", type=int, default=3900)
    p.add_argument("--seed", type=int, default=7)
    o = p.parse_args(argv)
    rng = random.Random(o.seed)
    lengths = sorted(rng.randint(64, o.max_tokens) for _ in range(o.points))
    for b in o.budget or (["256", "512", "2048"] if o.engine == "vllm" else ["256", "default"]):
        res = run_one(o.engine, b, lengths)
        print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
