"""``prefilltui cache-check URL``: does the server reuse its prefix cache, and what does
it save?

Sends one prompt of ``--tokens`` tokens twice (the server's default caching; for
llama.cpp ``cache_prompt: true``), then the same prompt with a new tail, then (llama.cpp)
the same prompt with ``cache_prompt: false``, and prints e.g.
``cache on: repeat of 1,900 tokens 9.1 s → 60 ms (1,899 cached); ...``.
Exit codes: 0 measured, 3 server unreachable or the probes failed, 2 usage.
"""

from __future__ import annotations

import asyncio
import json
import sys

from prefilltui.commands.common import (_positive_int, add_output_args, add_server_args,
                                        read_api_key)


def register(sub) -> None:
    p = sub.add_parser(
        "cache-check", help="measure whether the server reuses its prefix cache",
        description="Send the same prompt twice (and a shared prefix with a new tail) "
                    "and report whether the server's prefix cache is on and the TTFT it "
                    "saves.  llama.cpp: also the same prompt with cache_prompt:false.")
    p.add_argument("url", help="server base URL, with or without /v1")
    p.add_argument("--tokens", type=_positive_int, default=512, metavar="N",
                   help="prompt length in tokens (default 512; capped at the context)")
    add_server_args(p)
    add_output_args(p)
    p.set_defaults(func=run)


async def _check(args) -> tuple[int, dict | None, str]:
    from prefilltui.core.diagnose import cache_check
    from prefilltui.core.probe import ProbeClient
    from prefilltui.core.server import ServerUnreachable

    key = read_api_key(args)
    async with ProbeClient(args.url, api=args.api, model=args.model, api_key=key,
                           timeout=args.timeout, verify=not args.insecure) as client:
        try:
            info = await client.discover()
        except ServerUnreachable as e:
            return 3, None, f"server unreachable: {e}"
        tokens = args.tokens
        if info.context_tokens:
            tokens = min(tokens, max(16, info.context_tokens - 64))  # room for the tail
        res = await cache_check(client, tokens)
    d = res.to_json()
    d["server"] = {"kind": info.kind, "model": info.model, "context_tokens": info.context_tokens}
    if res.verdict == "failed":
        return 3, d, res.line
    return 0, d, res.line


def run(args) -> int:
    try:
        code, d, line = asyncio.run(_check(args))
    except Exception as e:  # one line, never a traceback
        print(f"prefilltui: cache check failed: {e}", file=sys.stderr)
        return 1
    if args.format == "json" and d is not None:
        print(json.dumps(d))
    elif code == 0:
        print(line)
        for note in (d or {}).get("notes", []):
            print(f"  note: {note}")
    if code != 0:
        print(f"prefilltui: {line}", file=sys.stderr)
    return code
