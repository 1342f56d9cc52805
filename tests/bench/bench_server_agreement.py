"""Agreement with the server: prefilltui's fit vs llama.cpp's own prefill timings.

    python -m tests.bench.bench_server_agreement [--quick] [--llama-server PATH] [--gguf PATH]

Target: the demo's llama-server (SmolLM2-135M-Instruct Q4_1 on the CPU, -t 2,
-c 4096), started with ``prefilltui.demo.server.LlamaServer`` from the cached build
(``$PREFILLTUI_LLAMA_SERVER``, ``--llama-server``, PATH or the cache; never built
here: when missing the figures are skipped with the command that builds it).
A real SweepRunner sweeps 32..512 tokens (5 log-spaced lengths x ``repeats``,
shuffled, one warm-up), cut after 90 s (45 s with --quick) on a slow machine.  Over the same fit-eligible probes:
  * throughput (1/b) of the robust fit of TTFT on tokens, the one the TUI shows, vs
    the same fit of llama.cpp's ``timings.prompt_ms`` on tokens (target within 5 %);
  * the median of TTFT - prompt_ms: what lies outside the server's prefill clock
    (HTTP, tokenization, sampling one token, the client).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from tests.bench import Row, ms, skipped

SECTION = "4 server agreement"
NOT_BUILT = "llama-server not built: run `prefilltui demo --headless` once"


def locate(opts) -> tuple[object, object] | str:
    """(binary, gguf) paths, or the reason to skip."""
    from prefilltui.demo.model import ensure_gguf
    from prefilltui.demo.steps import DemoSetupError
    from prefilltui.demo.target import find_llama_server

    try:
        binary = find_llama_server(getattr(opts, "llama_server", None)
                                   or os.environ.get("PREFILLTUI_LLAMA_SERVER"), build=False)
    except DemoSetupError:
        return NOT_BUILT
    try:
        gguf = ensure_gguf(getattr(opts, "gguf", None) or os.environ.get("PREFILLTUI_GGUF"),
                           fetch=False)
    except DemoSetupError:
        return "demo model not downloaded: run `prefilltui demo --headless` once"
    return binary, gguf


def sweep(base_url: str, repeats: int, budget_s: float) -> list:
    """The probes done within ``budget_s`` seconds (a loaded machine slows llama.cpp a
    lot: the sweep is cut there rather than the whole command running long)."""
    from prefilltui.measure.probe import ProbeClient
    from prefilltui.measure.sweep import SweepRunner
    from prefilltui.measure.sweep import SweepConfig, make_lengths

    runner = SweepRunner(lambda: ProbeClient(base_url, timeout=60.0),
                         SweepConfig(make_lengths(32, 512, 5), repeats=repeats, warmup=1,
                                     seed=1))
    runner.start()
    runner.join(budget_s)
    if runner.state == "failed":
        raise RuntimeError(f"sweep failed: {runner.state_detail}")
    runner.stop(timeout=70)
    return list(runner.results)


def run(opts) -> list[Row]:
    where = locate(opts)
    metrics = ("fit throughput vs llama.cpp timings.prompt_ms",
               "median TTFT - server prompt_ms")
    if isinstance(where, str):
        return [skipped(SECTION, metrics[0], where, "within 5 %"),
                skipped(SECTION, metrics[1], where)]
    from prefilltui.model.fit import fit_robust
    from prefilltui.demo.server import LlamaServer

    repeats, budget = (3, 45.0) if opts.quick else (6, 90.0)
    binary, gguf = where
    with LlamaServer(binary, gguf, threads=2, ctx=4096) as srv:
        results = sweep(srv.base_url, repeats, budget)
    pts = [r for r in results if r.fit_eligible and r.server_prefill_s is not None]
    if len(pts) < 3:
        return [Row(SECTION, metrics[0], f"only {len(pts)} probes with timings",
                    "within 5 %", False, {"probes": len(results)})]
    x = [r.tokens for r in pts]
    client = fit_robust(x, [r.ttft_s for r in pts])
    server = fit_robust(x, [r.server_prefill_s for r in pts])
    diff = client.prefill_tokens_per_s / server.prefill_tokens_per_s - 1
    outside = statistics.median(r.ttft_s - r.server_prefill_s for r in pts)
    data = {"probes": len(results), "used": len(pts), "binary": str(binary),
            "client_fit": client.to_json(), "server_fit": server.to_json(),
            "sum_tokens_over_sum_prompt_s": sum(x) / sum(r.server_prefill_s for r in pts),
            "median_outside_s": outside,
            "outside_by_tokens": sorted((r.tokens, r.ttft_s - r.server_prefill_s) for r in pts)}
    return [
        Row(SECTION, metrics[0],
            f"{diff * 100:+.1f} % ({client.prefill_tokens_per_s:,.0f} vs "
            f"{server.prefill_tokens_per_s:,.0f} tok/s, n={len(pts)})",
            "within 5 %", abs(diff) <= 0.05, data),
        Row(SECTION, metrics[1], ms(outside), "", None),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--llama-server", default=None)
    ap.add_argument("--gguf", default=None)
    from tests.bench import print_rows

    return print_rows(run(ap.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
