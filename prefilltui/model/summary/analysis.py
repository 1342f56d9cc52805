"""The run summary: fits, roofline comparison and verdict, as a ``RunSummary``.

``analyze(results, server_info, options)`` is shared by ``sweep`` (end of run),
``report`` (a saved run file), the TUI's export and the exporter's window;
``assess`` (slope choice, MFU, verdict) is the one place a fit is judged, also for the
TUI's stats panel.  Data in seconds; the text views are in ``render/text.py``.  Every
roofline figure is an estimate (catalog / datasheet values, the term-by-term matmul
FLOPs of ``model.roofline.flops``) and is labelled so.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from prefilltui.model.roofline import (
    linear_coefficient, linear_flops_per_token, marginal_flops, quadratic_coefficient, total,
)
from prefilltui.model.fit import fixed_cost, server_fixed_cost, median_overhead_s, ttft_percentiles
from prefilltui.model import roofline
from prefilltui.model.roofline import ModelShape
from prefilltui.model.roofline import Hardware
from prefilltui.model.depth import depth_table, is_depth_probe
from prefilltui.model.diagnosis import summarize_diagnosis
from prefilltui.model.fit import TOO_NOISY, TOO_NOISY_WHY, LinearFit, throughput_text
from prefilltui.model.fit import FitSnapshot, RunningFit
from prefilltui.model.spec import AnalysisOptions, resolve_gpu, resolve_model
from prefilltui.model.summary.run import (LiveFacts, ProbeCounts, QuadraticFit, RooflineSummary,
                                      RunSummary, ServerFacts, Verdict, WindowSummary)
from prefilltui.model.types import ProbeResult, ServerInfo
from prefilltui.model.users import UsersEvidence
from prefilltui.model.slo import SloStatus, resolve as resolve_slo, slo_status
from prefilltui.model.diagnosis import Expectation, ttft_verdict


def probe_counts(results: list[ProbeResult]) -> ProbeCounts:
    errs = Counter(r.error_kind or "unknown" for r in results if not r.ok)
    toks = [r.tokens for r in results if r.fit_eligible]
    return ProbeCounts(
        total=len(results), ok=sum(r.ok for r in results),
        failed=sum(not r.ok for r in results), warmup=sum(r.warmup for r in results),
        cache_hits=sum(r.ok and r.cache_hit for r in results),
        cache_counted=sum(1 for r in results if r.ok and r.cached_tokens is not None),
        fit_eligible=len(toks), errors=dict(errs),
        # prompt lengths the server did not count (no usage/timings/tokenize)
        estimated_lengths=sum(1 for r in results
                              if r.fit_eligible and r.prompt_tokens_source == "estimate"),
        tokens_min=min(toks) if toks else None, tokens_max=max(toks) if toks else None,
        left_out=dict(Counter(why for r in results if (why := r.left_out) is not None)))


def analyze(results: Iterable[ProbeResult], server_info: ServerInfo | None = None,
            options: AnalysisOptions | None = None, *, gpu_names: list[str] | None = None,
            running_fit: RunningFit | None = None, baseline_fit: LinearFit | None = None,
            baseline_problem: str | None = None, metrics_problem: str | None = None,
            run_file: str | None = None, live: LiveFacts | None = None,
            baseline_source: str = "baseline run",
            users_evidence: UsersEvidence | None = None) -> RunSummary:
    """Summarise a run (see ``RunSummary``).

    results: every probe of the run, warm-ups and failures included; probes of a
        ``--depth`` phase go to the depth table only.
    options: the fit shown, the window and the roofline inputs (None: every default).
    gpu_names: NVML device names from telemetry; running_fit: a live RunningFit over the
        same probes to reuse (the TUI, the exporter) instead of refitting.
    baseline_fit / baseline_problem: the ``options.baseline`` run's fit, loaded by the
        caller, or why there is none; metrics_problem: why /metrics gave nothing.
    run_file, live: carried into the summary as they are.
    baseline_source: the words for ``baseline_fit`` in the verdict ("baseline run", the
        exporter's "idle fit held at 40 probes", ...); users_evidence: what the users'
        requests tell ``verdict.ttft_verdict`` (``model.users.UsersEvidence``: their
        window now and its reference, their kept requests; None: nothing).
    Never raises for bad data; an unreadable --model-config becomes a note.
    """
    results = list(results)
    plain = [r for r in results if not is_depth_probe(r)]
    options = options or AnalysisOptions()
    method, window, spec = options.fit, options.window, options.roofline
    rf = running_fit
    if rf is None:
        rf = RunningFit(window=max(window, 3))
        for r in plain:
            rf.add(r)
    snap = rf.snapshot("all", method)
    win = rf.snapshot("window", method)
    notes: list[str] = []
    if spec.config_problem:
        model, mnotes = None, [f"--model-config not used: {spec.config_problem}"]
    else:
        model, mnotes = resolve_model(spec, server_info)
    hw, hnotes = resolve_gpu(spec, gpu_names)
    notes += mnotes + hnotes
    fit = snap.fit if snap else None
    fixed = fixed_cost(fit, server_fixed_cost(plain))
    if fixed is not None and fixed.note:
        notes.append(fixed.note)
    if fit is not None and fit.knee_tokens:
        notes.append(f"the intercept is the line's above the knee at {fit.knee_tokens:,} tokens, "
                     "not TTFT(0)")
    probes = probe_counts(plain)
    roof = roofline_summary(snap, model, hw, spec.efficiency)
    verdict = judge(snap, model, hw, roof, probes)
    slo, slo_notes = slo_part(options, server_info, baseline_fit or fit,
                              win.fit if win else None,
                              [r.ttft_s for r in plain if r.fit_eligible], users_evidence)
    notes += slo_notes
    return RunSummary(
        server=ServerFacts.of(server_info) if server_info is not None else None,
        probes=probes, fit=fit, ols=snap.ols if snap else None,
        robust=snap.robust if snap else None, knee_tokens=snap.knee_tokens if snap else None,
        quadratic=(QuadraticFit(snap.quadratic, snap.quadratic_applies)
                   if snap and snap.quadratic is not None else None),
        fixed_cost=fixed, percentiles=ttft_percentiles(plain),
        overhead_median_s=median_overhead_s(plain),
        window=window_summary(win, snap, window), model=model, hardware=hw, roofline=roof,
        verdict=verdict, notes=tuple(notes),
        fit_lengths_estimated=bool(probes.estimated_lengths and fit is not None),
        depth=depth_table(results, model),
        diagnosis=summarize_diagnosis(plain, server_info, baseline=options.baseline,
                                      baseline_fit=baseline_fit,
                                      baseline_problem=baseline_problem,
                                      metrics_problem=metrics_problem, method=method),
        run_file=run_file, live=live,
        ttft_verdict=ttft_verdict(plain, expectation(fit, baseline_fit, roof, verdict,
                                                     baseline_source=baseline_source),
                                  users_evidence=users_evidence),
        server_flops=_server_flops(plain, model), slo=slo)


def slo_part(options: AnalysisOptions, server_info: ServerInfo | None,
             idle_fit: LinearFit | None, now_fit: LinearFit | None,
             probe_ttfts_s: list[float], users_evidence: UsersEvidence | None,
             now_s: float | None = None, users_buckets=(),
             buckets_window_s: float | None = None) -> tuple[tuple[SloStatus, ...], list[str]]:
    """Each objective of ``options.slo`` now (``model.slo.slo_status``): the presets
    resolved by the server's model, n_max at ``idle_fit`` (the held idle line, or the
    baseline's) and at ``now_fit`` (the window's), the probes' attainment over
    ``probe_ttfts_s`` and the users' from their kept spans (else from ``users_buckets``,
    the server's TTFT histogram over ``buckets_window_s``).  Returns (statuses, notes
    on presets that did not apply)."""
    if not options.slo:
        return (), []
    objectives, notes = resolve_slo(options.slo, server_info.model if server_info else None)
    users = users_evidence.user_requests if users_evidence is not None else ()
    return tuple(slo_status(o, idle_fit=idle_fit, now_fit=now_fit, probe_ttfts_s=probe_ttfts_s,
                            users=users, now_s=now_s, users_buckets=users_buckets,
                            buckets_window_s=buckets_window_s)
                 for o in objectives), list(notes)


def expectation(fit: LinearFit | None, baseline_fit: LinearFit | None,
                roof: RooflineSummary | None, verdict: Verdict | None, *,
                baseline_source: str = "baseline run", idle_source: str = "idle fit"
                ) -> Expectation | None:
    """What TTFT should be for the "why is TTFT high?" verdict: the ``--baseline`` run's
    fit (named ``baseline_source``), else the run's own idle fit (``idle_source``), with
    the MFU and its roofline verdict level."""
    mfu = roof.mfu if roof is not None else None
    level = verdict.level if verdict is not None else None
    if baseline_fit is not None:
        return Expectation(baseline_fit, baseline_source, mfu, level)
    if fit is None and level is None:
        return None
    return Expectation(fit, idle_source, mfu, level)


def _server_flops(results: list[ProbeResult], model: ModelShape | None
                  ) -> roofline.ServerFlopsCheck | None:
    """The server's FLOP count per fit probe against prefilltui's matmul count
    (``flops.total``, the one MFU uses), when the server published one (vLLM
    ``--enable-mfu-metrics``) and the model shape allows the count."""
    if model is None:
        return None
    pts = [(r.tokens, r.server_flops) for r in results if r.fit_eligible and r.server_flops]
    if not pts:
        return None
    try:
        return roofline.server_flops_check(pts, lambda n: total(model, n))
    except ValueError:  # the shape lacks layers / attention width / params
        return None


def window_summary(win: FitSnapshot | None, snap: FitSnapshot | None, size: int) -> WindowSummary:
    """The window part of a summary: the window fit and its throughput change against
    the all-time fit (None when the window holds every probe)."""
    a = snap.fit.prefill_tokens_per_s if snap and snap.fit else None
    b = win.fit.prefill_tokens_per_s if win and win.fit else None
    change = None
    if a and b and win.n_points < (snap.n_points if snap else 0):
        change = b / a - 1.0
    return WindowSummary(size=size, n=win.n_points if win else 0,
                         fit=win.fit if win else None, throughput_change=change)


def roofline_summary(snap: FitSnapshot | None, model: ModelShape | None, hw: Hardware | None,
                     efficiency: float) -> RooflineSummary | None:
    """The fit held against the roofline (``RooflineSummary``); None without the
    model's parameter count.  Shared by ``analyze`` and ``live.LiveSummary``."""
    if model is None or not model.params:
        return None
    L, d_attn = model.layers, model.d_attn
    peak = hw.peak_flops if hw else None
    base = RooflineSummary(peak_flops=peak, ridge_point=hw.ridge_point if hw else None,
                           efficiency=efficiency)
    fit = snap.fit if snap else None
    if fit is None:
        return base
    n_top = fit.x_max
    expected = measured = None
    if L and d_attn:
        expected = roofline.exact_estimate(model, max(int(n_top), 1), peak_flops=peak,
                                           efficiency=efficiency)
        measured = fit.predict(n_top)
    b, slope_source, source = pick_slope(snap)
    quad = snap.quadratic if snap.quadratic_applies else None
    f_tok, basis = slope_flops(model, source, quad is not None)
    ach = roofline.achieved_flops(b, f_tok)
    lo, hi = source.slope_ci
    mfu_ci = None
    if peak and lo > 0:
        mfu_ci = (roofline.mfu(hi, f_tok, peak), roofline.mfu(lo, f_tok, peak))
    elif peak and hi > 0:
        mfu_ci = (roofline.mfu(hi, f_tok, peak), None)
    c_exp = c_ratio = mfu_att = None
    if quad is not None and ach and L and d_attn:
        c_exp = quadratic_coefficient(model) / ach
        c_ratio = quad.c_s_per_token2 / c_exp
        mfu_att = roofline.mfu_with_attention(
            (quad.intercept_s, quad.slope_s_per_token, quad.c_s_per_token2), n_top, model, peak)
    return RooflineSummary(
        peak_flops=peak, ridge_point=base.ridge_point, efficiency=efficiency,
        expected_at_max=expected, measured_ttft_at_max_s=measured, slope_source=slope_source,
        achieved_flops=ach, mfu=roofline.mfu(b, f_tok, peak), mfu_ci=mfu_ci,
        c_expected_s_per_token2=c_exp, c_ratio=c_ratio, mfu_with_attention_at_max=mfu_att,
        flops_per_token=f_tok, flop_basis=basis)


