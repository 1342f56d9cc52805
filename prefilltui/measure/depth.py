"""Prefill at context depth: the per-token cost of n new tokens after a cached prefix.

For each depth D > 0 a shared prefix of about D server tokens is sent once with prefix
caching on (llama.cpp ``cache_prompt: true``; vLLM/SGLang cache automatically), then
probes send that prefix followed by n new, unique tokens.  The server serves the
prefix from its cache, so TTFT grows with n only, but each new token attends to the D
cached tokens: the slope of TTFT over new tokens rises with D.  Depth 0 (cold
prompts, no prefix, ``cache_prompt: false``) is measured in the same phase as the
reference, and the probes of all depths are interleaved round by round, so a machine
whose load changes over the run does not pass for a depth effect.

Every depth probe is checked: the server must report ``cached_tokens`` (usage
``prompt_tokens_details.cached_tokens`` or llama.cpp ``timings.cache_n``) within
``tolerance(D)`` of the prefix's own server-counted length; a probe that is not
verified is flagged in its ``DepthInfo`` and left out of the depth fit.

llama.cpp slots: a request goes to the idle slot whose cached tokens share the
longest prefix with it (above ``--slot-prompt-similarity``), and a slot's state can
be restored from the host-memory prompt cache (``--cache-ram``), so sequential depth
probes reuse the prefix whatever the number of slots; the verification above is what
proves it on a given server.

Formula (``prefilltui.model.roofline.flops``; an estimate): matmul FLOPs of n new tokens after
D cached ones = linear·n + 4*L*d_attn*(D*n + n(n+1)/2) + the LM head once, i.e. per
new token linear + 4*L*d_attn*(D + (n+1)/2).  ``expected_slope`` is the least-squares slope of that
curve over the probes' own new-token counts, so the expected ratio between depths
compares like with like (the n^2 part is the same at every depth).

Each result carries a ``DepthInfo`` (``ProbeResult.depth``, model.probe_notes):
``depth`` (D requested, 0 for the cold reference), ``role`` ("prefix" for the priming
request, kept out of every fit as a warm-up; "probe"; these results stay out of the
ordinary sweep's summary), ``prefix_tokens`` (the prefix's server count),
``new_tokens`` (prompt tokens - cached tokens), ``verified`` and ``flag`` (why not).
The run file keeps them under ``extra`` as ``depth``, ``depth_role``,
``depth_prefix_tokens``, ``depth_new_tokens``, ``depth_verified``, ``depth_flag``.
Imports no textual.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

from prefilltui.measure.prefix_cache import probe_with_cache
from prefilltui.model.probe_notes import DepthInfo
from prefilltui.model.depth import lengths_for_depth, verify
from prefilltui.model.prompts import build_prompt
from prefilltui.model.types import ProbeResult


@dataclass
class Prefix:
    """A primed prefix: its text, the depth asked for, the server's token count."""

    depth: int
    text: str
    tokens: int | None
    result: ProbeResult


async def prime(client: Any, depth: int) -> Prefix:
    """Send a new prefix of about ``depth`` server tokens once, cached (a warm-up
    probe marked ``depth_role: prefix``); never raises for server failures (the
    returned result says ``ok=False``)."""
    counter = client.count_tokens if client.info is not None and client.info.has_tokenize else None
    text, _w, _c = await build_prompt(depth, client.builder, client.lengths, counter)
    r = await probe_with_cache(client, text, depth, True)
    r.warmup = True
    r.depth = DepthInfo(depth=int(depth), role="prefix",
                        prefix_tokens=r.prompt_tokens if r.ok else None)
    return Prefix(int(depth), text, r.prompt_tokens if r.ok else None, r)


