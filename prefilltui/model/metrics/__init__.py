"""Server metrics, the pure part: per-server Prometheus names, parsing and deltas.

Each server kind publishes its own names (tables in ``names``, one per kind, with the
source of every name).  ``parse_metrics`` turns exposition text into a frozen
``MetricsSample``; ``delta`` takes the difference of two samples around one probe
(both in ``sample``), names read in either spelling (``:`` or ``_``) and per-rank
series combined as the engine means them (``ranks``); ``apply_delta`` fills
``ProbeResult.queue_s``, ``server_running``, ``server_waiting`` and ``overhead_s`` from
it (``apply``); ``metrics_reading`` reads what the page says about the server itself:
its start time, stated config and counters (``identity``).  The scraping (HTTP) is in
``metrics_hook.py``.

When a server does not publish a metric, ``enable_hint`` says which flag enables it
and the value stays ``None``; nothing here guesses a number.  No I/O.

Units: seconds and token counts, as the servers publish them.

This package's public names are re-exported here (callers import from
``prefilltui.model.metrics``); the leaf modules import only each other's public names.
"""

from __future__ import annotations

from prefilltui.model.metrics.names import (
    LLAMA_CPP, NAMES, NO_METRICS, PROMPT_LENGTH_HISTOGRAMS, SGLANG, TGI, VLLM, MetricNames,
    canonical, enable_hint, metrics_url, names_for,
)
from prefilltui.model.metrics.ranks import FLAT, RankLayout, combine
from prefilltui.model.metrics.sample import (
    FIELDS, MAX_GAUGE, Exposition, MetricsDelta, MetricsSample, delta, longest_prompt_bound,
    parse_metrics,
)
from prefilltui.model.metrics.apply import apply_counts, apply_delta, window_is_own
from prefilltui.model.metrics.users import UsersCounters, parse_users, users_from_metrics
from prefilltui.model.metrics.identity import metrics_reading

__all__ = [
    "FIELDS", "FLAT", "LLAMA_CPP", "MAX_GAUGE", "NAMES", "NO_METRICS", "PROMPT_LENGTH_HISTOGRAMS",
    "SGLANG", "TGI", "VLLM", "Exposition", "MetricNames", "MetricsDelta", "MetricsSample",
    "RankLayout", "apply_counts", "apply_delta", "canonical", "combine", "delta", "enable_hint",
    "longest_prompt_bound", "metrics_url", "names_for", "parse_metrics", "window_is_own",
    "UsersCounters", "parse_users", "users_from_metrics", "metrics_reading",
]
