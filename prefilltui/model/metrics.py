"""Server metrics, the pure part: per-server Prometheus names, parsing and deltas.

Each server kind publishes its own names (tables below, one per kind, with the source
of every name).  ``parse_metrics`` turns exposition text into a frozen
``MetricsSample``; ``delta`` takes the difference of two samples around one probe;
``apply_delta`` fills ``ProbeResult.queue_s``, ``server_running``, ``server_waiting``
and ``overhead_s`` from it.  The scraping (HTTP) is in ``metrics_hook.py``.

When a server does not publish a metric, ``enable_hint`` says which flag enables it
and the value stays ``None``; nothing here guesses a number.  No I/O.

Units: seconds and token counts, as the servers publish them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from prefilltui.model.types import ProbeResult


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
)

#: SGLang: python/sglang/srt/metrics/collector.py, docs/references/production_metrics.md.
SGLANG = MetricNames(
    kind="sglang",
    ttft=("sglang:time_to_first_token_seconds",),
    queue=("sglang:queue_time_seconds",),
    prompt_tokens=("sglang:prompt_tokens_total",),
    cached_tokens=("sglang:cached_tokens_total",),
    cache_hit_rate=("sglang:cache_hit_rate",),
    running=("sglang:num_running_reqs",),
    waiting=("sglang:num_queue_reqs",),
    enable_hint="start SGLang with --enable-metrics to publish /metrics",
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


FIELDS = ("ttft", "queue", "prefill")
_SCALARS = ("prompt_seconds", "prompt_tokens", "cached_tokens", "cache_queries",
            "cache_hits", "cache_hit_rate", "running", "waiting", "flops")
#: Roles a server publishes only when a flag enables them: never listed as missing.
_OPTIONAL = ("flops",)


@dataclass(frozen=True)
class MetricsSample:
    """One scrape, reduced to the values prefilltui uses (None = not published).

    Histograms are kept as (sum_s, count) pairs summed over all label sets (several
    engines / models add up); gauges and counters are summed the same way.
    ``t`` is ``time.perf_counter()`` when the scrape finished.
    ``missing`` names the roles this server did not publish.  ``buckets["itl"]``: the
    inter-token latency histogram's cumulative (le, count) pairs, ascending (+Inf last).
    ``longest_prompt_le``: the smallest bucket bound of the server's prompt-length
    histogram that holds every prompt it counted (an upper bound of the longest prompt
    it served, tokens; ``longest_prompt_bound``), None where it publishes none.
    """

    kind: str
    t: float
    hist: dict[str, tuple[float, float]] = field(default_factory=dict)
    buckets: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    missing: tuple[str, ...] = ()
    n_series: int = 0
    longest_prompt_le: float | None = None

    def get(self, role: str) -> float | None:
        """A gauge/counter value by role ("running", "prompt_seconds", ...), or None."""
        return self.values.get(role)


def _series(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)], via prometheus_client's parser.

    Raises:
        ValueError: when the text is not Prometheus exposition format.
    """
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def _total(series, names: tuple[str, ...], suffix: str = "",
           labels: tuple[tuple[str, str], ...] = ()) -> float | None:
    for base in names:
        rows = series.get(base + suffix)
        if rows is None and base.endswith("_total") and not suffix:
            rows = series.get(base[: -len("_total")])
        if rows is None:
            continue
        vals = [v for lab, v in rows
                if "le" not in lab and "quantile" not in lab
                and all(lab.get(k) == want for k, want in labels)
                and math.isfinite(v)]
        if vals:
            return float(sum(vals))
    return None


def _buckets(series, names: tuple[str, ...]) -> tuple[tuple[float, float], ...]:
    """Cumulative (le, count) pairs of the first histogram in ``names`` that has
    buckets, summed over label sets, ascending by ``le``."""
    for base in names:
        rows = series.get(base + "_bucket")
        if not rows:
            continue
        acc: dict[float, float] = {}
        for lab, v in rows:
            try:
                le = float(lab.get("le", "nan"))
            except ValueError:
                continue
            if not math.isnan(le) and math.isfinite(v):
                acc[le] = acc.get(le, 0.0) + v
        if acc:
            return tuple(sorted(acc.items()))
    return ()


def parse_metrics(text: str, kind: str, *, t: float | None = None) -> MetricsSample:
    """Reduce Prometheus exposition ``text`` from a ``kind`` server to a MetricsSample.

    Raises:
        ValueError: when ``text`` is not valid exposition format.
    """
    names = NAMES.get(kind) or MetricNames(kind=kind)
    series = _series(text)
    hist: dict[str, tuple[float, float]] = {}
    missing: list[str] = []
    for role in FIELDS:
        base = getattr(names, role)
        labels = names.prefill_labels if role == "prefill" else ()
        s = _total(series, base, "_sum", labels)
        c = _total(series, base, "_count", labels)
        if s is not None and c is not None:
            hist[role] = (s, c)
        elif base:
            missing.append(role)
    buckets: dict[str, tuple[tuple[float, float], ...]] = {}
    if names.itl:
        s = _total(series, names.itl, "_sum")
        c = _total(series, names.itl, "_count")
        b = _buckets(series, names.itl)
        if s is not None and c is not None:
            hist["itl"] = (s, c)
        if b:
            buckets["itl"] = b
    values: dict[str, float] = {}
    for role in _SCALARS:
        labels = names.cached_labels if role == "cached_tokens" else ()
        v = _total(series, getattr(names, role), labels=labels)
        if v is not None:
            values[role] = v
        elif getattr(names, role) and role not in _OPTIONAL:
            missing.append(role)
    if "cached_tokens" in missing and "cache_hits" in values:  # older vLLM: the hit counter
        missing.remove("cached_tokens")
    return MetricsSample(kind=kind, t=time.perf_counter() if t is None else t, hist=hist,
                         buckets=buckets, values=values, missing=tuple(missing),
                         n_series=sum(len(v) for v in series.values()),
                         longest_prompt_le=longest_prompt_bound(series))


