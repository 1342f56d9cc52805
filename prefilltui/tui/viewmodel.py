"""Plain functions that turn the run summary into what the widgets show.

No textual import, no I/O: the dashboard calls these on its throttled tick and hands
the results to the widgets.  The stats panel is a view of the run's ``RunSummary``
(kept up to date probe by probe by ``model.summary.live.LiveSummary``, the same record
``analyze`` gives ``sweep`` and ``report``), plus the last probe's own figures; the
plot's roofline lines come from the summary's model shape and hardware.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from prefilltui.model.fit import LinearFit, throughput_text
from prefilltui.model.sanitize import clean
from prefilltui.model.summary import QUADRATIC_SOURCE_WORDS, ProbeCounts, RunSummary
from prefilltui.model.fit import Progress
from prefilltui.model.types import FitMethod, FitScope, ProbeResult
from prefilltui.model.diagnosis import expected_words
from prefilltui.model.units import MISSING, curvature, duration
from prefilltui.model.users import UsersEvidence


@dataclass
class StatsView:
    """What the stats panel shows.  Seconds everywhere; None = not known."""

    method: FitMethod = "robust"
    which: FitScope = "all"
    n: int = 0
    #: why the fit has fewer probes than are ok ("fit n 14 of 16 ok: left out 1
    #: warm-up, 1 cache hit"; ``fit_counts``); None without a fit
    fit_counts: str | None = None
    intercept_s: float | None = None
    intercept_ci: tuple[float, float] | None = None
    slope_s: float | None = None  # seconds per token
    slope_ci: tuple[float, float] | None = None
    prefill_tokens_per_s: float | None = None  # 1/slope, prompt tokens/s
    prefill_tokens_per_s_ci: tuple[float, float] | None = None
    r2: float | None = None
    unresolved: bool = False  # the slope's 95 % interval includes 0 (LinearFit.unresolved)
    quadratic_note: str | None = None
    achieved_tflops: float | None = None
    mfu: float | None = None  # fraction
    #: where achieved FLOP/s and MFU come from when it is not the fit shown (the
    #: quadratic's linear term), with that slope's throughput; None: the fit shown
    flops_from: str | None = None
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
    cache_counted: int = 0  # ok probes whose hit or miss the server counted (0 included)
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
    #: what FLOP/s and MFU need when neither can be had ("... need --params")
    flops_hint: str | None = None
    #: the live verdict's whole line (``verdict_line``: "why TTFT: <cause>" when TTFT is
    #: above its expectation beyond the uncertainty, else "TTFT as expected: ...")
    why: str | None = None
    #: ``why`` and shorter forms of it, longest first (``verdict_forms``): the headline
    #: shows the first that fits its width, the details ``why`` whole
    why_forms: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def roofline_lines(summary: RunSummary | None) -> list[tuple[str, Callable[[float], float]]]:
    """The plot's expectation lines from the summary's model shape and hardware:
    (label, tokens -> expected TTFT in s) at the peak and at ``efficiency`` of it,
    FLOPs(n) the matmul count of ``model.roofline.flops`` (causal attention, LM head once); none
    without the layers, the attention width and a peak.  Estimates, as the legend
    says."""
    from prefilltui.model.roofline import polynomial

    if summary is None or summary.model is None or summary.roofline is None:
        return []
    m, peak = summary.model, summary.roofline.peak_flops
    if not (m.params and m.layers and m.d_attn and peak):
        return []
    eff = summary.roofline.efficiency
    k = polynomial(m)  # matmul FLOPs of one request: f0 + f1 n + f2 n²
    return [("peak", lambda n, k=k, pk=peak: _flops(n, k) / pk),
            (f"{eff:.0%}", lambda n, k=k, pk=peak: _flops(n, k) / (pk * eff))]


def _flops(n: Any, k: tuple[float, float, float]) -> Any:
    """f0 + f1 n + f2 n² for a scalar or ndarray n (``flops.polynomial``)."""
    return k[0] + k[1] * n + k[2] * n * n


def drift_warning(baseline: LinearFit | None, fit: LinearFit | None) -> str | None:
    """``model.diagnosis.baseline.drift``'s warning of the live fit against ``--baseline``'s, as the
    panel shows it ("⚠ ..."), or None."""
    from prefilltui.model.diagnosis import drift

    text = drift(baseline, fit)
    return f"⚠ {text}" if text else None


#: ``ProbeCounts.left_out``'s reasons in the order said, as (one, many).
_LEFT_OUT_WORDS = (("warm-up", ("warm-up", "warm-ups")), ("cache hit", ("cache hit", "cache hits")),
                   ("under load", ("under load", "under load")),
                   ("no TTFT or length", ("with no TTFT or length", "with no TTFT or length")))


def fit_counts(c: ProbeCounts, fit: LinearFit, which: FitScope) -> str:
    """Why the fit has fewer probes than the status line's ok count, every one of them
    accounted for: "fit n 14 of 16 ok: left out 1 warm-up, 1 cache hit" (the ok
    probes kept out of the fit, ``ProbeCounts.left_out``), then the robust fit's
    outliers (offered, not used) and the eligible probes this fit was not given: older
    than the window, or, all-time, from before a reset or below a knee."""
    said = []
    for key, (one, many) in _LEFT_OUT_WORDS:
        k = c.left_out.get(key, 0)
        if k:
            said.append(f"{k:,} {one if k == 1 else many}")
    outliers = max(0, fit.n_offered - fit.n)
    if outliers:
        said.append(f"{outliers:,} outlier{'s' if outliers != 1 else ''} (robust fit)")
    rest = max(0, c.fit_eligible - max(fit.n_offered, fit.n))
    if rest:
        said.append(f"{rest:,} older than the window" if which == "window"
                    else f"{rest:,} not in this fit (a reset, a knee)")
    head = f"fit n {fit.n:,} of {c.ok:,} ok"
    return f"{head}: left out {', '.join(said)}" if said else head


def build_stats(summary: RunSummary | None, *, which: FitScope, method: FitMethod,
                last: ProbeResult | None, device: str | None,
                last_cached_tokens: int | None = None,
                warnings: tuple[str, ...] = ()) -> StatsView:
    """The StatsView: a view of the run summary (``model.summary.live.LiveSummary``'s, the same
    ``RunSummary`` ``analyze`` gives) plus the last probe's own figures (tokens, overhead,
    queue, prefill), the telemetry device and extra ``warnings`` (the drift)."""
    v = StatsView(method=method, which=which, device=device, warnings=list(warnings))
    if summary is not None:
        _from_summary(v, summary, last)
    if last is not None:
        v.requested = last.requested_tokens
        v.counted = last.prompt_tokens
        v.counted_estimated = last.prompt_tokens_source == "estimate"
        v.overhead_s = last.overhead_s
        v.queue_s = last.queue_s
        v.prefill_s = last.server_prefill_s
        v.queue_estimated = last.queue_source in ("idle", "estimated")
    v.last_cached_tokens = last_cached_tokens
    return v


def _from_summary(v: StatsView, s: RunSummary, last: ProbeResult | None) -> None:
    c = s.probes
    v.probes, v.failed, v.cached_probes = c.total, c.failed, c.cache_hits
    v.cache_counted, v.ok_probes = c.cache_counted or 0, c.ok
    fit = s.fit
    if fit is not None:
        v.method = fit.method
        v.n = fit.n
        v.fit_counts = fit_counts(c, fit, v.which)
        v.intercept_s = fit.intercept_s
        v.intercept_ci = tuple(fit.intercept_ci) if fit.intercept_ci else None
        v.slope_s = fit.slope_s_per_token
        v.slope_ci = tuple(fit.slope_ci) if fit.slope_ci else None
        v.prefill_tokens_per_s = fit.prefill_tokens_per_s
        ci = fit.prefill_tokens_per_s_ci
        if ci and ci[0] is not None and ci[1] is not None:
            v.prefill_tokens_per_s_ci = (ci[0], ci[1])
        v.r2 = fit.r2
        v.unresolved = fit.unresolved
    if s.fixed_cost is not None:
        v.fixed_pinned = s.fixed_cost.pinned
        server = s.fixed_cost.server
        if server is not None and server.pinned:
            v.server_fixed_s = server.fixed_cost_s
    q = s.percentiles.overall
    if q.n:
        v.pct_all = (q.n, q.p50_s, q.p90_s, q.p99_s)
        want = int(last.requested_tokens) if last is not None else None
        row = next((r for r in s.percentiles.by_length if r.requested_tokens == want), None)
        if row is not None and row.ttft.n:
            t = row.ttft
            v.pct_len = (row.requested_tokens, t.n, t.p50_s, t.p90_s, t.p99_s)
    if s.knee_tokens:
        v.notes.append(f"knee at {s.knee_tokens} tok (fit above)")
    if s.quadratic is not None and s.quadratic.applies and s.quadratic.fit.c_s_per_token2:
        v.quadratic_note = f"quadratic: c = {curvature(s.quadratic.fit.c_s_per_token2)}"
    if s.server is not None:
        v.server_kind = s.server.kind
        # llama.cpp reports the GGUF path as the model id: the panel shortens it
        v.model = clean(s.server.model) if s.server.model else None
    roof, level = s.roofline, s.verdict.level
    if roof is not None and fit is not None:
        v.achieved_tflops = roof.achieved_flops / 1e12 if roof.achieved_flops else None
        v.mfu = roof.mfu
        v.estimate = roof.estimate
        quad = s.quadratic.fit if s.quadratic is not None else None
        if roof.achieved_flops and quad is not None and roof.slope_source != fit.method:
            # the headline's prefill is the line's; FLOP/s and MFU are this slope's
            # (1/b of the quadratic's linear term = achieved / F'), or too noisy yet
            v.flops_from = f"FLOP/s, MFU: {QUADRATIC_SOURCE_WORDS}, {throughput_text(quad, 'tok/s')}"
    if level in VERDICT_WORDS:
        v.verdict = VERDICT_WORDS[level]
        note = drop_repeat(s.verdict.text, v.verdict)
        if note:
            v.notes.append(note)
    elif level == "unknown-model":
        v.flops_hint = "FLOP/s and MFU need --params"
        v.notes.append("FLOP/s and MFU need --params (or --model-config)")
    elif level == "no-slope":
        v.notes.append(s.verdict.text)


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


def status_line(state: str, detail: str, counts: ProbeCounts, rng: tuple[int, int],
                which: str, paused: bool, notices: tuple[str, ...] = (), *,
                progress: Progress | None = None, cap_note: str | None = None,
                load: str | None = None) -> str:
    """The always-visible connection/progress line (markup).  ``counts``: the run's
    probe counts (``RunSummary.probes``).  ``notices``: the
    session's short labels (``SweepRunner.notices``, e.g. "lengths estimated",
    "sent without stream_options"), shown last, in the warning colour.  ``progress``:
    the runner's ``until_ci.Progress`` (the throughput interval against its target);
    ``cap_note``: the cap that shortens the lengths ("context cap", "time cap":
    ``SweepRunner.cap_note``), said after the range; ``load``:
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
    parts = [text, f"{counts.ok} ok"]
    if counts.failed:
        parts.append(f"[$error]{counts.failed} failed[/]")
    parts.append(f"{rng[0]}–{rng[1]} tok"
                 + (f" [$warning]({_escape(cap_note)})[/]" if cap_note else ""))
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


