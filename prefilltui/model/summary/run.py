"""The run summary as one typed record: ``RunSummary``, built by ``analysis.analyze``.

Every view of a run reads it: the text summary and the sweep's table
(``render/text.py``), the JSON of ``sweep`` and ``report`` (``to_json``), the SVG/HTML
figure (``render/figure.py``), the TUI's export and the exporter's Prometheus
collector.  One shape, one name per field; ``to_json`` writes the versioned schema
``SCHEMA`` (field by field in docs/schema.md).  Seconds in data; None = not known.

The summary holds what the run file can tell (the same from ``sweep`` at the end of a
run and from ``report`` on its run file) and, in ``live``, what only the live run knew
(the URL, retried rate-limited attempts, the until-CI progress, the telemetry source,
the runner's notes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prefilltui.model.fit import LinearFit
from prefilltui.model.fit import FixedCost
from prefilltui.model.fit import TtftPercentiles
from prefilltui.model.roofline import MFU_ATTENTION
from prefilltui.model.roofline import MFU_LABEL, MatmulEstimate, ServerFlopsCheck
from prefilltui.model.types import JsonObject, ServerInfo, TelemetryKind
from prefilltui.model.fit import Progress
from prefilltui.model.slo import SloStatus
from prefilltui.model.users import TraceStats, UsersWindow, window_to_json

if TYPE_CHECKING:
    from prefilltui.model.roofline import ModelShape
    from prefilltui.model.roofline import Hardware
    from prefilltui.model.depth import DepthTable
    from prefilltui.model.diagnosis import Diagnosis
    from prefilltui.model.load import LoadSummary
    from prefilltui.model.diagnosis import TtftVerdict

#: The JSON schema's name and version.  /2: ``sweep`` and ``report`` write the same
#: summary (before, the sweep's JSON had its own shape with the analysis inside).
SCHEMA = "prefilltui.summary/2"
ESTIMATE_NOTE = ("Roofline figures are estimates: datasheet peaks and matmul FLOPs counted term "
                 "by term from the model's shape (projections, MLP, causal attention, the LM "
                 "head once per request; embeddings are lookups).")


def _fit(f: LinearFit | None) -> JsonObject | None:
    return f.to_json() if f is not None else None


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """The server as the run file's session line keeps it: kind ("vllm", "llama.cpp",
    ...), model id, context limit in tokens."""

    kind: str | None
    model: str | None
    context_tokens: int | None

    @classmethod
    def of(cls, info: ServerInfo) -> "ServerFacts":
        return cls(kind=info.kind, model=info.model, context_tokens=info.context_tokens)

    def to_json(self) -> JsonObject:
        return {"kind": self.kind, "model": self.model, "context_tokens": self.context_tokens}


@dataclass(frozen=True, slots=True)
class ProbeCounts:
    """How many probes: total, ok, failed (by ``errors`` kind), warm-up, cache hits (ok
    probes the prefix cache served part of, kept out of the fit), cache_counted (ok
    probes whose hit or miss the server itself counted: usage, timings or /metrics;
    None in summaries from before it was counted), fit_eligible (in the
    fit), estimated_lengths (fit probes whose prompt length is the client's estimate),
    the fit probes' token range, and left_out: the ok probes kept out of the fit by why
    (``ProbeResult.left_out``: "warm-up", "cache hit", "under load", "no TTFT or
    length"; ok = fit_eligible + their sum)."""

    total: int = 0
    ok: int = 0
    failed: int = 0
    warmup: int = 0
    cache_hits: int = 0
    cache_counted: int | None = None  # ok probes whose hit or miss the server counted
    fit_eligible: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    estimated_lengths: int = 0
    tokens_min: int | None = None
    tokens_max: int | None = None
    left_out: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        return {"total": self.total, "ok": self.ok, "failed": self.failed,
                "warmup": self.warmup, "cache_hits": self.cache_hits,
                "cache_counted": self.cache_counted,
                "fit_eligible": self.fit_eligible, "errors": dict(self.errors),
                "estimated_lengths": self.estimated_lengths, "tokens_min": self.tokens_min,
                "tokens_max": self.tokens_max, "left_out": dict(self.left_out)}


@dataclass(frozen=True, slots=True)
class QuadraticFit:
    """TTFT = a + b*n + c*n^2 (``fit`` holds c), and whether it ``applies``: c is
    significantly > 0 and adds >= 5 % of TTFT at the longest prompt."""

    fit: LinearFit
    applies: bool

    def to_json(self) -> JsonObject:
        return {**self.fit.to_json(), "applies": self.applies}


@dataclass(frozen=True, slots=True)
class WindowSummary:
    """The sliding-window fit over the last ``size`` probes: ``n`` probes in it, its
    ``fit``, and the throughput change against the all-time fit (a fraction; None
    when the window holds every probe)."""

    size: int
    n: int = 0
    fit: LinearFit | None = None
    throughput_change: float | None = None

    def to_json(self) -> JsonObject:
        return {"size": self.size, "n": self.n, "fit": _fit(self.fit),
                "throughput_change": self.throughput_change}


@dataclass(frozen=True, slots=True)
class RooflineSummary:
    """The fit held against the roofline (every figure an estimate).

    peak_flops / ridge_point of the hardware (None when unknown); efficiency of the
    expected-time line; expected_at_max: the matmul count and expected time at the
    fit's longest prompt and measured_ttft_at_max_s the fit's TTFT there; slope_source:
    which slope the FLOP/s come from ("robust", "ols", "quadratic (linear term)");
    flops_per_token: F', the matmul FLOPs one more prompt token costs over the fitted
    prompts (``analysis.slope_flops``; flop_basis "shape" | "params" | "quick", see
    ``model.roofline.flops``); achieved_flops (F'/b); mfu ("MFU (matmul FLOPs)",
    attention_convention "causal") and its 95 % interval (upper None when unbounded);
    with a quadratic that applies: the attention term expected from the achieved
    FLOP/s, the ratio of the measured c to it, and the MFU with attention FLOPs at the
    longest prompt.
    """

    peak_flops: float | None
    ridge_point: float | None
    efficiency: float
    expected_at_max: MatmulEstimate | None = None
    measured_ttft_at_max_s: float | None = None
    slope_source: str | None = None
    achieved_flops: float | None = None
    mfu: float | None = None
    mfu_ci: tuple[float | None, float | None] | None = None
    c_expected_s_per_token2: float | None = None
    c_ratio: float | None = None
    mfu_with_attention_at_max: float | None = None
    flops_per_token: float | None = None
    flop_basis: str | None = None
    mfu_label: str = MFU_LABEL
    attention_convention: str = MFU_ATTENTION
    estimate: bool = True

    def to_json(self) -> JsonObject:
        return {"estimate": self.estimate, "peak_flops": self.peak_flops,
                "ridge_point": self.ridge_point, "efficiency": self.efficiency,
                "expected_at_max": (self.expected_at_max.to_json()
                                    if self.expected_at_max is not None else None),
                "measured_ttft_at_max_s": self.measured_ttft_at_max_s,
                "slope_source": self.slope_source, "achieved_flops": self.achieved_flops,
                "mfu": self.mfu, "mfu_ci": list(self.mfu_ci) if self.mfu_ci else None,
                "c_expected_s_per_token2": self.c_expected_s_per_token2,
                "c_ratio": self.c_ratio,
                "mfu_with_attention_at_max": self.mfu_with_attention_at_max,
                "flops_per_token": self.flops_per_token, "flop_basis": self.flop_basis,
                "mfu_label": self.mfu_label, "attention_convention": self.attention_convention}


#: Every verdict level: ``roofline.verdict``'s, and the analysis' own when there is no
#: judgement (no slope, unknown model, too few probes, every probe failed).
VERDICTS = ("healthy", "below", "short-prompts", "wrong", "impossible", "unknown-peak",
            "unknown-model", "no-slope", "insufficient", "failed")


@dataclass(frozen=True, slots=True)
class Verdict:
    """One of ``VERDICTS`` and the sentence that says it."""

    level: str
    text: str

    def to_json(self) -> JsonObject:
        return {"level": self.level, "text": self.text}


@dataclass(frozen=True, slots=True)
class LiveFacts:
    """What only the live run knew (None in a summary read back from a run file):
    the server's URL (credentials shown as ***), the proxy requests went through
    (``measure.proxy``, as it may be shown; None: direct), rate-limited attempts that
    were retried, the until-CI / budget progress, what telemetry sampled and why, why
    the sweep stopped early, and the runner's notes (lengths capped at the context,
    fields the server rejected, lengths estimated, the depth phase's notes), and the
    users' window and span counts (``--otlp-listen``)."""

    base_url: str | None = None
    proxy: str | None = None
    rate_limited: int = 0
    until_ci: Progress | None = None
    telemetry: TelemetryKind | None = None
    telemetry_reason: str | None = None
    stopped_early: str | None = None
    notes: tuple[str, ...] = ()
    #: the users' requests over the run (the server's traces, ``--otlp-listen``) and
    #: how its spans went (``model.users``); None without a receiver
    users: UsersWindow | None = None
    spans: TraceStats | None = None

    def to_json(self) -> JsonObject:
        return {"base_url": self.base_url, "proxy": self.proxy,
                "rate_limited": self.rate_limited,
                "until_ci": self.until_ci.to_json() if self.until_ci is not None else None,
                "telemetry": self.telemetry, "telemetry_reason": self.telemetry_reason,
                "stopped_early": self.stopped_early, "notes": list(self.notes),
                "users": window_to_json(self.users) if self.users is not None else None,
                "spans": self.spans.to_json() if self.spans is not None else None}


@dataclass(frozen=True, slots=True)
class RunSummary:
    """A run, summarised (see the module docstring and docs/schema.md).

    ``fit`` is the fit shown (``--fit``: robust or OLS, above the knee when one was
    found); ``ols`` / ``robust`` both estimators; ``fit_lengths_estimated`` when its x
    axis holds client estimates (the server counted no tokens).  ``percentiles`` is the
    one per-length table.  ``overhead_median_s``: median TTFT - server prefill.
    ``model`` / ``hardware``: what the roofline resolved (None: unknown).
    ``depth``: the ``--depth`` table; ``diagnosis``: breakdown, chunking, cache warning,
    drift.  ``run_file``: the run file the summary is of.  ``server_flops``: the
    server's own FLOP count per probe against the formula (vLLM
    ``--enable-mfu-metrics``), when it publishes one.
    """

    server: ServerFacts | None
    probes: ProbeCounts
    fit: LinearFit | None
    ols: LinearFit | None
    robust: LinearFit | None
    knee_tokens: int | None
    quadratic: QuadraticFit | None
    fixed_cost: FixedCost | None
    percentiles: TtftPercentiles
    overhead_median_s: float | None
    window: WindowSummary
    model: ModelShape | None
    hardware: Hardware | None
    roofline: RooflineSummary | None
    verdict: Verdict
    notes: tuple[str, ...] = ()
    fit_lengths_estimated: bool = False
    depth: DepthTable | None = None
    diagnosis: Diagnosis | None = None
    run_file: str | None = None
    live: LiveFacts | None = None
    #: "why is TTFT high?" over the recent probes (``model.diagnosis.verdict``)
    ttft_verdict: TtftVerdict | None = None
    #: the background load (``--load``): what it was and did, stall, levels
    load: LoadSummary | None = None
    server_flops: ServerFlopsCheck | None = None
    #: each TTFT objective (``--slo``) now: n_max, attainment, burn (``model.slo``)
    slo: tuple[SloStatus, ...] = ()

    def to_json(self) -> JsonObject:
        """The summary as JSON (schema ``SCHEMA``; docs/schema.md)."""
        fit = _fit(self.fit)
        if fit is not None and self.fit_lengths_estimated:
            fit["lengths"] = "estimated"  # its x axis is the client's estimate
        return {
            "schema": SCHEMA,
            "estimate_note": ESTIMATE_NOTE,
            "server": self.server.to_json() if self.server else None,
            "run_file": self.run_file,
            "probes": self.probes.to_json(),
            "fit": fit,
            "ols": _fit(self.ols),
            "robust": _fit(self.robust),
            "knee_tokens": self.knee_tokens,
            "quadratic": self.quadratic.to_json() if self.quadratic else None,
            "fixed_cost": self.fixed_cost.to_json() if self.fixed_cost else None,
            "percentiles": self.percentiles.to_json(),
            "overhead_median_s": self.overhead_median_s,
            "window": self.window.to_json(),
            "model": self.model.to_json() if self.model else None,
            "hardware": self.hardware.to_json() if self.hardware else None,
            "roofline": self.roofline.to_json() if self.roofline else None,
            "verdict": self.verdict.to_json(),
            "notes": list(self.notes),
            "depth": self.depth.to_json() if self.depth else None,
            "diagnosis": self.diagnosis.to_json() if self.diagnosis else None,
            "live": self.live.to_json() if self.live else None,
            "ttft_verdict": self.ttft_verdict.to_json() if self.ttft_verdict else None,
            "load": self.load.to_json() if self.load else None,
            "slo": [st.to_json() for st in self.slo],
            "server_flops": self.server_flops.to_json() if self.server_flops else None,
        }
