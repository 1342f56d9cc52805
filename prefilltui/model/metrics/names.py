"""What each server kind publishes on ``/metrics``: the Prometheus names, one table per kind.

Each table (``VLLM``, ``SGLANG``, ``TGI``, ``LLAMA_CPP``) gives the source of every
name; ``names_for`` looks one up by server kind, ``enable_hint`` says how to make a
server publish its metrics, ``metrics_url`` where they are served.  Data only: no I/O.

Names are written as the engine spells them today; a scrape also reads them with every
``:`` as ``_`` (``canonical``): SGLang's prefix went from ``sglang:`` to ``sglang_``
(sgl-project/sglang#15758) and back (#20821), and an exporter or gateway in between
(OpenTelemetry, some Prometheus relays) rewrites ``vllm:`` to ``vllm_``.  The exact
spelling wins when both are published; the two are never added up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prefilltui.model.metrics.ranks import FLAT, RankLayout


@dataclass(frozen=True)
class MetricNames:
    """The Prometheus names one server kind publishes, newest name first.

    Histogram entries are base names (``_sum``/``_count`` are appended); counters are
    given with ``_total``.  ``prefill_labels`` filters the prefill histogram's series
    (TGI keeps prefill and decode in one family, split by ``method``).
    """

    kind: str
    ttft: tuple[str, ...] = ()  # histogram: server-side time to first token, s
    queue: tuple[str, ...] = ()  # histogram: time waiting before scheduling, s
    prefill: tuple[str, ...] = ()  # histogram: prefill (prompt) phase, s
    prefill_labels: tuple[tuple[str, str], ...] = ()
    itl: tuple[str, ...] = ()  # histogram: inter-token latency, s (buckets kept too)
    stages: tuple[str, ...] = ()  # histogram by ``stage`` label: per-stage latency, s
    prompt_seconds: tuple[str, ...] = ()  # counter: total prompt processing time, s
    prompt_tokens: tuple[str, ...] = ()  # counter: prompt tokens processed
    cached_tokens: tuple[str, ...] = ()  # counter: prompt tokens served from the prefix cache
    cached_labels: tuple[tuple[str, str], ...] = ()  # filters cached_tokens' series
    cache_queries: tuple[str, ...] = ()  # counter: prefix-cache queries (tokens)
    cache_hits: tuple[str, ...] = ()  # counter: prefix-cache hits (tokens)
    cache_hit_rate: tuple[str, ...] = ()  # gauge: 0..1
    running: tuple[str, ...] = ()  # gauge: requests being processed
    waiting: tuple[str, ...] = ()  # gauge: requests waiting for a slot / in the queue
    flops: tuple[str, ...] = ()  # counter: the server's own FLOP estimate of its work
    enable_hint: str = ""  # how to make the server publish /metrics
    #: name prefixes of this engine's own series (either spelling): a page with some of
    #: them has metrics on, whatever else it lacks
    prefixes: tuple[str, ...] = ()
    #: how its per-rank series combine (``ranks``)
    layout: RankLayout = field(default=FLAT)
    #: info gauges (value 1) whose labels state the engine's config (``identity``)
    config_info: tuple[str, ...] = ()


def canonical(name: str) -> str:
    """A metric name with every ``:`` as ``_`` (both spellings compare equal)."""
    return name.replace(":", "_")


#: vLLM: vllm/v1/metrics/loggers.py and docs/design/metrics.md (v1 names first,
#: v0 ``gpu_prefix_cache_hit_rate`` kept for old servers).  Served by default.
VLLM = MetricNames(
    kind="vllm",
    ttft=("vllm:time_to_first_token_seconds",),
    queue=("vllm:request_queue_time_seconds",),
    prefill=("vllm:request_prefill_time_seconds",),
    # every decode gap of every request, bucketed (not tied to a request): read under
    # background load beside the client's own gaps (docs/load.md)
    itl=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    prompt_tokens=("vllm:prompt_tokens_total",),
    # vllm/v1/metrics/loggers.py (0.32.0): prompt tokens by where their KV came from
    cached_tokens=("vllm:prompt_tokens_by_source_total",),
    cached_labels=(("source", "local_cache_hit"),),
    cache_queries=("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    cache_hits=("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    cache_hit_rate=("vllm:gpu_prefix_cache_hit_rate",),
    running=("vllm:num_requests_running",),
    waiting=("vllm:num_requests_waiting",),
    # published with --enable-mfu-metrics (vllm/v1/metrics/perf.py); per engine step
    flops=("vllm:estimated_flops_per_gpu_total",),
    enable_hint="vLLM serves /metrics on its API port by default (check that a proxy "
                "in front of it passes /metrics through)",
    prefixes=("vllm:",),
    # CacheConfig.metrics_info() as labels (enable_prefix_caching, block_size,
    # prefix_caching_hash_algo, num_gpu_blocks, cache_dtype, ...) + engine
    config_info=("vllm:cache_config_info",),
)

#: SGLang: python/sglang/srt/observability/metrics_collector.py (was metrics/collector.py),
#: docs/references/production_metrics.md.  The prefill time is the ``prefill_forward``
#: stage of ``per_stage_req_latency_seconds``: from the request's first forward entry to
#: its prefill's end, every chunk included (observability/req_time_stats.py
#: ``set_prefill_finished_time``); servers older than that histogram publish none.
#: Scheduler series carry tp_rank/pp_rank/moe_ep_rank (replicas) and dp_rank (shards),
#: the queue gauges a ``priority=""`` total beside their breakdown (``ranks``).
SGLANG = MetricNames(
    kind="sglang",
    ttft=("sglang:time_to_first_token_seconds",),
    queue=("sglang:queue_time_seconds",),
    prefill=("sglang:per_stage_req_latency_seconds",),
    prefill_labels=(("stage", "prefill_forward"),),
    # older releases' name last (metrics/collector.py: time_per_output_token_seconds)
    itl=("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    stages=("sglang:per_stage_req_latency_seconds",),
    prompt_tokens=("sglang:prompt_tokens_total",),
    cached_tokens=("sglang:cached_tokens_total",),
    cache_hit_rate=("sglang:cache_hit_rate",),
    running=("sglang:num_running_reqs",),
    waiting=("sglang:num_queue_reqs",),
    enable_hint="start SGLang with --enable-metrics to publish /metrics",
    prefixes=("sglang:",),
    layout=RankLayout(replica_labels=("tp_rank", "pp_rank", "moe_ep_rank"),
                      total_labels=(("priority", ""),)),
)

#: TGI: docs/source/reference/metrics.md (router, metrics-exporter-prometheus).
TGI = MetricNames(
    kind="tgi",
    queue=("tgi_request_queue_duration",),
    prefill=("tgi_batch_forward_duration",),
    prefill_labels=(("method", "prefill"),),
    prompt_tokens=(),
    running=("tgi_batch_current_size",),
    waiting=("tgi_queue_size",),
    enable_hint="TGI serves /metrics on its HTTP port (newer releases also on "
                "--prometheus-port, default 9000)",
    prefixes=("tgi_",),
)

#: llama.cpp: tools/server/server-task.cpp ``to_metrics`` (prefix ``llamacpp:``).
LLAMA_CPP = MetricNames(
    kind="llama.cpp",
    prompt_seconds=("llamacpp:prompt_seconds_total",),
    prompt_tokens=("llamacpp:prompt_tokens_total",),
    cached_tokens=("llamacpp:prompt_tokens_cached_total",),
    running=("llamacpp:requests_processing",),
    waiting=("llamacpp:requests_deferred",),
    enable_hint="start llama-server with --metrics to publish /metrics",
    prefixes=("llamacpp:",),
)

NAMES: dict[str, MetricNames] = {n.kind: n for n in (VLLM, SGLANG, TGI, LLAMA_CPP)}

#: Kinds with no Prometheus endpoint of their own.
NO_METRICS = {
    "ollama": "Ollama publishes no Prometheus /metrics; queue time and load are not available",
    "openai": "unknown server kind: no known /metrics names (queue time and load not available)",
}


def names_for(kind: str) -> MetricNames | None:
    """The name table for a server kind ("vllm", "sglang", "tgi", "llama.cpp"), else None."""
    return NAMES.get(kind)


def enable_hint(kind: str) -> str:
    """One line saying how to get metrics from this kind of server."""
    n = NAMES.get(kind)
    if n is not None:
        return n.enable_hint
    return NO_METRICS.get(kind, NO_METRICS["openai"])

#: Prompt-length histograms (tokens per request) by server: vLLM's
#: ``vllm:request_prompt_tokens`` (vllm/v1/metrics/loggers.py).
PROMPT_LENGTH_HISTOGRAMS = ("vllm:request_prompt_tokens",)


def metrics_url(base_url: str) -> str:
    """``http://h:p[/v1][/]`` -> ``http://h:p/metrics``."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[:-3]
    return root + "/metrics"