@dataclass(frozen=True, slots=True)
class VerdictNow:
    """What the verdict reads about the present besides the probes (``verdict_now``).

    users -- what the users' requests tell (``model.users.UsersEvidence``: their
      window now and kept requests; the reference is left to the feed's
      ``HeldExpectation``); the empty record without a receiver;
    in_flight_age_s -- how long the probe in flight has waited (s; None: none is);
    waiting_now -- the server's waiting gauge as the newest ``/metrics`` scrape read
      it (requests; None without one).
    """

    users: UsersEvidence = UsersEvidence()
    in_flight_age_s: float | None = None
    waiting_now: float | None = None


def verdict_now(feed: Any) -> VerdictNow:
    """The present as the verdict reads it, from a ``Feed``: whatever
    ``feed.users_evidence()`` gives when the feed has one (the users' window and
    spans), the probe in flight's age and the waiting gauge (``VerdictNow``); what
    was read before a failure is kept, the rest left empty; never raises."""
    users, age, waiting_now = UsersEvidence(), None, None
    try:
        # the users' figures where the feed has them (the OTLP receiver's window)
        extra = getattr(feed, "users_evidence", None)
        if callable(extra):
            users = extra() or UsersEvidence()
        age = feed.in_flight_s
        metrics = getattr(feed.config, "metrics", None)
        sample = metrics() if metrics is not None else None
        waiting = sample.get("waiting") if sample is not None else None
        if waiting is not None:
            waiting_now = float(waiting)
    except Exception:  # noqa: BLE001 - a view never fails on its inputs
        pass
    return VerdictNow(users, age, waiting_now)