def slope_flops(model: ModelShape, fit: LinearFit, quadratic: bool) -> tuple[float, str]:
    """(F', basis): the matmul FLOPs one more prompt token costs, paired with the slope
    ``pick_slope`` returns -- the count's linear coefficient for a quadratic fit's
    linear term, else its secant over the fitted range [x_min, x_max] (the line's
    slope averages attention's n² cost over that range).  Without layers or
    attention width only the linear part is counted (basis "params"/"quick")."""
    if model.layers and model.d_attn:
        if quadratic:
            f = linear_coefficient(model)
        else:
            f = marginal_flops(model, fit.x_min, fit.x_max)
        return f, linear_flops_per_token(model)[2]
    proj, mlp, basis = linear_flops_per_token(model)
    return proj + mlp, basis


def judge(snap: FitSnapshot | None, model: ModelShape | None, hw: Hardware | None,
          roof: RooflineSummary | None, probes: ProbeCounts) -> Verdict:
    """The run's verdict (``Verdict``): ``assess``'s level where the fit can be judged,
    else why not (every probe failed, too few probes, no slope, model unknown)."""
    if snap is None or snap.fit is None:
        n = probes.fit_eligible
        if probes.total and not probes.ok:
            return Verdict("failed", "Every probe failed: no fit.")
        return Verdict("insufficient",
                       f"Too few usable probes for a fit ({n}; need 3 at 2 or more lengths).")
    fit = snap.fit
    if fit.prefill_tokens_per_s is None:
        return Verdict("no-slope", "TTFT does not grow with prompt length here: no "
                       "throughput (prompts too short, or a prefix cache the server does not report?).")
    a = assess(snap, model, hw)
    if roof is None or a is None:
        tp = stated_throughput(fit)
        return Verdict("unknown-model", f"{tp[0].upper()}{tp[1:]}. Model shape unknown: "
                       "FLOP/s and MFU need --params (or --model-config).")
    return Verdict(a.level, a.text)


