"""Plain functions that turn core objects into what the widgets show.

No textual import, no I/O: the app calls these on its throttled tick and hands the
results to the widgets.  The roofline part is an ``Analysis`` object: the watch command
builds one from its ``RooflineSpec`` (``roofline_analysis``); tests pass fixed ones.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from prefilltui.model import intercept
from prefilltui.model.percentiles import quantiles
from prefilltui.model.analysis import assess
from prefilltui.model.fit import LinearFit
from prefilltui.model.sanitize import clean
from prefilltui.model.running_fit import FitSnapshot
from prefilltui.model.spec import RooflineSpec
from prefilltui.model.until_ci import Progress
from prefilltui.model.types import FitMethod, FitScope, ProbeResult, ServerInfo
from prefilltui.model.units import MISSING


@dataclass
class StatsView:
    """What the stats panel shows.  Seconds everywhere; None = not known."""

    method: FitMethod = "robust"
    which: FitScope = "all"
    n: int = 0
    intercept_s: float | None = None
    intercept_ci: tuple[float, float] | None = None
    slope_s: float | None = None  # seconds per token
    slope_ci: tuple[float, float] | None = None
    prefill_tokens_per_s: float | None = None  # 1/slope, prompt tokens/s
    prefill_tokens_per_s_ci: tuple[float, float] | None = None
    r2: float | None = None
    quadratic_note: str | None = None
    achieved_tflops: float | None = None
    mfu: float | None = None  # fraction
    estimate: bool = False  # achieved/MFU rest on estimated (uncertain) inputs
    verdict: str | None = None
    server_kind: str | None = None
    model: str | None = None
    device: str | None = None
    requested: int | None = None
    counted: int | None = None
    counted_estimated: bool = False  # the server gave no count: ``counted`` is an estimate
    cached_probes: int = 0
    last_cached_tokens: int | None = None
    cache_counted: int = 0  # ok probes whose hit or miss the server counted
    ok_probes: int = 0
    overhead_s: float | None = None
    queue_s: float | None = None
    prefill_s: float | None = None
    queue_estimated: bool = False  # queue_s inferred (queue_source idle/estimated)
    probes: int = 0
    failed: int = 0
    #: the fixed cost: pinned (core.intercept) or not; None = judge from intercept_ci
    fixed_pinned: bool | None = None
    server_fixed_s: float | None = None  # from the server's own prefill times
    #: TTFT percentiles (n, p50, p90, p99) over recent probes, and at one length
    pct_all: tuple[int, float, float, float] | None = None
    pct_len: tuple[int, int, float, float, float] | None = None  # (tokens, n, p50, p90, p99)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class RooflineView:
    """What the roofline comparison adds to the stats and the plot.

    lines: (label, tokens -> expected TTFT in seconds) drawn on the plot.
    """

    achieved_tflops: float | None = None
    mfu: float | None = None
    estimate: bool = False
    verdict: str | None = None
    lines: list[tuple[str, Callable[[float], float]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # shown in bold near the top


#: signature of an analysis: (fit snapshot or None, server info or None,
#: telemetry device names) -> RooflineView.  Must be cheap (called <= 4x/s).
Analysis = Callable[["FitSnapshot | LinearFit | None", "ServerInfo | None", list[str]],
                    RooflineView]


def no_analysis(_fit: FitSnapshot | LinearFit | None, _info: ServerInfo | None,
                _names: list[str]) -> RooflineView:
    return RooflineView()


def linear_of(snap: FitSnapshot | LinearFit | None) -> LinearFit | None:
    """The LinearFit to show from a FitSnapshot (or a LinearFit, or None)."""
    if snap is None or isinstance(snap, LinearFit):
        return snap
    return snap.fit


def as_snapshot(snap: FitSnapshot | LinearFit | None) -> FitSnapshot | None:
    """A FitSnapshot for ``core.analysis.assess`` (a bare LinearFit: no quadratic)."""
    if snap is None or isinstance(snap, FitSnapshot):
        return snap
    return FitSnapshot(which="all", method=snap.method, fit=snap, ols=None, robust=None,
                       quadratic=None, quadratic_applies=False, knee_tokens=snap.knee_tokens,
                       n_points=snap.n, sampled=snap.sampled)


#: TTFT percentiles on screen are over the last this many fit-eligible probes (and
#: this many per length): bounded work per refresh however long the run.
RECENT_TTFT = 5000
#: the server-side fixed cost on screen is fitted over the last this many probes
#: that carry a server prefill time.
RECENT_SERVER_TIMED = 500


def _recent() -> deque:
    return deque(maxlen=RECENT_TTFT)


@dataclass
class Counters:
    """Running counts the app keeps from ProbeDone messages, and bounded buffers of
    recent fit-eligible probes for the percentiles and the server-side fixed cost."""

    probes: int = 0
    ok: int = 0
    failed: int = 0
    cached: int = 0
    last_cached_tokens: int | None = None
    cache_counted: int = 0  # ok probes the server counted cached tokens for (0 included)
    errors: dict[str, int] = field(default_factory=dict)
    ttft: deque = field(default_factory=_recent)
    ttft_by_length: dict[int, deque] = field(default_factory=dict)
    server_timed: deque = field(default_factory=lambda: deque(maxlen=RECENT_SERVER_TIMED))
    #: server_timed additions so far, and the fixed cost computed at that count (the
    #: robust fit behind it ran on every redraw: ~4 % of the app's CPU, measured)
    server_timed_added: int = 0
    _server_fixed: tuple[int, intercept.ServerFixedCost | None] = (-1, None)

    def add(self, r: ProbeResult) -> None:
        if r.fit_eligible:
            self.ttft.append(r.ttft_s)
            self.ttft_by_length.setdefault(int(r.requested_tokens), _recent()).append(r.ttft_s)
            if r.server_prefill_s is not None:
                self.server_timed.append(r)
                self.server_timed_added += 1
        self.probes += 1
        if r.ok:
            self.ok += 1
            if r.cached_tokens is not None:
                self.cache_counted += 1
        else:
            self.failed += 1
            kind = r.error_kind or "failed"
            self.errors[kind] = self.errors.get(kind, 0) + 1
        if r.cache_hit:
            self.cached += 1
            self.last_cached_tokens = r.cached_tokens

    def server_fixed_cost(self) -> intercept.ServerFixedCost | None:
        """``intercept.server_fixed_cost`` of ``server_timed``, recomputed once the
        server-timed probes have grown by 5 % (every probe up to 20 of them): a slow
        quantity, and its robust fit on every redraw was ~3 % of the app's CPU."""
        last = self._server_fixed[0]
        if last < 0 or self.server_timed_added - last >= max(1, last // 20):
            self._server_fixed = (self.server_timed_added,
                                  intercept.server_fixed_cost(list(self.server_timed)))
        return self._server_fixed[1]


def build_stats(snap: FitSnapshot | LinearFit | None, *, which: FitScope, method: FitMethod,
                info: ServerInfo | None, last: ProbeResult | None, counters: Counters,
                device: str | None, roof: RooflineView | None) -> StatsView:
    """Assemble the StatsView from the fit snapshot, server info and last probe."""
    fit = linear_of(snap)
    snap = as_snapshot(snap)
    v = StatsView(method=snap.method if snap else method, which=which,
                  probes=counters.probes, failed=counters.failed,
                  cached_probes=counters.cached, last_cached_tokens=counters.last_cached_tokens,
                  cache_counted=counters.cache_counted, ok_probes=counters.ok)
    v.n = int(snap.n_points if snap else 0)
    if fit is not None:
        v.intercept_s = fit.intercept_s
        v.intercept_ci = tuple(fit.intercept_ci) if fit.intercept_ci else None
        v.slope_s = fit.slope_s_per_token
        v.slope_ci = tuple(fit.slope_ci) if fit.slope_ci else None
        v.prefill_tokens_per_s = fit.prefill_tokens_per_s
        ci = fit.prefill_tokens_per_s_ci
        if ci and ci[0] is not None and ci[1] is not None:
            v.prefill_tokens_per_s_ci = (ci[0], ci[1])
        v.r2 = fit.r2
        v.n = fit.n
    _fixed_cost(v, fit, counters)
    _percentiles(v, counters, last)
    if snap is not None and snap.knee_tokens:
        v.notes.append(f"knee at {snap.knee_tokens} tok (fit above)")
    if snap is not None and snap.quadratic_applies and snap.quadratic is not None:
        c = snap.quadratic.c_s_per_token2
        if c:
            v.quadratic_note = f"quadratic: c={c * 1e9:.3g} ns/tok²"
    if info is not None:
        v.server_kind = info.kind
        # llama.cpp reports the GGUF path as the model id: the panel shortens it
        v.model = clean(info.model) if info.model else None
    v.device = device
    if last is not None:
        v.requested = last.requested_tokens
        v.counted = last.prompt_tokens
        v.counted_estimated = last.prompt_tokens_source == "estimate"
        v.overhead_s = last.overhead_s
        v.queue_s = last.queue_s
        v.prefill_s = last.server_prefill_s
        v.queue_estimated = last.queue_source in ("idle", "estimated")
    if roof is not None:
        v.achieved_tflops = roof.achieved_tflops
        v.mfu = roof.mfu
        v.estimate = roof.estimate
        v.verdict = roof.verdict
        v.notes.extend(n for n in (drop_repeat(x, roof.verdict) for x in roof.notes) if n)
        v.warnings.extend(roof.warnings)
    return v


def _fixed_cost(v: StatsView, fit: Any, counters: Counters) -> None:
    """Pinned or not (core.intercept), and the server-side fixed cost."""
    fc = intercept.fixed_cost(fit) if fit is not None and hasattr(fit, "intercept_ci") else None
    if fc is not None:
        v.fixed_pinned = fc.pinned
    if counters.server_timed:
        server = counters.server_fixed_cost()
        if server is not None and server.pinned:
            v.server_fixed_s = server.fixed_cost_s


def _percentiles(v: StatsView, counters: Counters, last: ProbeResult | None) -> None:
    if not counters.ttft:
        return
    q = quantiles(list(counters.ttft))
    v.pct_all = (q.n, q.p50_s, q.p90_s, q.p99_s)
    if last is not None:
        vals = counters.ttft_by_length.get(int(last.requested_tokens))
        if vals:
            q = quantiles(list(vals))
            v.pct_len = (int(last.requested_tokens), q.n, q.p50_s, q.p90_s, q.p99_s)


def drop_repeat(note: str, phrase: str | None) -> str:
    """``note`` without the sentence or clause that repeats ``phrase`` (the verdict
    word, e.g. "MFU needs --peak-tflops", already shown on its own line)."""
    if not phrase or phrase not in note:
        return note
    out = []
    for sentence in re.split(r"(?<=[.;])\s+", note):
        if phrase in sentence:
            sentence = sentence[: sentence.find(phrase)].rstrip(" ;,:.")
            sentence = sentence + "." if sentence else ""
        if sentence:
            out.append(sentence)
    text = " ".join(out).rstrip(" ;,:")
    return text + "." if text and not text.endswith(".") else text


def status_line(state: str, detail: str, counters: Counters, rng: tuple[int, int],
                which: str, paused: bool, notices: tuple[str, ...] = (), *,
                progress: Progress | None = None, cap_note: str | None = None,
                load: str | None = None) -> str:
    """The always-visible connection/progress line (markup).  ``notices``: the
    session's short labels (``SweepRunner.notices``, e.g. "lengths estimated",
    "sent without stream_options"), shown last, in the warning colour.  ``progress``:
    the runner's ``until_ci.Progress`` (the throughput interval against its target);
    ``cap_note``: set when the lengths were capped at the server's context; ``load``:
    the background load's words (markup, ``load_view.load_status``), after the fit."""
    icons = {"connecting": "[$warning]◌ connecting[/]", "probing": "[$success]● probing[/]",
             "idle": "[$success]○ idle[/]", "burst": "[$warning]▲ burst[/]",
             "retrying": "[$warning]↻ retrying[/]", "paused": "[$accent]‖ paused[/]",
             "stopped": "■ stopped", "done": "■ done", "failed": "[$error]✖ failed[/]"}
    # a burst runs while paused: say so, not "paused"
    shown = ("paused" if paused and state not in ("failed", "stopped", "burst", "paused")
             else state)
    text = icons.get(shown, shown)
    if shown == "paused" and state != "paused":
        detail = ""  # the runner's detail belongs to the probe it is finishing
    if detail and shown in ("connecting", "retrying", "failed", "probing", "done", "idle",
                            "burst", "paused"):
        if shown == "burst" and detail.startswith("done: "):
            detail = detail[6:]
        text += f" {_escape(detail)}"
    parts = [text, f"{counters.ok} ok"]
    if counters.failed:
        parts.append(f"[$error]{counters.failed} failed[/]")
    parts.append(f"{rng[0]}–{rng[1]} tok" + (" [$warning](context cap)[/]" if cap_note else ""))
    if progress is not None and progress.target_pct is not None and shown != "done":
        hw = progress.half_width_pct
        now = MISSING if hw is None else ("∞" if hw == float("inf") else f"±{hw:.1f}")
        parts.append(f"CI {now}→±{progress.target_pct:g} %")
    parts.append("window fit" if which == "window" else "all-time fit")
    if load:
        parts.append(load)
    parts += [f"[$warning]{_escape(n)}[/]" for n in notices]
    return "  ".join(parts)


def _escape(text: str) -> str:
    """``text`` safe in markup: control characters escaped (``model.sanitize``), ``[``
    escaped (a server's words never become markup)."""
    return clean(text).replace("[", r"\[")


#: Short words for roofline.verdict levels (the full sentence is shown below them).
VERDICT_WORDS = {
    "healthy": "healthy", "below": "below expectations", "wrong": "something is wrong",
    "impossible": "impossible: check inputs", "unknown-peak": "MFU needs --peak-tflops",
    "short-prompts": "prompts too short to judge",
}


def roofline_analysis(spec: RooflineSpec) -> Analysis:
    """An Analysis built from the roofline inputs (model.spec, model.roofline, and
    ``model.analysis.assess`` for the slope choice, MFU and verdict, as in ``analyze``).

    Model shape: flags > --model-config > server metadata > catalog; hardware: --gpu >
    the telemetry's first NVML name; resolved once per (server, device names) and
    cached.  Lines: expected prefill time FLOPs(n)/peak and FLOPs(n)/(peak*efficiency),
    FLOPs(n) the matmul count of ``model.flops`` (causal attention, LM head once).
    """
    from prefilltui.model import flops as flopcount
    from prefilltui.model.spec import resolve_gpu, resolve_model

    efficiency = spec.efficiency
    cache: dict[Any, Any] = {}

    def resolve(info: ServerInfo | None, names: list[str]):
        key = (id(info), info.model if info else None, info.params if info else None,
               tuple(n for n in names if n))
        if key not in cache:
            if spec.config_problem:
                model, notes = None, [f"model shape: {spec.config_problem}"]
            else:
                model, notes = resolve_model(spec, info)
            gpu_names = [n for n in names if n and not n.upper().startswith("CPU")]
            hw, n2 = resolve_gpu(spec, gpu_names)
            cache.clear()
            cache[key] = (model, hw, notes + n2)
        return cache[key]

    def analysis(snap: FitSnapshot | LinearFit | None, info: ServerInfo | None,
                 names: list[str]) -> RooflineView:
        model, hw, notes = resolve(info, names)
        view = RooflineView(estimate=True)
        peak = hw.peak_flops if hw is not None else None
        if model is None or not model.params:
            if snap is not None and linear_of(snap) is not None:
                view.notes.append("FLOP/s and MFU need --params (or --model-config)")
            return view
        if peak and model.layers and model.d_attn:
            f0, f1, f2 = flopcount.polynomial(model)  # matmul FLOPs of one request
            view.lines = [
                ("peak", lambda n, k=(f0, f1, f2), pk=peak: _flops(n, k) / pk),
                (f"{efficiency:.0%}", lambda n, k=(f0, f1, f2), pk=peak:
                    _flops(n, k) / (pk * efficiency)),
            ]
        fit = linear_of(snap)
        if fit is None or not fit.slope_s_per_token or fit.slope_s_per_token <= 0:
            return view
        a = assess(as_snapshot(snap), model, hw)
        if a is None:
            return view
        view.achieved_tflops = a.achieved_flops / 1e12 if a.achieved_flops else None
        view.mfu = a.mfu
        view.verdict = VERDICT_WORDS.get(a.level, a.level)
        view.notes.append(a.text)
        return view

    return analysis


def _flops(n: Any, k: tuple[float, float, float]) -> Any:
    """f0 + f1 n + f2 n² for a scalar or ndarray n (``flops.polynomial``)."""
    return k[0] + k[1] * n + k[2] * n * n


def with_baseline(analysis: Analysis, baseline_fit: LinearFit | None) -> Analysis:
    """Wrap an Analysis so a worse live fit than ``baseline_fit`` (a LinearFit from
    ``--baseline RUN.jsonl``) adds core.drift.drift's warning."""
    from prefilltui.model.drift import drift

    def wrapped(snap: FitSnapshot | LinearFit | None, info: ServerInfo | None,
                names: list[str]) -> RooflineView:
        view = analysis(snap, info, names)
        warning = drift(baseline_fit, linear_of(snap))
        if warning:
            view.warnings.append(f"⚠ {warning}")
        return view

    return wrapped
