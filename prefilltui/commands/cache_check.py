"""``prefilltui cache-check URL``: does the server reuse its prefix cache, and what does
it save?

Sends one prompt of ``--tokens`` tokens twice (the server's default caching; for
llama.cpp ``cache_prompt: true``), then the same prompt with a new tail, then (llama.cpp)
the same prompt with ``cache_prompt: false``, and prints e.g.
``cache on: repeat of 1,900 tokens 9.1 s → 60 ms (1,899 cached); ...``.
Exit codes (``ExitCode``): OK measured, UNREACHABLE server unreachable or the probes
failed, USAGE bad options.  The check is ``core.prefix_cache.cache_check``, the one the
TUI's ``c`` key runs too.
"""

from __future__ import annotations

import asyncio
import json

from prefilltui.commands.argtypes import _positive_int, server_url
from prefilltui.commands.common import add_output_args, add_server_args, err, probe_options, say
from prefilltui.model import defaults
from prefilltui.measure.prefix_cache import cache_check
from prefilltui.exit_codes import ExitCode
from prefilltui.session import SessionError, client_factory


def register(sub) -> None:
    p = sub.add_parser(
        "cache-check", help="measure whether the server reuses its prefix cache",
        description="Send the same prompt twice (and a shared prefix with a new tail) "
                    "and report whether the server's prefix cache is on and the TTFT it "
                    "saves.  llama.cpp: also the same prompt with cache_prompt:false.")
    p.add_argument("url", type=server_url, help="server base URL, with or without /v1")
    p.add_argument("--tokens", type=_positive_int, default=defaults.CACHE_CHECK_TOKENS,
                   metavar="N", help=f"prompt length in tokens (default "
                                     f"{defaults.CACHE_CHECK_TOKENS}; capped at the context)")
    add_server_args(p)
    add_output_args(p)
    p.set_defaults(func=run)


async def _check(args) -> tuple[int, dict | None, str]:
    async with client_factory(probe_options(args), args.url)() as client:
        res = await cache_check(client, args.tokens)
        info = client.info
    if res.unreachable:
        return ExitCode.UNREACHABLE, None, res.line
    d = res.to_json()
    d.pop("unreachable", None)
    d["server"] = {"kind": info.kind, "model": info.model, "context_tokens": info.context_tokens}
    if res.verdict == "failed":
        return ExitCode.UNREACHABLE, d, res.line
    return ExitCode.OK, d, res.line


def run(args) -> int:
    try:
        code, d, line = asyncio.run(_check(args))
    except SessionError as e:
        err(str(e))
        return e.code
    except Exception as e:  # one line, never a traceback
        err(f"cache check failed: {e}")
        return ExitCode.FAILURE
    if args.format == "json" and d is not None:
        print(json.dumps(d))
    elif code == ExitCode.OK:
        say(line)
        for note in (d or {}).get("notes", []):
            say(f"  note: {note}")
    if code != ExitCode.OK:
        err(line)
    return code
