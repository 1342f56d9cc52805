"""A probe's server-side breakdown from a ``MetricsDelta``: ``apply_delta``, ``apply_counts``.

``apply_delta`` fills ``ProbeResult.queue_s``, ``server_running``, ``server_waiting``,
``server_ttft_s``, ``server_prefill_s`` and ``overhead_s`` from the delta of two
scrapes around the probe; ``apply_counts`` the server's cached-token and FLOP counts
when the window held only this probe (``window_is_own``).  No I/O; seconds.
"""

from __future__ import annotations

import math

from prefilltui.model.metrics.sample import MetricsDelta
from prefilltui.model.types import ProbeResult


def apply_delta(result: ProbeResult, d: MetricsDelta | None, *,
                quiet_overhead_s: float | None = None) -> None:
    """Fill the breakdown fields of ``result`` from a metrics delta (in place).

    - server TTFT / queue / prefill: taken from a histogram delta only when exactly one
      request finished that phase in the window (the probe itself; the sweep keeps one
      probe in flight).  Already-set fields (llama.cpp ``timings.prompt_ms`` in
      ``server_prefill_s``) are kept.
    - ``server_running`` / ``server_waiting``: the larger of the before/after gauges.
    - ``overhead_s`` = ttft − server TTFT, else ttft − server prefill − queue.
    - Servers without a queue metric (llama.cpp): when the server was idle around the
      probe, queue_s = 0; when other requests were running or waiting and a quiet
      overhead is known (median overhead of probes on an idle server),
      queue_s = max(0, ttft − prefill − quiet overhead) (``result.queue_source`` =
      "estimated").
    """
    if not result.ok or result.ttft_s is None:
        return
    if d is not None:
        apply_counts(result, d)
    server_ttft = None
    if d is not None:
        server_ttft = d.only("ttft")
        q = d.only("queue")
        if q is not None:
            result.queue_s = q
            result.queue_source = "metrics"
        if result.server_prefill_s is None:
            p = d.only("prefill")
            if p is not None:
                result.server_prefill_s = p
        result.server_running = d.gauge("running")
        result.server_waiting = d.gauge("waiting")
        if server_ttft is not None:
            result.server_ttft_s = server_ttft
    if server_ttft is not None:
        result.overhead_s = result.ttft_s - server_ttft
        return
    if result.server_prefill_s is None:
        return
    rest = result.ttft_s - result.server_prefill_s
    if result.queue_s is None and d is not None and "queue" not in d.hist:
        busy = (result.server_running or 0) + (result.server_waiting or 0)
        if busy <= 0 and (result.server_running is not None
                          or result.server_waiting is not None):
            result.queue_s = 0.0
            result.queue_source = "idle"
        elif busy > 0 and quiet_overhead_s is not None:
            result.queue_s = max(0.0, rest - quiet_overhead_s)
            result.queue_source = "estimated"
    result.overhead_s = rest - (result.queue_s or 0.0)


def window_is_own(result: ProbeResult, d: MetricsDelta) -> bool:
    """True when the server's prompt-token counter rose by exactly this probe's
    prompt tokens in the window: no other request's prompt was counted, so the
    window's counter deltas are this probe's own."""
    pt = d.counters.get("prompt_tokens")
    return (pt is not None and result.prompt_tokens is not None
            and round(pt) == result.prompt_tokens)


def apply_counts(result: ProbeResult, d: MetricsDelta) -> None:
    """The server's own counts for this probe, from its ``/metrics`` counters (in place).

    When ``window_is_own``: ``cached_tokens`` from the cached-token counter (vLLM
    ``prompt_tokens_by_source_total{source="local_cache_hit"}``, else the prefix-cache
    hit counter) where the response reported none (``cached_tokens_source``
    "metrics"); a response's own count is kept and the counter's is noted beside it
    (``notes.metrics_cached_tokens``) when they differ; ``server_flops`` from
    vLLM's ``estimated_flops_per_gpu_total``.  Another request in the window leaves
    them unset and says so (``notes.metrics_window``)."""
    pt = d.counters.get("prompt_tokens")
    if pt is not None and math.isfinite(pt) and pt >= 0:
        result.window_prompt_tokens = int(round(pt))
    cached = d.counters.get("cached_tokens", d.counters.get("cache_hits"))
    flops = d.counters.get("flops")
    if cached is None and flops is None:
        return
    if not window_is_own(result, d):
        result.notes.metrics_window = (
            "other requests' prompts were counted in this probe's window: the server's "
            "cached-token and FLOP counters are not attributed to it")
        return
    if cached is not None:
        n = int(round(cached))
        if result.cached_tokens is None:
            if result.prompt_tokens is not None and n <= result.prompt_tokens:
                result.cached_tokens, result.cached_tokens_source = n, "metrics"
        elif n != result.cached_tokens:
            result.notes.metrics_cached_tokens = n
    if flops is not None and flops >= 0:
        result.server_flops = float(flops)
