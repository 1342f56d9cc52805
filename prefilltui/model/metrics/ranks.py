"""How one engine's per-rank ``/metrics`` series combine into one figure: ``combine``.

An engine split over several GPUs may publish one series per rank of a metric.  What
adding them up means depends on what each rank holds:

- **Replicas** (SGLang ``tp_rank``, ``pp_rank``, ``moe_ep_rank``): the ranks of one
  tensor/pipeline/expert-parallel group run one scheduler loop on one batch, so each
  reports the same running and waiting requests and records the same requests' queue
  times.  SGLang records on ``attn_tp_rank == 0`` only, unless it is started with
  ``--enable-metrics-for-all-schedulers`` (then every rank does): summing those series
  would count every request once per rank.  One series is read: the lowest rank's
  (rank 0 is the one SGLang always records on).
  Source: python/sglang/srt/observability/metrics_collector.py
  ``SchedulerMetricsCollector.init_new`` (labels model_name, engine_type, tp_rank,
  pp_rank, moe_ep_rank, optional dp_rank; ``is_stats_logging_rank = attn_tp_rank == 0``)
  and server_args.py ``--enable-metrics-for-all-schedulers``.
- **Shards** (SGLang ``dp_rank``, vLLM ``engine``): each data-parallel rank schedules its
  own requests, so the ranks add up.
- **Attention data parallelism** (SGLang ``--enable-dp-attention``): one tensor-parallel
  group of ``tp_size`` ranks is split into ``dp_size`` attention groups of
  ``tp_size // dp_size`` ranks, each with its own scheduler and requests, and no
  ``dp_rank`` label (data_parallel_controller.py ``launch_dp_attention_schedulers``
  passes ``dp_rank=None``).  With ``RankLayout.group_size`` (from the server's
  ``/server_info``: tp_size, dp_size, enable_dp_attention) the ranks of one attention
  group are replicas and the groups add up; without it every ``tp_rank`` is taken as a
  replica of one scheduler (SGLang's default layout).
- **A total beside its breakdown** (SGLang ``priority`` on the queue gauges): with
  priority scheduling, ``num_queue_reqs{priority=""}`` is the whole queue and
  ``{priority="1"}``, ... its parts (metrics_collector.py ``QueueCount``).  Gauges read the
  total only; the request histograms' ``priority`` splits distinct requests and adds up.

Ratios (a prefix-cache hit rate, 0..1) are averaged over shards, never added.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RankLayout:
    """How an engine's ranks are laid out, for ``combine``.

    ``replica_labels``: labels whose series repeat one scheduler's state (lowest rank
    read).  ``total_labels``: (label, value) pairs marking a gauge's total beside its
    breakdown.  ``group_size``: ranks per attention data-parallel group (SGLang DP
    attention: tp_size // dp_size), None when the engine stated none.
    """

    replica_labels: tuple[str, ...] = ()
    total_labels: tuple[tuple[str, str], ...] = ()
    group_size: int | None = None


#: No rank labels: every label set adds up (vLLM, TGI, llama.cpp).
FLAT = RankLayout()

Row = tuple[dict[str, str], float]


def _rank(v: str | None) -> tuple[int, str]:
    """Sort key of a rank label value: numbers in order, absent first."""
    if v is None:
        return (-1, "")
    try:
        return (int(v), "")
    except ValueError:
        return (1 << 30, v)


def pick_replicas(rows: list[Row], layout: RankLayout) -> list[Row]:
    """One row per scheduler: rows that differ only in ``layout.replica_labels`` (and,
    with ``group_size``, whose ``tp_rank`` falls in one attention group) are one
    scheduler's state; the lowest rank's row is kept.  Order kept otherwise."""
    if not layout.replica_labels or len(rows) < 2:
        return rows
    chosen: dict[tuple, tuple[tuple, Row]] = {}
    for lab, v in rows:
        key = tuple(sorted((k, x) for k, x in lab.items() if k not in layout.replica_labels))
        if layout.group_size and "tp_rank" in lab:
            r = _rank(lab.get("tp_rank"))[0]
            if r >= 0:
                key += (("\0attn_group", str(r // layout.group_size)),)
        rank = tuple(_rank(lab.get(k)) for k in layout.replica_labels)
        best = chosen.get(key)
        if best is None or rank < best[0]:
            chosen[key] = (rank, (lab, v))
    return [row for _, row in chosen.values()]


def totals_only(rows: list[Row], layout: RankLayout) -> list[Row]:
    """Where some row carries a total marker (``layout.total_labels``, e.g.
    ``priority=""``), drop the rows of that label's breakdown (other values)."""
    for label, total in layout.total_labels:
        if any(lab.get(label) == total for lab, _ in rows):
            rows = [(lab, v) for lab, v in rows if label not in lab or lab[label] == total]
    return rows


def combine(rows: list[Row], layout: RankLayout = FLAT, *, gauge: bool = False,
            ratio: bool = False) -> float | None:
    """One figure from a metric's rows (label set, value), the rows already filtered to
    the metric's own series: replicas read once (``pick_replicas``), a gauge's total
    beside its breakdown (``totals_only``), then shards added (``ratio``: averaged).
    None without rows."""
    if gauge:
        rows = totals_only(rows, layout)
    rows = pick_replicas(rows, layout)
    if not rows:
        return None
    total = float(sum(v for _, v in rows))
    return total / len(rows) if ratio else total
