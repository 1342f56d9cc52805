"""A ``/metrics`` scrape reduced to a frozen ``MetricsSample``, and the ``delta`` of two.

``parse_metrics`` turns Prometheus exposition text (read with prometheus_client's
parser) into a ``MetricsSample`` by the names of the server's kind (``names``);
``delta`` takes the difference of two samples around one probe (``MetricsDelta``).
A metric the server does not publish stays ``None``; nothing here guesses a number.
No I/O.  Units: seconds and token counts, as the servers publish them.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field, replace

from prometheus_client.parser import text_string_to_metric_families

from prefilltui.model.metrics.names import (
    NAMES, PROMPT_LENGTH_HISTOGRAMS, MetricNames, canonical,
)
from prefilltui.model.metrics.ranks import FLAT, RankLayout, combine, pick_replicas


FIELDS = ("ttft", "queue", "prefill")
_SCALARS = ("prompt_seconds", "prompt_tokens", "cached_tokens", "cache_queries",
            "cache_hits", "cache_hit_rate", "running", "waiting", "flops")
#: Roles a server publishes only when a flag enables them: never listed as missing.
_OPTIONAL = ("flops",)
#: Gauges (read as their total beside a breakdown, ``ranks.totals_only``) and ratios
#: (averaged over shards, never added).
_GAUGES = ("running", "waiting", "cache_hit_rate")
_RATIOS = ("cache_hit_rate",)


@dataclass(frozen=True)
class MetricsSample:
    """One scrape, reduced to the values prefilltui uses (None = not published).

    Histograms are kept as (sum_s, count) pairs summed over label sets (several
    engines, models or data-parallel ranks add up); gauges and counters the same way,
    a ratio gauge averaged.
    ``t`` is ``time.perf_counter()`` when the scrape finished.
    ``missing`` names the roles this server did not publish.  ``buckets["itl"]``: the
    inter-token latency histogram's cumulative (le, count) pairs, ascending (+Inf last).
    ``longest_prompt_le``: the smallest bucket bound of the server's prompt-length
    histogram that holds every prompt it counted (an upper bound of the longest prompt
    it served, tokens; ``longest_prompt_bound``), None where it publishes none.
    ``engine_series``: series named with the kind's own prefix (``MetricNames.prefixes``,
    either spelling), known to prefilltui or not: more than 0 means metrics are on.
    ``hist["stage:NAME"]``: a per-stage latency histogram's stages (SGLang
    ``per_stage_req_latency_seconds{stage}``), where published.
    Per-rank series are combined as the engine means them (``ranks``).
    """

    kind: str
    t: float
    hist: dict[str, tuple[float, float]] = field(default_factory=dict)
    buckets: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    missing: tuple[str, ...] = ()
    n_series: int = 0
    longest_prompt_le: float | None = None
    engine_series: int = 0

    def get(self, role: str) -> float | None:
        """A gauge/counter value by role ("running", "prompt_seconds", ...), or None."""
        return self.values.get(role)


class Exposition:
    """One scrape's samples by name: ``rows(name)`` gives [(labels, value)] under the
    exact name, else under its other spelling (``names.canonical``: ``:`` as ``_``).

    Lazy: construction only sorts the sample lines by metric name; a name's lines are
    parsed (prometheus_client's parser) when ``rows`` first asks for it.  prefilltui
    reads a few families of a page (a real vLLM 0.32 page: 629 lines, 68 KB, 8.9 ms to
    parse whole, twice around every probe), never the HTTP, Python and process ones.

    Raises:
        ValueError: at construction, when a line is neither a comment nor starts with a
            metric name (an HTML page, JSON); from ``rows``, when that name's lines are
            not Prometheus exposition format.
    """

    def __init__(self, text: str) -> None:
        self._lines: dict[str, list[str]] = {}
        for line in text.splitlines():
            head = line.lstrip()
            if not head or head.startswith("#"):
                continue
            m = _NAME.match(head)
            if m is None:
                raise ValueError(f"not a metric line: {head[:60]!r}")
            self._lines.setdefault(m.group(0), []).append(head)
        self._parsed: dict[str, list[tuple[dict[str, str], float]]] = {}
        self._canon: dict[str, str] = {}
        for name in self._lines:
            self._canon.setdefault(canonical(name), name)

    @property
    def n_series(self) -> int:
        """Samples on the page (one per line)."""
        return sum(len(v) for v in self._lines.values())

    def _rows_of(self, name: str) -> list[tuple[dict[str, str], float]]:
        got = self._parsed.get(name)
        if got is None:
            got = []
            for fam in text_string_to_metric_families("\n".join(self._lines[name]) + "\n"):
                got += [(dict(s.labels), float(s.value)) for s in fam.samples]
            self._parsed[name] = got
        return got

    def rows(self, name: str) -> list[tuple[dict[str, str], float]] | None:
        if name not in self._lines:
            name = self._canon.get(canonical(name), "")
            if name not in self._lines:
                return None
        return self._rows_of(name)

    def count_prefixed(self, prefixes: tuple[str, ...]) -> int:
        """Series whose name starts with one of ``prefixes`` (either spelling)."""
        canon = tuple(canonical(p) for p in prefixes)
        return sum(len(lines) for name, lines in self._lines.items()
                   if canonical(name).startswith(canon)) if canon else 0


#: A metric name at the start of a sample line (the exposition format's grammar).
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_total(exp: Exposition, names: tuple[str, ...], suffix: str = "",
           labels: tuple[tuple[str, str], ...] = (), layout: RankLayout = FLAT, *,
           gauge: bool = False, ratio: bool = False) -> float | None:
    """The first of ``names`` published, its series filtered by ``labels`` and
    combined by ``layout`` (``ranks.combine``); None when none is published."""
    for base in names:
        rows = exp.rows(base + suffix)
        if rows is None and base.endswith("_total") and not suffix:
            rows = exp.rows(base[: -len("_total")])
        if rows is None:
            continue
        kept = [(lab, v) for lab, v in rows
                if "le" not in lab and "quantile" not in lab
                and all(lab.get(k) == want for k, want in labels)
                and math.isfinite(v)]
        v = combine(kept, layout, gauge=gauge, ratio=ratio)
        if v is not None:
            return v
    return None


def metric_buckets(exp: Exposition, names: tuple[str, ...], layout: RankLayout = FLAT
             ) -> tuple[tuple[float, float], ...]:
    """Cumulative (le, count) pairs of the first histogram in ``names`` that has
    buckets, replicas read once (``ranks.pick_replicas``) and the rest summed by
    ``le``, ascending."""
    for base in names:
        rows = exp.rows(base + "_bucket")
        if not rows:
            continue
        acc: dict[float, float] = {}
        for lab, v in pick_replicas(rows, layout):
            try:
                le = float(lab.get("le", "nan"))
            except ValueError:
                continue
            if not math.isnan(le) and math.isfinite(v):
                acc[le] = acc.get(le, 0.0) + v
        if acc:
            return tuple(sorted(acc.items()))
    return ()


def parse_metrics(text: "str | Exposition", kind: str, *, t: float | None = None,
                  group_size: int | None = None) -> MetricsSample:
    """Reduce Prometheus exposition ``text`` (or its ``Exposition``, parsed once for
    every reader of the scrape) from a ``kind`` server to a MetricsSample.

    Names are read in either spelling (``names.canonical``); per-rank series combine
    by the kind's ``RankLayout`` (``ranks``), ``group_size`` being the ranks per
    attention data-parallel group the server stated (SGLang ``/server_info``), if any.

    Raises:
        ValueError: when ``text`` is not valid exposition format.
    """
    names = NAMES.get(kind) or MetricNames(kind=kind)
    layout = names.layout
    if group_size and group_size > 0:
        layout = replace(layout, group_size=group_size)
    exp = text if isinstance(text, Exposition) else Exposition(text)
    hist: dict[str, tuple[float, float]] = {}
    missing: list[str] = []
    for role in FIELDS:
        base = getattr(names, role)
        labels = names.prefill_labels if role == "prefill" else ()
        s = metric_total(exp, base, "_sum", labels, layout)
        c = metric_total(exp, base, "_count", labels, layout)
        if s is not None and c is not None:
            hist[role] = (s, c)
        elif base:
            missing.append(role)
    buckets: dict[str, tuple[tuple[float, float], ...]] = {}
    if names.itl:
        s = metric_total(exp, names.itl, "_sum", layout=layout)
        c = metric_total(exp, names.itl, "_count", layout=layout)
        b = metric_buckets(exp, names.itl, layout)
        if s is not None and c is not None:
            hist["itl"] = (s, c)
        if b:
            buckets["itl"] = b
    for stage in _stages(exp, names.stages):
        lab = (("stage", stage),)
        s = metric_total(exp, names.stages, "_sum", lab, layout)
        c = metric_total(exp, names.stages, "_count", lab, layout)
        if s is not None and c is not None:
            hist["stage:" + stage] = (s, c)
    values: dict[str, float] = {}
    for role in _SCALARS:
        labels = names.cached_labels if role == "cached_tokens" else ()
        v = metric_total(exp, getattr(names, role), labels=labels, layout=layout,
                   gauge=role in _GAUGES, ratio=role in _RATIOS)
        if v is not None:
            values[role] = v
        elif getattr(names, role) and role not in _OPTIONAL:
            missing.append(role)
    if "cached_tokens" in missing and "cache_hits" in values:  # older vLLM: the hit counter
        missing.remove("cached_tokens")
    return MetricsSample(kind=kind, t=time.perf_counter() if t is None else t, hist=hist,
                         buckets=buckets, values=values, missing=tuple(missing),
                         n_series=exp.n_series, longest_prompt_le=longest_prompt_bound(exp),
                         engine_series=exp.count_prefixed(names.prefixes))


def _stages(exp: Exposition, names: tuple[str, ...]) -> list[str]:
    """The ``stage`` label values of the first per-stage histogram published."""
    for base in names:
        rows = exp.rows(base + "_count")
        if rows:
            return sorted({lab["stage"] for lab, _ in rows if lab.get("stage")})
    return []


def longest_prompt_bound(exp: Exposition) -> float | None:
    """The smallest finite ``le`` of a prompt-length histogram whose cumulative count
    equals its total (label sets summed): every prompt the server counted had at most
    that many tokens.  None without the histogram, without requests, or when some
    prompt is only in +Inf."""
    for name in PROMPT_LENGTH_HISTOGRAMS:
        rows = exp.rows(name + "_bucket")
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