#: How the verdict names the quadratic's linear term when achieved FLOP/s and MFU come
#: from it (``pick_slope``): the throughput beside them is that slope's, not the line's.
QUADRATIC_SOURCE_WORDS = "the quadratic fit's linear term"


def stated_throughput(fit: LinearFit, source: str | None = None) -> str:
    """The throughput a verdict states (``fit.throughput_text``): "2,990 prompt tok/s"
    (with ``source``, the fit it comes from, in brackets), or while the slope's 95 %
    interval includes 0 "throughput too noisy yet, the slope's 95% interval includes
    0" -- never 1/b as a number then.  ``fit`` has a positive slope."""
    tp = throughput_text(fit) or ""
    if tp == TOO_NOISY:
        return f"throughput {TOO_NOISY}, {TOO_NOISY_WHY}"
    return tp + (f" ({source})" if source else "")


def pick_slope(snap: FitSnapshot) -> tuple[float, str, LinearFit]:
    """The slope (s/token) achieved FLOP/s and MFU are computed from, where it comes
    from, and the fit holding its interval: the quadratic's linear term when the
    curvature is significant (``quadratic_applies``: the line would average attention's
    n² cost into the slope), else the shown fit's slope."""
    quad = snap.quadratic if snap.quadratic_applies else None
    if quad is not None:
        return quad.slope_s_per_token, "quadratic (linear term)", quad
    return snap.fit.slope_s_per_token, snap.fit.method, snap.fit


