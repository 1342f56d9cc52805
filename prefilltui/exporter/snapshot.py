"""What ``/metrics`` shows for one target, as one frozen ``TargetSnapshot`` (with its
per-length ``LengthHistogram`` rows); ``TargetProber`` (``target``) publishes a new one
after every probe and the collector reads the newest at scrape time.

Times are unix seconds, durations seconds.  No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefilltui.model.path import PathSummary

from prefilltui.exporter.health import Expected, ttft_buckets
from prefilltui.exporter.load_figures import LoadFigures
from prefilltui.exporter.slo import SloFigures
from prefilltui.model import defaults
from prefilltui.model.fit import LinearFit
from prefilltui.model.summary import RunSummary
from prefilltui.model.users import TraceStats, UsersWindow

#: TTFT histogram bucket bounds in seconds at the default probe time cap
#: (``defaults.TIMEOUT_S``, 120 s): a 1-2-5 series from the fastest fixed cost a
#: loopback server shows (~5 ms), closed by the cap (``health.ttft_buckets``), so no
#: successful probe lands in +Inf.  A target's own cap gives its own bounds.
TTFT_BUCKETS_S = ttft_buckets(defaults.TIMEOUT_S)


@dataclass(frozen=True, slots=True)
class LengthHistogram:
    """TTFT histogram of one requested prompt length: cumulative bucket counts (one per
    bound of the snapshot's ``ttft_bounds_s``, then +Inf), sum in seconds, count."""

    tokens: int
    cumulative: tuple[int, ...]
    sum_s: float
    count: int


@dataclass(frozen=True, slots=True)
class TargetSnapshot:
    """Everything ``/metrics`` shows for one target, read in one go.

    ``up``: None before the first probe or discovery attempt; False while the server is
    unreachable or the last probe failed.  ``ready``: the target's prober runs and has
    discovered its server (False while queued to start, connecting, or failed to start).  ``probes``: ((outcome, error_kind), count)
    pairs with every kind present (zeros included, so rates work from the start).
    ``summary``: the window's ``RunSummary`` (None before the first successful probe);
    ``fit``, ``verdict`` (level, None before a fit) and ``parts_s`` (median overhead /
    queue / prefill seconds over the window, where the server publishes them) are its
    parts the ``/metrics`` page shows.
    Times are unix seconds: ``fit_ts`` when the newest probe of the fit finished,
    ``in_flight_since`` when the probe in flight (if any) began; ages are taken at
    scrape time from them.  ``expected``: the explicit baseline (config, healthy run or
    roofline), None when the alerts must learn one.  ``last_error``: (error kind, HTTP
    status where the status is the error) of the last failed probe or discovery.
    """

    target: str
    model: str
    server_kind: str
    api: str
    interval_s: float
    url: str = ""
    state: str = "connecting"
    detail: str = ""
    up: bool | None = None
    ready: bool = False
    last_probe_ts: float | None = None
    last_success_ts: float | None = None
    probes: tuple[tuple[tuple[str, str], int], ...] = ()
    cache_hit_probes: int = 0
    cached_tokens: int = 0
    cache_counted_probes: int = 0  # ok probes whose hit or miss the server itself counted
    prompt_tokens: int = 0
    ttft_bounds_s: tuple[float, ...] = TTFT_BUCKETS_S
    histograms: tuple[LengthHistogram, ...] = ()
    summary: RunSummary | None = None
    length_medians_s: tuple[tuple[int, float], ...] = ()
    fit_ts: float | None = None
    window_size: int = 0
    stale_after_s: float = 60.0
    in_flight_since: float | None = None
    hang_threshold_s: float = 30.0
    timeout_s: float = defaults.TIMEOUT_S
    expected: Expected | None = None
    last_error: tuple[str, int | None] | None = None
    metrics_problem: str | None = None
    run_file: str | None = None
    #: the background load and its figures, only when the target's config asks for one
    load: LoadFigures | None = None
    #: the users' window (the server's traces, else its /metrics; ``model.users``) and
    #: the probes' own spans (``otlp_listen``); None when not known
    users: UsersWindow | None = None
    spans: TraceStats | None = None
    #: the server's process start time (unix s, its ``process_start_time_seconds`` as
    #: last confirmed; None where it publishes none) and its changes so far, (kind,
    #: count) for every kind once the watch runs (``model.server_change``)
    server_start_time_s: float | None = None
    server_changes: tuple[tuple[str, int], ...] = ()
    #: each TTFT objective (``slo``): its counters and its state (``exporter.slo``)
    slo: tuple[SloFigures, ...] = ()
    #: a target that is a path (``prefill`` / ``decode``): its window's hops, fits and
    #: KV figures (``model.path.PathSummary``), and the failed KV transfers counted
    #: around its probes so far; None / 0 for a single server
    path: PathSummary | None = None
    kv_failed_total: int = 0

    @property
    def fit(self) -> LinearFit | None:
        return self.summary.fit if self.summary is not None else None

    @property
    def verdict(self) -> str | None:
        return self.summary.verdict.level if self.summary is not None else None

    @property
    def parts_s(self) -> tuple[tuple[str, float], ...]:
        b = self.summary.diagnosis.breakdown if self.summary and self.summary.diagnosis else None
        med = b.median if b is not None else None
        if med is None:
            return ()
        return tuple((name, float(v)) for name, v in (
            ("overhead", med.overhead_s), ("queue", med.queue_s), ("prefill", med.prefill_s))
            if v is not None)

    @property
    def ttft_cause(self) -> str | None:
        """Why TTFT is high over the window (``model.diagnosis.verdict``), None before a summary."""
        v = self.summary.ttft_verdict if self.summary is not None else None
        return v.cause if v is not None else None

    @property
    def ttft_cause_s(self) -> tuple[tuple[str, float], ...]:
        """(cause, seconds of TTFT it explains) for each cause that holds."""
        v = self.summary.ttft_verdict if self.summary is not None else None
        return tuple((e.cause, e.seconds) for e in v.evidence) if v is not None else ()
