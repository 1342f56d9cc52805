"""Prefix-cache check: does the server reuse its prefix cache, and what does it save?

``cache_check(client, tokens)`` sends a prompt cold, the same prompt again, the same
prompt with a new tail, and (llama.cpp) the same prompt with ``cache_prompt: false``;
it reports reused tokens (``cached_tokens`` from usage / llama.cpp ``timings.cache_n``)
and the TTFT saved.  ``run_cache_check`` is the same from synchronous code (the TUI's
worker thread).  The one implementation: ``prefilltui cache-check`` and the TUI's
``c`` key both call it.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Literal

from prefilltui.model.types import JsonObject, ProbeResult
from prefilltui.model.units import duration

#: What a cache check found.
CacheVerdict = Literal["on", "off", "unclear", "failed"]
#: Tokens kept free below the server's context limit (room for the new tail).
CONTEXT_MARGIN_TOKENS = 64




@dataclass
class CacheCheckResult:
    """What ``cache_check`` measured (seconds, tokens).

    verdict: "on" | "off" | "unclear" | "failed".  ``cold``/``repeat``/``prefix``/
    ``nocache`` are the probes (repeat = the same prompt again; prefix = the same
    prompt plus a new tail; nocache = the same prompt with caching disabled per
    request, llama.cpp only).  ``line`` is the one-line report.
    """

    verdict: CacheVerdict
    tokens: int | None
    line: str
    cold_ttft_s: float | None = None
    repeat_ttft_s: float | None = None
    repeat_cached: int | None = None
    prefix_ttft_s: float | None = None
    prefix_cached: int | None = None
    nocache_ttft_s: float | None = None
    nocache_cached: int | None = None
    saved_s: float | None = None
    notes: list[str] = field(default_factory=list)
    unreachable: bool = False  # discovery failed: the server was never reached
    cold_cached: int | None = None  # the cold probe's count (0 proves a fresh prompt missed)

    def to_json(self) -> JsonObject:
        return asdict(self)


def _cached_str(n: int | None) -> str:
    return "cached tokens not reported" if n is None else f"{n:,} cached"


async def probe_with_cache(client: Any, prompt: str, tokens: int, cache: bool | None,
                           hook: Any = None) -> ProbeResult:
    """One probe of ``prompt``; ``cache`` True/False sets llama.cpp ``cache_prompt`` for
    this request (through the client's ``extra_body``, applied last), None keeps the
    client's body.  Other servers cache (or not) by their own settings.  ``hook`` (a
    ``MetricsHook``) scrapes ``/metrics`` around the probe, so a server that counts
    cached tokens only there (vLLM without ``--enable-prompt-tokens-details``) still
    gives the probe its count (``cached_tokens_source`` "metrics")."""
    saved = client.extra_body
    kind = client.info.kind if client.info else "openai"
    if cache is not None and kind == "llama.cpp":
        client.extra_body = {**saved, "cache_prompt": bool(cache)}
    try:
        if hook is not None:
            await hook.before_probe(client)
        r = await client.probe(tokens, prompt=prompt)
        if hook is not None:
            await hook.after_probe(r)
        return r
    finally:
        client.extra_body = saved


def _source_note(*probes: ProbeResult) -> str | None:
    """Where the cached-token counts came from, in words (None when none was counted)."""
    srcs = {p.cached_tokens_source for p in probes if p.cached_tokens_source}
    if not srcs:
        return None
    words = {"usage": "the response's usage.prompt_tokens_details.cached_tokens",
             "timings": "llama.cpp's timings.cache_n",
             "metrics": "the server's /metrics counters around each probe"}
    return "cached tokens counted by the server: " + " and ".join(words[s] for s in sorted(srcs))


async def cache_check(client: Any, tokens: int = 512, *, tail_tokens: int = 32
                      ) -> CacheCheckResult:
    """Measure the prefix cache: cold prompt, the same prompt again, the same prefix
    with a new tail, and (llama.cpp) the same prompt with ``cache_prompt: false``.

    Discovers the server first when the client has not; ``tokens`` is capped at the
    server's context minus ``CONTEXT_MARGIN_TOKENS`` (never below 16).  Probes are
    sent with the server's default caching (llama.cpp: ``cache_prompt: true``, its
    default, overriding the probe engine's ``false``).  Never raises for server
    failures: returns verdict "failed" with the reason (``unreachable`` True when
    discovery failed).
    """
    from prefilltui.model.prompts import build_prompt
    from prefilltui.measure.server import ServerUnreachable

    if client.info is None:
        try:
            await client.discover()
        except ServerUnreachable as e:
            return CacheCheckResult("failed", None, f"server unreachable: {e}",
                                    unreachable=True)
    if client.info.context_tokens:
        tokens = min(tokens, max(16, client.info.context_tokens - CONTEXT_MARGIN_TOKENS))
    counter = client.count_tokens if client.info.has_tokenize else None
    prompt, _w, _c = await build_prompt(tokens, client.builder, client.lengths, counter)
    tail = " ".join(client.builder.words(tail_tokens))
    kind = client.info.kind
    from prefilltui.measure.metrics_hook import MetricsHook

    hook = MetricsHook()  # reader made from the probe client: same pool, auth, TLS
    cold = await probe_with_cache(client, prompt, tokens, True, hook)
    if not cold.ok:
        return CacheCheckResult("failed", None, f"cache check failed: {cold.error_message}")
    n = cold.prompt_tokens or tokens
    rep = await probe_with_cache(client, prompt, tokens, True, hook)
    pre = await probe_with_cache(client, prompt + " " + tail, tokens + tail_tokens, True, hook)
    noc = (await probe_with_cache(client, prompt, tokens, False, hook)
           if kind == "llama.cpp" else None)
    if not rep.ok:
        return CacheCheckResult("failed", n, f"cache check failed: {rep.error_message}")
    res = CacheCheckResult("unclear", n, "", cold.ttft_s, rep.ttft_s, rep.cached_tokens,
                           pre.ttft_s if pre.ok else None, pre.cached_tokens if pre.ok else None,
                           noc.ttft_s if noc and noc.ok else None,
                           noc.cached_tokens if noc and noc.ok else None)
    ratio = rep.ttft_s / cold.ttft_s if cold.ttft_s else 1.0
    reused = rep.cached_tokens
    if reused is not None:
        on = reused >= 0.5 * n
        note = _source_note(cold, rep, pre)
        if note:
            res.notes.append(note)
    else:
        on = ratio < 0.5
        res.notes.append("the server reports no cached-token count (no usage "
                         "cached_tokens, no /metrics cache counter); judged by TTFT alone")
    if on:
        res.verdict = "on"
        res.saved_s = cold.ttft_s - rep.ttft_s
    elif (reused == 0 or reused is None) and ratio > 0.7:
        res.verdict = "off"
    head = {"on": "cache on", "off": "cache off", "unclear": "cache unclear"}[res.verdict]
    line = (f"{head}: repeat of {n:,} tokens {duration(cold.ttft_s)} → {duration(rep.ttft_s)} "
            f"({_cached_str(reused)})")
    if pre.ok:
        line += (f"; shared prefix + {tail_tokens} new tokens {duration(pre.ttft_s)} "
                 f"({_cached_str(pre.cached_tokens)})")
    if noc is not None and noc.ok:
        line += f"; cache_prompt:false {duration(noc.ttft_s)} ({_cached_str(noc.cached_tokens)})"
    if res.verdict == "off" and kind in ("vllm", "sglang"):
        res.notes.append("vLLM: --enable-prefix-caching; SGLang: radix cache (off with "
                         "--disable-radix-cache)")
    res.cold_cached = cold.cached_tokens
    res.line = line
    return res


def run_cache_check(client_factory: Callable[[], Any], tokens: int = 512) -> CacheCheckResult:
    """``cache_check`` from synchronous code, with a new client from ``client_factory``
    (a session's ``new_client``: same URL, API key, TLS and timeout as the probes) and
    its own event loop.  Call it from a worker thread, never from a running loop.
    Never raises for server failures."""

    async def go() -> CacheCheckResult:
        async with client_factory() as c:
            return await cache_check(c, tokens)

    return asyncio.run(go())