def _as_expected(v: Any) -> bool:
    """Whether the verdict states the expectation (nothing above it), not a cause."""
    return v is not None and v.cause == "none" and not v.above and bool(v.expected)


def verdict_line(v: Any) -> str:
    """The stats panel's verdict line: "why TTFT: <cause>" only when TTFT is above its
    expectation beyond the uncertainty (or nothing can be held against it); else the
    expectation ("TTFT as expected: 500 tok 270 ± 5 ms ...")."""
    if v is None:
        return f"why TTFT: {MISSING}"
    if _as_expected(v):
        return expected_line(v)
    who = "users' " if v.whose == "users" else ""
    return f"why {who}TTFT: {v.headline}"


def verdict_forms(v: Any) -> tuple[str, ...]:
    """``verdict_line`` and, when it states the expectation, shorter forms of it for the
    headline, longest first: the shortest and longest length as tokens→TTFT without the
    uncertainty ("TTFT as expected: 33→22 ms, 4.1k→204 ms", 40 columns), the unit once
    ("TTFT ok: 33→22, 4.1k→204 ms", the 28 of an 80-column terminal), the longest alone
    ("TTFT ok: 4.1k→204 ms"), over the lengths the fit pins (a length it does not pin
    is left out of the short forms; the whole line, with its uncertainties, "not
    pinned" and the idle server, stays in the details)."""
    line = verdict_line(v)
    if not _as_expected(v):
        return (line,)
    # the lengths the fit pins: a "4→?" beside them said nothing a person could use
    rows = [r for r in v.expected if r[2] < r[1]]
    ends = [rows[0], rows[-1]] if len(rows) > 1 else rows
    idle = " (idle)" if getattr(v, "idle", False) else ""
    times = [duration(e) for _n, e, _m in ends]
    if not rows:
        # no length pinned: "as expected: 4→?, 1k→?" would claim a judgement the noise
        # does not allow (a loaded CPU: single probes ± 50 % and more)
        return (line, f"TTFT too noisy to judge yet{idle}", "TTFT too noisy to judge")
    toks = [_tokens(n) for n, _e, _m in ends]
    pairs = ", ".join(f"{n}→{t}" for n, t in zip(toks, times))
    units = {t.rsplit(" ", 1)[-1] for t in times}
    once = pairs
    if len(units) == 1:  # one unit: said once, at the end
        unit = units.pop()
        once = ", ".join(f"{n}→{t.removesuffix(' ' + unit)}" for n, t in zip(toks, times))
        once += f" {unit}"
    return (line, f"TTFT as expected{idle}: {pairs}", f"TTFT ok: {once}",
            f"TTFT ok: {toks[-1]}→{times[-1]}")


def _tokens(n: int) -> str:
    """A prompt length, short: 33, 512, 4.1k (4,097), 33k (32,768), 131k."""
    if n < 1000:
        return str(n)
    k = n / 1000
    return f"{k:.1f}".removesuffix(".0") + "k" if k < 10 else f"{k:.0f}k"


def expected_line(v: Any, limit: int = 2) -> str:
    """ "TTFT as expected: 128 tok 70 ± 4 ms, 2,048 tok 1,040 ± 9 ms; a length whose uncertainty is as large as its TTFT reads "not pinned"" (the
    shortest and longest lengths when more than ``limit``: the panel is narrow; the
    sweep summary lists every length)."""
    rows = list(getattr(v, "expected", ()) or ())
    if len(rows) > limit:
        rows = [rows[0], rows[-1]]
    idle = " (idle server, no users)" if getattr(v, "idle", False) else ""
    if not rows:
        return f"TTFT as expected{idle}"
    parts = ", ".join(expected_words(n, e, m) for n, e, m in rows)
    if all(not (m < e) for _n, e, m in rows):  # nothing pinned: no "as expected"
        return f"TTFT too noisy to judge yet{idle}: {parts}"
    return f"TTFT as expected{idle}: {parts}"
