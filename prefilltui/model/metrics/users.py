"""The users' window from the server's ``/metrics`` when no trace arrives: histogram
and counter deltas between two scrapes (``users_from_metrics``).

``parse_users(text, kind)`` reads only the few series it needs (``USERS_NAMES``, by the
server's kind) from exposition text, as every figure of a scrape is read (either
spelling, per-rank series combined by the engine's ``ranks.RankLayout``): cumulative bucket counts
of the TTFT, prompt-length and queue-time histograms, their counts and sums, and the
prefix-cache counters (vLLM ``prefix_cache_queries_total`` / ``hits_total``) or gauge
(SGLang ``cache_hit_rate``).  Quantiles come from bucket deltas (as Prometheus'
``histogram_quantile``: linear within the bucket that holds the rank), so they are
*bucket estimates* (``UsersWindow.estimate`` True) and include prefilltui's own
requests, its probes and its background load's (their count is taken off ``requests``,
the probes' prompt and cached tokens off the prefix-cache counters; their TTFTs stay in
the buckets).  No I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Iterable

from prefilltui.model.fit import LinearFit
from prefilltui.model.metrics.names import NAMES
from prefilltui.model.metrics.ranks import FLAT
from prefilltui.model.metrics.sample import Exposition, metric_buckets, metric_total
from prefilltui.model.users import UsersWindow

#: Per kind: the histograms (role -> metric name) and the cache series.
#: vLLM 0.32 (vllm/v1/metrics/loggers.py), SGLang (sglang/srt/metrics/collector.py),
#: TGI (router/src/server.rs); a name the server does not publish leaves its figure None.
USERS_NAMES: dict[str, dict[str, str]] = {
    "vllm": {"ttft": "vllm:time_to_first_token_seconds", "prompt": "vllm:request_prompt_tokens",
             "queue": "vllm:request_queue_time_seconds",
             "cache_queries": "vllm:prefix_cache_queries_total",
             "cache_hits": "vllm:prefix_cache_hits_total"},
    "sglang": {"ttft": "sglang:time_to_first_token_seconds", "queue": "sglang:queue_time_seconds",
               "cache_hit_rate": "sglang:cache_hit_rate"},
    "tgi": {"prompt": "tgi_request_input_length", "queue": "tgi_request_queue_duration"},
}
_HIST = ("ttft", "prompt", "queue")


@dataclass(frozen=True)
class UsersCounters:
    """One scrape's users' series: per histogram role, cumulative (le, count) buckets
    (ascending, +Inf last), count and sum; the cache counters / gauge; ``t`` unix s."""

    t: float
    buckets: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    count: dict[str, float] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)


def parse_users(text: "str | Exposition", kind: str, t: float, *,
                group_size: int | None = None) -> UsersCounters | None:
    """The users' series of one scrape (module docstring); None for a kind without
    names or a page that is not Prometheus text.  Read as every other figure of the
    scrape is (``sample.parse_metrics``): each name in either spelling, the exact one
    winning (``names.canonical``: ``vllm_`` behind a relay, never both added up); per-rank
    series combined as the engine means them (``ranks``: ranks that repeat one
    scheduler read once, shards added, a hit-rate gauge averaged; ``group_size``: the
    ranks per attention data-parallel group the server stated); a value that is not
    finite or below 0 (a ``+Inf`` request count, a NaN sum) and a bucket bound below 0
    left out.  ``text`` may be the scrape's ``Exposition`` (parsed once for both
    readers).  Never raises."""
    names = USERS_NAMES.get(kind)
    if names is None:
        return None
    layout = NAMES[kind].layout if kind in NAMES else FLAT
    if group_size and group_size > 0:
        layout = replace(layout, group_size=group_size)
    try:
        exp = text if isinstance(text, Exposition) else Exposition(text)
    except Exception:  # noqa: BLE001 - prometheus_client's parser on a hostile page
        return None
    buckets: dict[str, tuple[tuple[float, float], ...]] = {}
    count: dict[str, float] = {}
    total: dict[str, float] = {}
    values: dict[str, float] = {}
    for role in _HIST:
        if role not in names:
            continue
        base = (names[role],)
        # no time or token count is below 0: a bucket bound there is no bucket
        # (dropping one keeps a cumulative histogram whole)
        b = tuple((le, c) for le, c in metric_buckets(exp, base, layout) if le >= 0 and c >= 0)
        if b:
            buckets[role] = b
        for suffix, into in (("_count", count), ("_sum", total)):
            v = metric_total(exp, base, suffix, layout=layout)
            if v is not None and v >= 0:
                into[role] = v
    for role, name in names.items():
        if role in _HIST:
            continue
        ratio = role == "cache_hit_rate"
        v = metric_total(exp, (name,), layout=layout, gauge=ratio, ratio=ratio)
        if v is not None and v >= 0:
            values[role] = v
    return UsersCounters(t=t, buckets=buckets, count=count, total=total, values=values)


def bucket_quantile(q: float, buckets: tuple[tuple[float, float], ...]) -> float | None:
    """The ``q`` quantile of cumulative (le, count) buckets (``histogram_quantile``):
    linear inside the bucket holding rank q x total, from the bucket below's bound (0 for
    the first); the highest finite bound when the rank falls in +Inf.  None when empty.
    Counts that decrease (no cumulative histogram does) are made monotonic first, as
    Prometheus' ``ensureMonotonic`` does: each bucket counts at least the one below."""
    if not buckets:
        return None
    mono, top = [], 0.0
    for bound, c in buckets:
        top = max(top, c)
        mono.append((bound, top))
    buckets = tuple(mono)
    if buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lo_bound, lo_count = 0.0, 0.0
    for bound, c in buckets:
        if c >= rank:
            if math.isinf(bound):
                return lo_bound
            if c == lo_count:
                return bound
            return lo_bound + (bound - lo_bound) * (rank - lo_count) / (c - lo_count)
        lo_bound, lo_count = bound, c
    return lo_bound


