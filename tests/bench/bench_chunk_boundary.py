"""Where a prompt starts taking two chunks beside decode streams, on a real server.

    python -m tests.bench.bench_chunk_boundary URL --around 255 --streams 1 [--repeats 3]

Keeps ``--streams`` decode streams on the server (``measure.load.generator``), then sends probes
whose prompts are exactly ``around - 1``, ``around`` and ``around + 1`` tokens as the
server's ``/tokenize`` counts them, and prints each probe's TTFT, decode stall and
excess and the decode tokens that arrived during its prefill (one per chunk step).
With a chunk budget B (llama.cpp ``-b B -ub B``, vLLM ``--max-num-batched-tokens
B``) and D decode streams, a prompt of B - D tokens takes one step and B - D + 1 two:
the decode tokens use the budget's slots.  Needs a server with a tokenize endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from prefilltui.measure.server import count_tokens
from prefilltui.model.loadspec import LoadSpec
from prefilltui.options import (LoadOptions, ProbeOptions, RunFileOptions, SessionOptions,
                                SweepDesign, TelemetryOptions)
from prefilltui.session import build_session

#: Words the prompts are made of (single tokens in SmolLM2's tokenizer after a space).
WORDS = ("the", "river", "stone", "green", "house", "light", "water", "paper")


async def exact_prompt(client, n: int) -> str:
    """A prompt of exactly ``n`` server-counted tokens (ValueError when none is found)."""
    words = [WORDS[i % len(WORDS)] for i in range(n)]
    for _ in range(40):
        c = await count_tokens(client.http, client.info, " ".join(words))
        if c is None:
            raise ValueError("the server counts no tokens (no tokenize endpoint)")
        if c == n:
            return " ".join(words)
        words = words[:-1] if c > n else words + [WORDS[len(words) % len(WORDS)]]
    raise ValueError(f"no prompt of exactly {n} tokens found")


async def run(args) -> None:
    opts = SessionOptions(probe=ProbeOptions(timeout_s=args.timeout),
                          design=SweepDesign(seed=args.seed, warmup=0),
                          telemetry=TelemetryOptions(enabled=False),
                          run_file=RunFileOptions(path=args.out),
                          load=LoadOptions(spec=LoadSpec("decode", float(args.streams))))
    session = build_session(opts, args.url)
    rows: dict[int, list] = {}
    try:
        if not session.start_load(wait_s=120, min_tokens=8):
            raise SystemExit(f"load did not start: {session.load.describe()}")
        async with session.new_client(seed_offset=9) as c:
            await c.discover()
            await c.warm()
            lengths = [args.around - 1, args.around, args.around + 1]
            prompts = {n: await exact_prompt(c, n) for n in lengths}
            for _rep in range(args.repeats):
                for n in lengths:
                    for h in session.hooks:
                        await h.before_probe(c)
                    r = await c.probe(n, prompt=prompts[n])
                    for h in session.hooks:
                        await h.after_probe(r)
                    session.writer.append(r)
                    rows.setdefault(n, []).append(r)
                    print(f"{n:>5} tok (counted {r.prompt_tokens})  TTFT {r.ttft_s * 1e3:8.1f} ms  "
                          f"stall {(r.decode_stall_s or 0) * 1e3:8.1f} ms  excess "
                          f"{(r.decode_excess_s or 0) * 1e3:8.1f} ms  decode tokens "
                          f"{r.decode_tokens}", flush=True)
    finally:
        session.close()
    print(f"\nmedians over {args.repeats} repeats, {args.streams} decode stream(s):")
    def med(rs, f):
        return statistics.median(getattr(r, f) for r in rs if getattr(r, f) is not None)

    for n, rs in rows.items():
        print(f"{n:>5} tok  TTFT {med(rs, 'ttft_s') * 1e3:8.1f} ms  stall "
              f"{med(rs, 'decode_stall_s') * 1e3:8.1f} ms  excess "
              f"{med(rs, 'decode_excess_s') * 1e3:8.1f} ms  decode tokens in the window "
              f"{sorted(r.decode_tokens for r in rs)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url")
    p.add_argument("--around", type=int, default=255, help="the prompt length of the boundary")
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--out", default="/tmp/prefilltui-chunk-boundary.jsonl")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