@dataclass(frozen=True, slots=True)
class Assessment:
    """A fit held against the roofline: achieved FLOP/s (the matmul FLOPs one more
    prompt token costs, ``slope_flops``, over the slope), MFU (achieved / peak; None
    without a peak; on screen "MFU (matmul FLOPs)") and the verdict
    (``roofline.verdict`` level and sentence).  Estimates: catalog/datasheet inputs."""

    slope_s_per_token: float
    slope_source: str
    achieved_flops: float | None
    mfu: float | None
    level: str
    text: str


def assess(snap: FitSnapshot | None, model: ModelShape | None, hw: Hardware | None
           ) -> Assessment | None:
    """The one place that judges a fit (``analyze`` and the TUI both call it).  None
    without a fit, a positive slope or the model's parameter count."""
    if snap is None or snap.fit is None or model is None or not model.params:
        return None
    fit = snap.fit
    if fit.prefill_tokens_per_s is None:
        return None
    b, source, src_fit = pick_slope(snap)
    peak = hw.peak_flops if hw else None
    f_tok, _basis = slope_flops(model, src_fit, bool(snap.quadratic_applies and snap.quadratic))
    ach = roofline.achieved_flops(b, f_tok)
    mfu = roofline.mfu(b, f_tok, peak)
    # the throughput said beside the FLOP/s is the one of the slope they come from (a
    # quadratic's linear term is faster than the line, which averages attention's n²);
    # too noisy yet, neither is said as a number (the FLOP/s are that throughput's)
    paired = ach is not None and src_fit is not fit
    said = src_fit if paired else fit
    level, text = roofline.verdict(
        mfu, achieved=None if said.unresolved else ach,
        throughput=stated_throughput(said, QUADRATIC_SOURCE_WORDS if paired else None),
        max_tokens=fit.x_max, ridge=hw.ridge_point if hw else None, hidden=model.hidden)
    return Assessment(b, source, ach, mfu, level, text)


