"""What a disaggregated worker publishes about its hop, one table per engine, each name
with its source.  Data only: no I/O.

vLLM 0.32.0 (``vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py``,
``NixlPromMetrics``): ``vllm:nixl_xfer_time_seconds`` (histogram, one observation per
transfer), ``vllm:nixl_post_time_seconds`` (histogram: posting the transfer),
``vllm:nixl_bytes_transferred`` (histogram of bytes per transfer: its ``_sum`` is the
bytes moved), ``vllm:nixl_num_failed_transfers`` (counter, served with ``_total``);
published by the instance that reads the KV (the decode side pulls).
``vllm/v1/metrics/loggers.py``: ``vllm:num_requests_waiting_by_reason{reason=...}``
(gauge; ``deferred`` = "deferred by transient constraints (LoRA budget, KV transfer,
blocked status)"), ``vllm:num_requests_kv_fetch_by_stage{stage=...}`` (gauge, only on a
``kv_consumer``), ``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}``
(``vllm/v1/metrics/stats.py``: tokens whose KV came from the connector).
vLLM's ExampleConnector (KV through a shared directory) publishes no transfer series;
prefilltui's demo connector (``prefilltui/demo/vllm_side/prefilltui_pd_connector.py``, a
subclass of it that times the same loads through vLLM's connector-stats path, as NIXL's
does) publishes ``vllm:example_connector_load_time_seconds`` and
``vllm:example_connector_load_bytes`` (histograms, one observation per request whose KV
the decode side loaded).  Its ``..._save_*`` series are left out: the save runs inside
the prefill worker's forward, so it is already in the prefill hop.

SGLang (``docs/references/production_metrics.md``, ``python/sglang/srt/metrics/
collector.py``): ``sglang:kv_transfer_latency_ms`` (histogram, ms),
``sglang:kv_transfer_speed_gb_s`` (histogram, GB/s), ``sglang:kv_transfer_bootstrap_ms``,
``sglang:kv_transfer_alloc_ms``, ``sglang:num_transfer_failed_reqs_total`` and
``sglang:num_bootstrap_failed_reqs_total`` (counters), ``sglang:time_to_first_token_seconds``.

Dynamo (``dynamo_frontend_*``; per-worker TTFT labelled ``worker_type`` =
``prefill`` / ``decode``) is read for the role only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PathNames:
    """The series one engine publishes about a disaggregated hop (histograms by base
    name: ``_sum`` / ``_count`` appended; counters with ``_total``)."""

    kind: str
    ttft: tuple[str, ...] = ()  # histogram, s: the worker's own time to first token
    xfer: tuple[str, ...] = ()  # histogram: one KV transfer's time
    xfer_scale: float = 1.0  # to seconds (SGLang publishes ms)
    post: tuple[str, ...] = ()  # histogram, s: posting a transfer (vLLM NIXL)
    xfer_bytes: tuple[str, ...] = ()  # histogram: bytes per transfer (``_sum``: bytes)
    speed_gb_s: tuple[str, ...] = ()  # histogram: GB/s per transfer (SGLang)
    failed: tuple[str, ...] = ()  # counters: failed transfers (summed)
    waiting_by_reason: tuple[str, ...] = ()  # gauge by ``reason``
    external_tokens: tuple[str, ...] = ()  # counter by ``source``
    consumer_only: tuple[str, ...] = ()  # a series only a KV consumer (decode) publishes


VLLM_PATH = PathNames(
    kind="vllm",
    ttft=("vllm:time_to_first_token_seconds",),
    xfer=("vllm:nixl_xfer_time_seconds", "vllm:example_connector_load_time_seconds"),
    post=("vllm:nixl_post_time_seconds",),
    xfer_bytes=("vllm:nixl_bytes_transferred", "vllm:example_connector_load_bytes"),
    failed=("vllm:nixl_num_failed_transfers_total",),
    waiting_by_reason=("vllm:num_requests_waiting_by_reason",),
    external_tokens=("vllm:prompt_tokens_by_source_total",),
    consumer_only=("vllm:num_requests_kv_fetch_by_stage",),
)

SGLANG_PATH = PathNames(
    kind="sglang",
    ttft=("sglang:time_to_first_token_seconds",),
    xfer=("sglang:kv_transfer_latency_ms",),
    xfer_scale=1e-3,
    speed_gb_s=("sglang:kv_transfer_speed_gb_s",),
    failed=("sglang:num_transfer_failed_reqs_total", "sglang:num_bootstrap_failed_reqs_total"),
)

#: Tables by server kind.
PATH_NAMES = {"vllm": VLLM_PATH, "sglang": SGLANG_PATH}