async def probe_at_depth(client: Any, prefix: Prefix, n: int) -> ProbeResult:
    """One probe: ``prefix`` + about ``n`` new tokens (unique from the first word),
    prefix caching on; annotated and verified (see the module docstring)."""
    counter = client.count_tokens if client.info is not None and client.info.has_tokenize else None
    tail, _w, _c = await build_prompt(n, client.builder, client.lengths, counter)
    r = await probe_with_cache(client, prefix.text + " " + tail, n, True)
    why = verify(r, prefix.tokens)
    new = (r.prompt_tokens - r.cached_tokens
           if r.ok and r.prompt_tokens is not None and r.cached_tokens is not None else None)
    r.depth = DepthInfo(depth=prefix.depth, role="probe", prefix_tokens=prefix.tokens,
                        new_tokens=new, verified=why is None, flag=why)
    return r


async def probe_cold(client: Any, n: int) -> ProbeResult:
    """One ordinary probe (no prefix, no caching) annotated as depth 0 of the depth
    phase: the reference measured alongside the deeper probes."""
    r = await client.probe(n)
    why = None if r.ok and not r.cache_hit else (
        f"failed: {r.error_kind}" if not r.ok else f"{r.cached_tokens:,} cached tokens")
    new = r.prompt_tokens - (r.cached_tokens or 0) if r.ok and r.prompt_tokens is not None else None
    r.depth = DepthInfo(depth=0, role="probe", prefix_tokens=0, new_tokens=new,
                        verified=why is None, flag=why)
    return r


async def run_depths(client: Any, depths: Sequence[int], lengths: Sequence[int], *,
                     repeats: int = 1, cap: int | None = None, seed: int | None = None,
                     on_result: Callable[[ProbeResult], Any] | None = None,
                     stopped: Callable[[], bool] = lambda: False) -> list[str]:
    """The depth phase.  Depth 0 (cold prompts) is always measured as the reference.
    First one prefix per depth D > 0 is primed; then ``repeats`` rounds, each probing
    every (depth, length that fits after it) pair once in a shuffled order, so a load
    that changes over time hits every depth alike instead of looking like a depth
    effect.  ``client`` is a discovered ProbeClient; ``on_result`` gets every result
    (prefixes included).  Returns notes (depths skipped, probes not verified)."""
    rng = random.Random(seed)
    notes: list[str] = []
    plans: dict[int, list[int]] = {}
    for depth in sorted({0} | {int(d) for d in depths if d >= 0}):
        ns = lengths_for_depth(lengths, depth, cap)
        if len(ns) < 2:
            notes.append(f"depth {depth:,} skipped: fewer than 2 lengths fit after the prefix"
                         + (f" under the {cap:,}-token prompt cap" if cap else ""))
            continue
        plans[depth] = ns
    prefixes: dict[int, Prefix] = {}
    for depth in [d for d in plans if d > 0]:
        if stopped():
            return notes
        prefix = await prime(client, depth)
        if on_result is not None:
            await _maybe_await(on_result(prefix.result))
        if prefix.result.ok:
            prefixes[depth] = prefix
        else:
            del plans[depth]
            notes.append(f"depth {depth:,} skipped: the prefix failed "
                         f"({prefix.result.error_kind}: {prefix.result.error_message})")
    flagged: dict[int, int] = {}
    sent: dict[int, int] = {}
    for _ in range(repeats):
        pairs = [(d, n) for d, ns in plans.items() for n in ns]
        rng.shuffle(pairs)
        for d, n in pairs:
            if stopped():
                break
            r = await (probe_at_depth(client, prefixes[d], n) if d else probe_cold(client, n))
            sent[d] = sent.get(d, 0) + 1
            flagged[d] = flagged.get(d, 0) + (not (r.depth and r.depth.verified))
            if on_result is not None:
                await _maybe_await(on_result(r))
    for d in sorted(flagged):
        if flagged[d]:
            notes.append(f"depth {d:,}: {flagged[d]} of {sent[d]} probes not verified "
                         + ("(cached tokens do not match the prefix)" if d else "(failed or cached)")
                         + " and left out")
    return notes


async def _maybe_await(v: Any) -> None:
    if isinstance(v, Awaitable):
        await v