#: Prompt-length histograms (tokens per request) by server: vLLM's
#: ``vllm:request_prompt_tokens`` (vllm/v1/metrics/loggers.py).
PROMPT_LENGTH_HISTOGRAMS = ("vllm:request_prompt_tokens",)


def longest_prompt_bound(series: dict[str, list[tuple[dict[str, str], float]]]) -> float | None:
    """The smallest finite ``le`` of a prompt-length histogram whose cumulative count
    equals its total (label sets summed): every prompt the server counted had at most
    that many tokens.  None without the histogram, without requests, or when some
    prompt is only in +Inf."""
    for name in PROMPT_LENGTH_HISTOGRAMS:
        rows = series.get(name + "_bucket")
        if not rows:
            continue
        by_le: dict[float, float] = {}
        for lab, v in rows:
            try:
                le = float(lab.get("le", "nan"))
            except ValueError:
                continue
            if math.isfinite(v) and not math.isnan(le):
                by_le[le] = by_le.get(le, 0.0) + v
        total = by_le.get(math.inf)
        if not total:
            return None
        for le in sorted(k for k in by_le if math.isfinite(k)):
            if by_le[le] >= total:
                return le
        return None
    return None


@dataclass(frozen=True)
class MetricsDelta:
    """The change between two samples taken around one probe.

    ``hist[role]`` = (d_sum_s, d_count): requests that finished that phase in the
    window and their total time.  ``mean(role)`` is the per-request value, and
    ``only(role)`` is the value only when exactly one request finished the phase in
    the window (then it is this probe's own figure).  Counters are differences;
    gauges are the larger of the before/after readings.
    """

    hist: dict[str, tuple[float, float]]
    counters: dict[str, float]
    gauges_before: dict[str, float]
    gauges_after: dict[str, float]
    elapsed_s: float
    buckets: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)

    def longest(self, role: str) -> float | None:
        """Upper bound of the highest bucket that grew in the window: every value
        observed in the window is at most this (s).  None when nothing was observed;
        ``math.inf`` when the longest fell in the +Inf bucket."""
        b = self.buckets.get(role)
        if not b or b[-1][1] <= 0:
            return None
        total = b[-1][1]
        return next((le for le, c in b if c >= total - 1e-9), math.inf)

    def mean(self, role: str) -> float | None:
        h = self.hist.get(role)
        if not h or h[1] <= 0:
            return None
        return h[0] / h[1]

    def only(self, role: str) -> float | None:
        h = self.hist.get(role)
        if not h or round(h[1]) != 1:
            return None
        return max(0.0, h[0])

    def gauge(self, role: str) -> float | None:
        """The larger of the before/after readings of a gauge; a reading no server can
        have (negative, or over ``MAX_GAUGE``: 1e308 "running requests") is left out."""
        vals = [g[role] for g in (self.gauges_before, self.gauges_after)
                if role in g and 0 <= g[role] <= MAX_GAUGE]
        return max(vals) if vals else None


_GAUGES = ("running", "waiting", "cache_hit_rate")
#: Largest gauge reading taken (requests running or waiting; a hit rate is <= 1): a
#: million requests in one server's queue is far beyond any served today.
MAX_GAUGE = 1_000_000


def delta(before: MetricsSample, after: MetricsSample) -> MetricsDelta:
    """after − before.  A counter that went down (server restart) gives no delta."""
    hist = {}
    for role, (s1, c1) in after.hist.items():
        if role in before.hist:
            s0, c0 = before.hist[role]
            if c1 >= c0 and s1 >= s0 - 1e-9:
                hist[role] = (s1 - s0, c1 - c0)
    counters = {}
    for role, v1 in after.values.items():
        if role in _GAUGES or role not in before.values:
            continue
        d = v1 - before.values[role]
        if d >= -1e-9:
            counters[role] = max(0.0, d)
    g0 = {k: v for k, v in before.values.items() if k in _GAUGES}
    g1 = {k: v for k, v in after.values.items() if k in _GAUGES}
    buckets = {}
    for role, b1 in after.buckets.items():
        b0 = dict(before.buckets.get(role, ()))
        if b0 and [le for le, _ in b1] == sorted(b0) and all(c >= b0[le] - 1e-9 for le, c in b1):
            buckets[role] = tuple((le, c - b0[le]) for le, c in b1)
    return MetricsDelta(hist, counters, g0, g1, after.t - before.t, buckets)


def metrics_url(base_url: str) -> str:
    """``http://h:p[/v1][/]`` -> ``http://h:p/metrics``."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[:-3]
    return root + "/metrics"


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
