"""The fleet overview's rows: one per target, built from its live summary, and their
order (the worst target first), plus the fleet's own probing load.

Pure: ``RecentProbes`` keeps the last probes' outcomes (the health rules' recent
window, the queue column, the cache proof); ``fleet_row`` turns a target's
``RunSummary`` (``model.summary.live.LiveSummary``), its recent probes and state into a
frozen ``FleetRow``; ``rank`` orders rows worst first; ``stagger`` and ``fleet_load``
spread the targets' probe starts and say what the monitor itself sends.  Seconds and
prompt tokens/s in data; the text of each cell is made in ``render/fleet.py``.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Sequence

from prefilltui.model import defaults
from prefilltui.model.fleet.health import (DOWN_WINDOW_S, HANG_AFTER_S, Health, HealthInputs,
                                     hang_threshold_s, judge, roofline_expected)
from prefilltui.model.summary import RunSummary
from prefilltui.model.types import ProbeResult

#: Seconds of probes the health rules read (the alerts' ``[10m]`` ranges).
RECENT_S = 600.0
#: Probes the queue column's median is taken over.
QUEUE_PROBES = 20
#: The reference prompt length of the TTFT column (tokens), ``--ref-tokens``.
REF_TOKENS = defaults.REF_TOKENS
#: Fewest throughput readings (and windows' worth of probes) before the session's own
#: median is a baseline for the throughput rule.
LEARNED_MIN_READINGS = 10

#: The verdict column's word for each "why is TTFT high?" cause (model/diagnosis/causes/)
#: that stands out; "none" and "not_enough_data" leave the roofline verdict's word.
CAUSE_WORDS = {"queueing": "queueing", "head_of_line": "HoL blk", "slow_prefill": "slow",
               "prefix_cache": "no cache", "overhead": "overhead", "prompts_longer": "longer",
               "cache_hit_drop": "hit drop"}


class RecentProbes:
    """The outcomes of the last probes (at most ``maxlen``, the last ``span_s`` seconds
    counted by ``window``).  O(1) per probe."""

    def __init__(self, span_s: float = RECENT_S, maxlen: int = 2000) -> None:
        self.span_s = span_s
        self._done: deque[tuple[float, bool, bool]] = deque(maxlen=maxlen)  # (t, ok, hit)
        self._queue: deque[float] = deque(maxlen=QUEUE_PROBES)
        self.waiting: float | None = None
        self.last_error: str | None = None
        self.cache_counted = 0  # ok probes whose server said how many tokens it cached
        self.ok_probes = 0

    def add(self, r: ProbeResult, now: float) -> None:
        self._done.append((now, bool(r.ok), bool(r.ok and r.cache_hit)))
        if not r.ok:
            self.last_error = f"{r.error_kind or 'failed'}: {r.error_message or ''}".rstrip(": ")
            return
        self.ok_probes += 1
        if r.cached_tokens is not None:
            self.cache_counted += 1
        if r.queue_s is not None:
            self._queue.append(r.queue_s)
        if r.server_waiting is not None:
            self.waiting = r.server_waiting

    def window(self, now: float, span_s: float | None = None) -> tuple[int, int, int]:
        """(probes, failed, cache hits) that finished in the last ``span_s`` (default:
        the recent window's)."""
        span = self.span_s if span_s is None else span_s
        n = failed = hits = 0
        for t, ok, hit in reversed(self._done):
            if now - t > span:
                break
            n += 1
            failed += not ok
            hits += hit
        return n, failed, hits

    @property
    def queue_median_s(self) -> float | None:
        return statistics.median(self._queue) if self._queue else None


@dataclass(frozen=True, slots=True)
class FleetRow:
    """One target as the overview shows it (seconds, prompt tokens/s; None: not known).

    state: the runner's ("probing", "retrying", "waiting" for its staggered start ...);
    health: the alert rules' judgement (``model.fleet.health``); tok_s / tok_s_ci: the fit's
    prefill throughput and its 95 % interval (upper None: unbounded); fixed_s: the
    fixed cost shown (None when not pinned, ``fixed_pinned`` False then); mfu;
    verdict / verdict_text: the short word and the sentence ("why is TTFT high" where
    known, else the roofline verdict); ttft_ref_s: the fit's TTFT at ``ref_tokens``;
    queue_s / waiting: median recent queue time and requests waiting at the server;
    cache_hits / cache_counted / ok_probes: the cache proof (probes the cache served,
    probes whose server counted cached tokens, ok probes); probes / failed: totals;
    age_s: since the last probe finished; spark: recent throughput readings.
    """

    index: int
    label: str
    state: str
    health: Health
    kind: str | None = None
    model: str | None = None
    tok_s: float | None = None
    tok_s_ci: tuple[float | None, float | None] | None = None
    fixed_s: float | None = None
    fixed_pinned: bool = False
    mfu: float | None = None
    verdict: str = "…"
    verdict_text: str = ""
    ttft_ref_s: float | None = None
    ref_tokens: int = REF_TOKENS
    queue_s: float | None = None
    waiting: float | None = None
    cache_hits: int = 0
    cache_counted: int = 0
    ok_probes: int = 0
    probes: int = 0
    failed: int = 0
    age_s: float | None = None
    spark: tuple[float, ...] = ()
    gpu: str | None = None

    @property
    def half_width_pct(self) -> float | None:
        """Half the throughput interval as % of the throughput (inf: unbounded)."""
        if self.tok_s is None or not self.tok_s_ci:
            return None
        lo, hi = self.tok_s_ci
        if lo is None or hi is None:
            return math.inf
        return (hi - lo) / 2 / self.tok_s * 100


#: Short words for the summary's verdict levels (the overview's column is 8 wide).
VERDICT_WORDS = {"healthy": "healthy", "below": "below", "wrong": "wrong",
                 "impossible": "check", "unknown-peak": "no peak", "short-prompts": "short",
                 "unknown-model": "no model", "no-slope": "flat", "insufficient": "…",
                 "failed": "failed", "error": "error"}
#: How bad each verdict is, for the order (lower: worse).
_VERDICT_RANK = {"wrong": 0, "impossible": 0, "below": 1, "failed": 2, "no-slope": 2,
                 "short-prompts": 3, "unknown-peak": 3, "unknown-model": 3,
                 "insufficient": 4, "healthy": 5,
                 # a why-TTFT cause that stands out ranks with "below"
                 **{w: 1 for w in CAUSE_WORDS.values()}}


def learned_baseline(spark: Sequence[float]) -> float | None:
    """The median of this session's throughput readings, once there are
    ``LEARNED_MIN_READINGS`` of them (the alert's own-median baseline, shorter)."""
    if len(spark) < LEARNED_MIN_READINGS:
        return None
    return statistics.median(spark)


def fleet_row(index: int, label: str, state: str, summary: RunSummary, recent: RecentProbes,
              *, now: float, detail: str = "", last_probe_at: float | None, spark: Sequence[float] = (),
              baseline_tok_s: float | None = None, baseline_source: str | None = None,
              ref_tokens: int = REF_TOKENS, results: Sequence[ProbeResult] = (), gpu: str | None = None,
              in_flight_s: float | None = None, hang_after_s: float = HANG_AFTER_S,
              interval_s: float | None = None, baseline_roofline: bool = False) -> FleetRow:
    """The overview's row of one target (see ``FleetRow``).  ``summary`` is the target's
    live summary (its window fit, where the overview asks for it); ``baseline_tok_s`` an
    explicit baseline (``baseline_roofline``: the roofline's, ``health.roofline_expected``;
    else the session's own median, ``learned_baseline``); ``in_flight_s``: how long the
    probe in flight has waited, against the hang threshold (``hang_after_s`` or 3 x
    the slowest of ``results``, the recent probes); ``interval_s``: the target's probe
    interval (stalled rule).  The verdict column is the summary's "why is TTFT high?"
    cause when one stands out (``summary.ttft_verdict``), else the roofline verdict;
    ``detail``: the
    runner's state detail (why discovery failed).  Never raises
    for bad data."""
    fit = summary.fit
    tps = fit.prefill_tokens_per_s if fit is not None else None
    ci = fit.prefill_tokens_per_s_ci if fit is not None else None
    source = baseline_source
    if baseline_tok_s is None:
        baseline_tok_s = learned_baseline(spark)
        source = "session median" if baseline_tok_s is not None else None
    n, failed, hits = recent.window(now)
    age = None if last_probe_at is None else max(0.0, now - last_probe_at)
    up: bool | None = None  # PrefillTargetDown: every probe of the last minute failed
    last_n, last_failed, _ = recent.window(now, DOWN_WINDOW_S)
    if last_n:
        up = last_failed < last_n
    elif results:
        up = bool(results[-1].ok)  # nothing finished this minute: the last one says
    elif state in ("retrying", "failed"):
        up = False  # discovery failed: the server was never reached
    if baseline_tok_s is None and baseline_roofline:
        baseline_tok_s = roofline_expected(summary)
        source = "roofline" if baseline_tok_s is not None else None
    health = judge(HealthInputs(
        up=up, in_flight_s=in_flight_s,
        hang_threshold_s=hang_threshold_s(hang_after_s, (r.ttft_s for r in results)),
        interval_s=interval_s, recent_probes=n, recent_failed=failed,
        last_error=recent.last_error or (detail or None if up is False else None), throughput_tok_s=tps,
        throughput_upper_tok_s=ci[1] if ci else None, baseline_tok_s=baseline_tok_s,
        baseline_source=source,
        fixed_cost_lower_s=fit.intercept_ci[0] if fit is not None else None,
        cache_hit_probes=hits, since_last_probe_s=age))
    fixed = summary.fixed_cost
    level = summary.verdict.level
    word, text = VERDICT_WORDS.get(level, level), summary.verdict.text
    why = summary.ttft_verdict
    if why is not None and why.cause in CAUSE_WORDS:  # a cause stands out: it leads
        word, text = CAUSE_WORDS[why.cause], f"why is TTFT high? {why.headline}"
    return FleetRow(
        index=index, label=label, state=state, health=health,
        kind=summary.server.kind if summary.server else None,
        model=summary.server.model if summary.server else None,
        tok_s=tps, tok_s_ci=(ci[0], ci[1]) if ci else None,
        fixed_s=fixed.shown_s if fixed is not None else None,
        fixed_pinned=bool(fixed is not None and fixed.pinned),
        mfu=summary.roofline.mfu if summary.roofline is not None and fit is not None else None,
        verdict=word, verdict_text=text,
        ttft_ref_s=float(fit.predict(ref_tokens)) if fit is not None else None,
        ref_tokens=ref_tokens, queue_s=recent.queue_median_s, waiting=recent.waiting,
        cache_hits=summary.probes.cache_hits, cache_counted=recent.cache_counted,
        ok_probes=recent.ok_probes, probes=summary.probes.total,
        failed=summary.probes.failed, age_s=age, spark=tuple(spark), gpu=gpu)


# ------------------------------------------------------------------ the order
#: Sort keys of the overview: name -> what it orders by (``rank`` is worst first).
SORT_KEYS = ("worst", "name", "prefill", "mfu", "ttft", "fixed", "failed", "age")


def rank(row: FleetRow) -> tuple:
    """Worst first: down, then unhealthy by the alert rules, then the roofline verdict
    (wrong, below, ...), then no data yet, then healthy; within a group lower MFU
    first, then the label."""
    h = row.health
    if h.word == "down":
        group = 0
    elif h.unhealthy:
        group = 1 if h.severity == "critical" else 2
    elif row.tok_s is None:
        group = 4 + (row.state in ("waiting", "connecting"))
    else:
        group = 3 if _VERDICT_RANK.get(_level_of(row), 5) <= 1 else 6
    mfu = row.mfu if row.mfu is not None else math.inf
    return (group, _VERDICT_RANK.get(_level_of(row), 5), mfu, row.label)


def _level_of(row: FleetRow) -> str:
    for level, word in VERDICT_WORDS.items():
        if word == row.verdict:
            return level
    return row.verdict


def sort_rows(rows: Sequence[FleetRow], key: str = "worst", reverse: bool = False
              ) -> list[FleetRow]:
    """``rows`` in the order of ``key`` (one of ``SORT_KEYS``; "worst": ``rank``);
    unknown values (None) last whatever the direction.

    Raises:
        ValueError: an unknown key.
    """
    if key == "worst":
        return sorted(rows, key=rank, reverse=reverse)
    if key == "name":
        return sorted(rows, key=lambda r: r.label, reverse=reverse)
    get = {"prefill": lambda r: r.tok_s, "mfu": lambda r: r.mfu,
           "ttft": lambda r: r.ttft_ref_s, "fixed": lambda r: r.fixed_s,
           "failed": lambda r: r.failed, "age": lambda r: r.age_s}.get(key)
    if get is None:
        raise ValueError(f"unknown sort key {key!r} (known: {', '.join(SORT_KEYS)})")
    known = sorted((r for r in rows if get(r) is not None), key=lambda r: (get(r), r.label),
                   reverse=reverse)
    return known + [r for r in rows if get(r) is None]


# ------------------------------------------------------------ the fleet's load
@dataclass(frozen=True, slots=True)
class FleetLoad:
    """What the monitor itself sends: ``targets``; each target's probe starts at least
    its interval apart (``interval_min_s``..``interval_max_s``, plus up to ``jitter`` of
    it), the first ones spread over one interval (``offsets_s``); ``probes_per_s``:
    the whole fleet's ceiling; ``tokens_per_s``: prompt tokens per second at that
    ceiling (each target's mean length); at most one probe in flight per target."""

    targets: int
    interval_min_s: float
    interval_max_s: float
    jitter: float
    offsets_s: tuple[float, ...]
    probes_per_s: float
    tokens_per_s: float

    def line(self) -> str:
        """The load in full (the help, the notes)."""
        lo, hi = self.interval_min_s, self.interval_max_s
        gap = f"{lo:.3g} s" if abs(hi - lo) < 1e-9 else f"{lo:.3g}-{hi:.3g} s"
        return (f"≤ {self.probes_per_s:.3g} probes/s ({self.targets} targets, each ≥ {gap} "
                f"apart, 1 in flight), ~{self.tokens_per_s:,.0f} prompt tok/s")

    def short(self) -> str:
        """The load for the overview's top line: "≤ 2 probes/s ~1.4k tok/s"."""
        tok = self.tokens_per_s
        tok_s = f"{tok / 1000:.1f}k" if tok >= 1000 else f"{tok:.0f}"
        return f"≤ {self.probes_per_s:.3g} probes/s ~{tok_s} tok/s"


def stagger(targets: int, interval_s: float) -> tuple[float, ...]:
    """Start offsets (s) spreading ``targets`` evenly over one ``interval_s``, so their
    probes never start together."""
    if targets <= 0:
        return ()
    return tuple(interval_s * i / targets for i in range(targets))


def fleet_interval(targets: int, target_interval_s: float, fleet_rate: float | None) -> float:
    """Each target's gap between probe starts: its own ``target_interval_s``, stretched
    so the whole fleet stays under ``fleet_rate`` probe starts per second."""
    if fleet_rate and fleet_rate > 0 and targets > 0:
        return max(target_interval_s, targets / fleet_rate)
    return target_interval_s


def fleet_load(lengths: Sequence[Sequence[int]], intervals: Sequence[float], jitter: float
               ) -> FleetLoad:
    """The fleet's load for targets probing ``lengths`` (one sequence per target) with
    probe starts ``intervals`` apart (one per target); the first probes staggered over
    the longest interval."""
    n = len(lengths)
    ivs = [i for i in intervals if i > 0] or [1.0]
    rate = sum(1.0 / i for i in ivs)
    tok = sum(sum(ls) / len(ls) / i for ls, i in zip(lengths, ivs) if ls)
    return FleetLoad(targets=n, interval_min_s=min(ivs), interval_max_s=max(ivs),
                     jitter=jitter, offsets_s=stagger(n, max(ivs)), probes_per_s=rate,
                     tokens_per_s=tok)