def _delta_buckets(a: UsersCounters, b: UsersCounters, role: str
                   ) -> tuple[tuple[float, float], ...]:
    old = dict(a.buckets.get(role, ()))
    out = tuple((le, c - old.get(le, 0.0)) for le, c in b.buckets.get(role, ()))
    return out if out and all(c >= 0 for _, c in out) else ()  # a reset: no delta


def without(buckets: tuple[tuple[float, float], ...], values: Iterable[float]
            ) -> tuple[tuple[float, float], ...]:
    """Cumulative (le, count) buckets with the observations ``values`` taken off (each
    from every bucket whose bound holds it), never below 0: prefilltui's own probes,
    which a server's histogram counts among its users'.  Fresh short probes read in
    shrank the users' median prompt (1,000-1,180 tokens read for a true 1,635)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not buckets or not vals:
        return buckets
    return tuple((le, max(0.0, c - sum(1 for v in vals if v <= le))) for le, c in buckets)


def users_from_metrics(before: UsersCounters, after: UsersCounters, *, own: int = 0,
                       probe_tokens: float = 0.0, probe_cached: float = 0.0,
                       fit: LinearFit | None = None, running: float | None = None,
                       waiting: float | None = None, probe_prompts: Iterable[float] = (),
                       probe_ttfts: Iterable[float] = ()) -> UsersWindow:
    """The ``UsersWindow`` (source "metrics", ``estimate`` True) of the requests that
    finished between two scrapes.  ``own``: prefilltui's own requests in the window (its
    probes and its background load's), taken off ``requests``; ``probe_tokens`` /
    ``probe_cached``: the probes' prompt tokens and the cached ones among them, taken
    off the prefix-cache queries / hits (the background load's are not known: they stay
    in).  queue_share = Δ queue sum / Δ TTFT sum; expected TTFT at the median prompt
    (bucket estimate) from ``fit``; the users' prefix-cache hit rate from (Δ hits - the
    probes') / (Δ queries - the probes') (vLLM; None when no users' request or query is
    left: the probes are fresh prompts, so counted in they would pull the users' rate
    down, to 0 on a server with few users), or the gauge as read at the end (SGLang,
    all traffic).  unexplained_prefill_share stays None (no per-request prefill to
    weigh).  ``probe_prompts`` / ``probe_ttfts``: the probes' own prompt lengths and
    TTFTs (s) in the window, taken off the prompt-length and TTFT histograms
    (``without``)."""
    ttft = without(_delta_buckets(before, after, "ttft"), probe_ttfts)
    prompt = without(_delta_buckets(before, after, "prompt"), probe_prompts)
    n = None  # a series the earlier scrape lacks had counted nothing yet: 0
    for role in ("ttft", "prompt", "queue"):
        if role in after.count:
            n = after.count[role] - before.count.get(role, 0.0)
            break
    dq = {r: after.total.get(r, 0.0) - before.total.get(r, 0.0) for r in ("ttft", "queue")}
    queue_share = (dq["queue"] / dq["ttft"]
                   if "queue" in after.total and "ttft" in after.total and dq["ttft"] > 0
                   else None)
    if queue_share is not None and not math.isfinite(queue_share):
        queue_share = None
    p50 = bucket_quantile(0.5, prompt)
    users = max(int(round(n)) - own, 0) if n is not None and n >= 0 else 0
    # the mean prompt from the histogram's sum and count, the probes' tokens taken off:
    # exact where the buckets (1,000-2,000, 2,000-5,000 tokens) only bound the median
    mean = None
    if "prompt" in after.total and "prompt" in after.count:
        dn = after.count["prompt"] - before.count.get("prompt", 0.0) - own
        ds = after.total["prompt"] - before.total.get("prompt", 0.0) - max(probe_tokens, 0.0)
        if dn >= 1 and ds > 0:
            mean = ds / dn
    hit = None
    if "cache_queries" in after.values and "cache_hits" in after.values:
        dq_ = after.values["cache_queries"] - before.values.get("cache_queries", 0.0)
        dh = after.values.get("cache_hits", 0.0) - before.values.get("cache_hits", 0.0)
        uq, uh = dq_ - max(probe_tokens, 0.0), dh - max(probe_cached, 0.0)
        # more hits than queries is no count a server keeps: no rate
        if 0 <= dh <= dq_ and uq > 0 and (users or n is None):
            hit = min(max(uh / uq, 0.0), 1.0)
        elif 0 <= dq_ <= max(probe_tokens, 0.0) and dh <= 0 and users > 0:
            # users' prompts were served and the cache was asked nothing for them: a
            # server with prefix caching off looks nothing up, and none of it was cached
            hit = 0.0
    elif "cache_hit_rate" in after.values:
        hit = after.values["cache_hit_rate"]
        hit = hit if 0.0 <= hit <= 1.0 else None  # a rate, 0..1: 1e308 or 1.7 is no rate
    return UsersWindow(
        source="metrics", window_s=max(after.t - before.t, 0.0), requests=users,
        ttft_p50_s=bucket_quantile(0.5, ttft), ttft_p90_s=bucket_quantile(0.9, ttft),
        ttft_p99_s=bucket_quantile(0.99, ttft), prompt_tokens_p50=p50,
        prompt_tokens_p90=bucket_quantile(0.9, prompt), prompt_tokens_mean=mean,
        queue_share=min(max(queue_share, 0.0), 1.0) if queue_share is not None else None,
        expected_ttft_p50_s=(fit.intercept_s + fit.slope_s_per_token * p50
                             if fit is not None and p50 is not None else None),
        prefix_cache_hit_rate=hit, running=running, waiting=waiting, estimate=True)