def plain_summary(results: Iterable[ProbeResult], server_info: ServerInfo | None = None, *,
                  run_file: str | None = None, live: LiveFacts | None = None) -> RunSummary:
    """A summary without the analysis, for when ``analyze`` failed (a bug) and a finished
    sweep must still be reported: the counts, the per-length table and the plain robust
    fit (OLS when it fails) of TTFT over prompt tokens; verdict level "error"."""
    from prefilltui.model.fit import fit_ols
    from prefilltui.model.fit import fit_robust

    plain = [r for r in results if not is_depth_probe(r)]
    pts = [(float(r.tokens), float(r.ttft_s)) for r in plain if r.fit_eligible]
    fit = None
    if len(pts) >= 3 and len({x for x, _ in pts}) >= 2:
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        fit = fit_robust(xs, ys) or fit_ols(xs, ys)
    probes = probe_counts(plain)
    return RunSummary(
        server=ServerFacts.of(server_info) if server_info is not None else None,
        probes=probes, fit=fit, ols=None, robust=None, knee_tokens=None, quadratic=None,
        fixed_cost=None, percentiles=ttft_percentiles(plain),
        overhead_median_s=median_overhead_s(plain),
        window=WindowSummary(size=0), model=None, hardware=None, roofline=None,
        verdict=Verdict("error", "The analysis failed (see the notes): only the plain fit."),
        fit_lengths_estimated=bool(probes.estimated_lengths and fit is not None),
        run_file=run_file, live=live)
