"""What a ``/metrics`` page says about the server itself: ``metrics_reading``.

Read from the page the product already scrapes around every probe (no request of its
own): the serving process's start time (``process_start_time_seconds``, the standard
Prometheus process collector's, which vLLM's API server publishes), the labels of the
engine's config info gauges (vLLM ``vllm:cache_config_info``: ``CacheConfig.metrics_info``,
every field as a string label, plus ``engine``: vllm/v1/metrics/loggers.py
``_log_info_cache_config``), and the cumulative counters ``parse_metrics`` already
reduced (each histogram's ``_count`` and the counters of ``MetricNames``), which only a
new process starts again from 0.  ``model.server_change.ServerChangeTracker`` compares
successive readings.  Pure: no I/O.
"""

from __future__ import annotations

from prefilltui.model.metrics.names import NAMES, MetricNames
from prefilltui.model.metrics.sample import FIELDS, Exposition, MetricsSample
from prefilltui.model.server_change import ServerReading

#: The standard process collector's start time (unix s): prometheus_client's
#: ``ProcessCollector`` and the Go client's both publish it.
START_TIME = "process_start_time_seconds"
#: Labels of a config info gauge that say which engine or model, not how it is set.
NOT_CONFIG_LABELS = ("engine", "model_name", "instance", "job")
#: Counters (``MetricNames`` roles) read as cumulative totals; the gauges and the hit
#: rate are left out (they go down in one process).
_COUNTER_ROLES = ("prompt_seconds", "prompt_tokens", "cached_tokens", "cache_queries",
                  "cache_hits", "flops")


def _published(exp: Exposition, names: tuple[str, ...], suffix: str = "") -> str | None:
    """The first of ``names`` (+ ``suffix``) the page has (in either spelling)."""
    for n in names:
        for name in (n + suffix, n[: -len("_total")] if n.endswith("_total") and not suffix
                     else None):
            if name is None:
                continue
            try:
                if exp.rows(name) is not None:
                    return name
            except ValueError:
                continue
    return None


def config_facts(exp: Exposition, names: MetricNames) -> dict[str, str]:
    """The labels of the kind's config info gauges (``MetricNames.config_info``), those
    every series agrees on (one series per engine of a data-parallel server), without
    ``NOT_CONFIG_LABELS`` and private (``_``) fields; {} when none is published or it is
    not valid text."""
    out: dict[str, str] = {}
    for name in names.config_info:
        try:
            rows = exp.rows(name)
        except ValueError:
            continue
        agreed: dict[str, str] | None = None
        for labels, _ in rows or ():
            # a leading underscore is a private field of the config (vLLM 0.32 shows its
            # ``_block_size_resolved`` guard): no setting
            got = {k: v for k, v in labels.items()
                   if k not in NOT_CONFIG_LABELS and not k.startswith("_")}
            agreed = got if agreed is None else {k: v for k, v in agreed.items()
                                                 if got.get(k) == v}
        out.update(agreed or {})
    return out


def start_time(exp: Exposition) -> float | None:
    """``process_start_time_seconds`` when the page has exactly one value of it (a page
    that joins several processes' has several: none of them is the server's)."""
    try:
        rows = exp.rows(START_TIME)
    except ValueError:
        return None
    vals = {v for _, v in rows or ()}
    return vals.pop() if len(vals) == 1 else None


def metrics_reading(exp: Exposition, sample: MetricsSample, at_s: float
                    ) -> ServerReading | None:
    """The ``ServerReading`` (source "metrics") of one scrape: its page ``exp`` and the
    ``sample`` ``parse_metrics`` made of it, read at unix time ``at_s``.  Counters are
    named by the kind's own names (``vllm:prompt_tokens_total``, a histogram's
    ``..._count``).  None when ``at_s`` is not a time; implausible values are dropped
    (``ServerReading.make``)."""
    names = NAMES.get(sample.kind) or MetricNames(kind=sample.kind)
    counters: dict[str, float] = {}
    for role in FIELDS:
        h = sample.hist.get(role)
        name = _published(exp, getattr(names, role), "_count")
        if h is not None and name is not None:
            counters[name] = h[1]
    for role in _COUNTER_ROLES:
        v = sample.values.get(role)
        name = _published(exp, getattr(names, role))
        if v is not None and name is not None:
            counters[name] = v
    return ServerReading.make(at_s, "metrics", start_time_s=start_time(exp),
                              facts=config_facts(exp, names), counters=counters)
