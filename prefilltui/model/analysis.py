"""The run summary: fits, roofline comparison and verdict, as JSON-ready dict and text.

``analyze(results, server_info, args)`` is shared by ``sweep`` (end of run),
``report`` (a saved run file) and the TUI's export; ``assess`` (slope choice, MFU,
verdict) is the one place a fit is judged, also for the TUI's stats panel.  Data in seconds; the text
from ``format_summary`` shows ms.  Every roofline figure is an estimate (catalog /
datasheet values, the term-by-term matmul FLOPs of ``model.flops``) and is labelled so.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

from prefilltui.model import defaults, intercept, percentiles, roofline
from prefilltui.model import flops as flopcount
from prefilltui.model.catalog import resolve_gpu, resolve_model
from prefilltui.model.fit import LinearFit
from prefilltui.model.running_fit import FitSnapshot, RunningFit
from prefilltui.model.types import ProbeResult, ServerInfo
from prefilltui.model import units
from prefilltui.model.redact import display_url
from prefilltui.model.sanitize import clean
from prefilltui.model.units import MISSING

SCHEMA = "prefilltui.analysis/1"
FIT_KEYS = ("method", "intercept_s", "intercept_ci", "slope_s_per_token", "slope_ci",
            "prefill_tokens_per_s", "prefill_tokens_per_s_ci", "r2", "n", "n_offered",
            "outliers", "sampled", "x_min", "x_max", "resid_std_s", "rel_scale", "knee_tokens")
ESTIMATE_NOTE = ("Roofline figures are estimates: datasheet peaks and matmul FLOPs counted term "
                 "by term from the model's shape (projections, MLP, causal attention, the LM "
                 "head once per request; embeddings are lookups).")


def _fit_json(fit: LinearFit | None) -> dict[str, Any]:
    return fit.to_json() if fit is not None else {k: None for k in FIT_KEYS}


def _probe_counts(results: list[ProbeResult]) -> dict[str, Any]:
    errs = Counter(r.error_kind or "unknown" for r in results if not r.ok)
    toks = [r.tokens for r in results if r.fit_eligible]
    return {
        "total": len(results), "ok": sum(r.ok for r in results),
        "failed": sum(not r.ok for r in results), "warmup": sum(r.warmup for r in results),
        "cache_hit": sum(r.ok and r.cache_hit for r in results),
        "fit_eligible": len(toks), "errors": dict(errs),
        # prompt lengths the server did not count (no usage/timings/tokenize)
        "estimated_lengths": sum(1 for r in results
                                 if r.fit_eligible and r.prompt_tokens_source == "estimate"),
        "tokens_min": min(toks) if toks else None, "tokens_max": max(toks) if toks else None,
    }


def analyze(results: Iterable[ProbeResult], server_info: ServerInfo | None = None,
            args: Any = None, *, gpu_names: list[str] | None = None,
            running_fit: RunningFit | None = None) -> dict[str, Any]:
    """Summarise a run.  ``args`` may be an argparse Namespace from any command (missing
    attributes take their defaults: --fit robust, --window 50, --efficiency 0.5) or None.
    ``gpu_names`` = NVML device names from telemetry; ``running_fit`` = a live RunningFit
    to reuse (the TUI) instead of refitting.  Never raises for bad data; an unreadable
    --model-config becomes a note.  Returns a JSON-ready dict (see format_summary)."""
    results = list(results)
    g = lambda k, d=None: getattr(args, k, d) if args is not None else d  # noqa: E731
    method = g("fit") or defaults.FIT_METHOD
    window = int(g("window") or defaults.WINDOW)
    efficiency = float(g("efficiency") or defaults.EFFICIENCY)
    rf = running_fit
    if rf is None:
        rf = RunningFit(window=max(window, 3))
        for r in results:
            rf.add(r)
    snap = rf.snapshot("all", method)
    win = rf.snapshot("window", method)
    notes: list[str] = []
    try:
        model, mnotes = resolve_model(args, server_info)
    except (OSError, ValueError) as e:
        model, mnotes = None, [f"--model-config not used: {e}"]
    hw, hnotes = resolve_gpu(args, gpu_names)
    notes += mnotes + hnotes
    fit = snap.fit if snap else None
    fixed = intercept.fixed_cost(fit, intercept.server_fixed_cost(results))
    if fixed is not None and fixed.note:
        notes.append(fixed.note)
    if fit is not None and fit.knee_tokens:
        notes.append(f"the intercept is the line's above the knee at {fit.knee_tokens:,} tokens, "
                     "not TTFT(0)")
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "estimate_note": ESTIMATE_NOTE,
        "server": None if server_info is None else {
            "base_url": display_url(server_info.base_url), "kind": server_info.kind,
            "model": server_info.model},
        "probes": _probe_counts(results),
        "fit": _fit_json(fit),
        "ols": _fit_json(snap.ols) if snap else None,
        "robust": _fit_json(snap.robust) if snap else None,
        "knee_tokens": snap.knee_tokens if snap else None,
        "fixed_cost": fixed.to_json() if fixed else None,
        "percentiles": percentiles.ttft_percentiles(results),
        "quadratic": None,
        "window": _window_json(win, snap, window),
        "model": model.to_json() if model else None,
        "hardware": hw.to_json() if hw else None,
        "roofline": None,
        "verdict": None,
        "notes": notes,
    }
    if out["probes"]["estimated_lengths"] and out["fit"].get("n"):
        out["fit"]["lengths"] = "estimated"  # its x axis is the client's estimate
    if snap and snap.quadratic is not None:
        out["quadratic"] = {**snap.quadratic.to_json(), "applies": snap.quadratic_applies}
    out["roofline"] = _roofline(snap, model, hw, efficiency)
    out["verdict"] = _verdict(snap, model, hw, out["roofline"], out["probes"])
    return out


def _window_json(win: FitSnapshot | None, snap: FitSnapshot | None, size: int) -> dict[str, Any]:
    d = {"size": size, "n": win.n_points if win else 0, "fit": _fit_json(win.fit if win else None),
         "throughput_change": None}
    a = snap.fit.prefill_tokens_per_s if snap and snap.fit else None
    b = win.fit.prefill_tokens_per_s if win and win.fit else None
    if a and b and win.n_points < (snap.n_points if snap else 0):
        d["throughput_change"] = b / a - 1.0
    return d


def _roofline(snap, model, hw, efficiency) -> dict[str, Any] | None:
    if model is None or not model.params:
        return None
    L, d_attn = model.layers, model.d_attn
    peak = hw.peak_flops if hw else None
    r: dict[str, Any] = {"estimate": True, "peak_flops": peak, "ridge_point": hw.ridge_point if hw else None,
                         "efficiency": efficiency, "mfu_label": roofline.MFU_LABEL,
                         "attention_convention": flopcount.MFU_ATTENTION}
    fit = snap.fit if snap else None
    if fit is None:
        return r
    n_top = fit.x_max
    if L and d_attn:
        r["expected_at_max"] = roofline.exact_estimate(model, max(int(n_top), 1), peak_flops=peak,
                                                       efficiency=efficiency)
        r["measured_ttft_at_max_s"] = fit.predict(n_top)
    b, r["slope_source"], source = pick_slope(snap)
    quad = snap.quadratic if snap.quadratic_applies else None
    f_tok, r["flop_basis"] = slope_flops(model, source, quad is not None)
    r["flops_per_token"] = f_tok
    ach = roofline.achieved_flops(b, f_tok)
    r["achieved_flops"] = ach
    r["mfu"] = roofline.mfu(b, f_tok, peak)
    lo, hi = source.slope_ci
    r["mfu_ci"] = None
    if peak and lo > 0:
        r["mfu_ci"] = [roofline.mfu(hi, f_tok, peak), roofline.mfu(lo, f_tok, peak)]
    elif peak and hi > 0:
        r["mfu_ci"] = [roofline.mfu(hi, f_tok, peak), None]
    if quad is not None and ach and L and d_attn:
        c_exp = flopcount.quadratic_coefficient(model) / ach
        r["c_expected_s_per_token2"] = c_exp
        r["c_ratio"] = quad.c_s_per_token2 / c_exp
        r["mfu_with_attention_at_max"] = roofline.mfu_with_attention(
            (quad.intercept_s, quad.slope_s_per_token, quad.c_s_per_token2), n_top, model, peak)
    return r


def slope_flops(model: Any, fit: LinearFit, quadratic: bool) -> tuple[float, str]:
    """(F', basis): the matmul FLOPs one more prompt token costs, paired with the slope
    ``pick_slope`` returns -- the count's linear coefficient for a quadratic fit's
    linear term, else its secant over the fitted range [x_min, x_max] (the line's
    slope averages attention's n² cost over that range).  Without layers or
    attention width only the linear part is counted (basis "params"/"quick")."""
    if model.layers and model.d_attn:
        if quadratic:
            f = flopcount.linear_coefficient(model)
        else:
            f = flopcount.marginal_flops(model, fit.x_min, fit.x_max)
        return f, flopcount.linear_flops_per_token(model)[2]
    proj, mlp, basis = flopcount.linear_flops_per_token(model)
    return proj + mlp, basis


def _verdict(snap, model, hw, roof, probes) -> dict[str, str]:
    if snap is None or snap.fit is None:
        n = probes["fit_eligible"]
        if probes["total"] and not probes["ok"]:
            return {"level": "failed", "text": "Every probe failed: no fit."}
        return {"level": "insufficient",
                "text": f"Too few usable probes for a fit ({n}; need 3 at 2 or more lengths)."}
    fit = snap.fit
    if fit.prefill_tokens_per_s is None:
        return {"level": "no-slope", "text": "TTFT does not grow with prompt length here: no "
                "throughput (prompts too short, or a prefix cache the server does not report?)."}
    a = assess(snap, model, hw)
    if roof is None or a is None:
        return {"level": "unknown-model", "text": f"{fit.prefill_tokens_per_s:,.0f} prompt tok/s. "
                "Model shape unknown: FLOP/s and MFU need --params (or --model-config)."}
    return {"level": a.level, "text": a.text}


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


def assess(snap: FitSnapshot | None, model: Any, hw: Any) -> Assessment | None:
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
    level, text = roofline.verdict(
        mfu, achieved=ach, tokens_per_s=fit.prefill_tokens_per_s, max_tokens=fit.x_max,
        ridge=hw.ridge_point if hw else None, hidden=model.hidden)
    return Assessment(b, source, ach, mfu, level, text)


# ---------------------------------------------------------------- text


def _sig(v: float) -> str:
    """About 3 significant digits, never in exponent notation (screen text)."""
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"




def _ci(ci, fmt) -> str:
    if not ci or ci[0] is None:
        return ""
    return f"[{fmt(ci[0])} to {'inf' if ci[1] is None else fmt(ci[1])}]"


def format_fit_lines(f: dict[str, Any], indent: str = "  ",
                     fixed: dict[str, Any] | None = None) -> list[str]:
    """Lines for one fit dict (``_fit_json`` shape); ms on screen.  With ``fixed``
    (``intercept.FixedCost.to_json()``) the intercept is shown as it allows: "not
    pinned", or clamped at 0, never as a confident negative number."""
    if f is None or f.get("n") is None:
        return [indent + "no fit (too few usable probes)"]
    tp = lambda v: f"{v:,.0f}"  # noqa: E731
    ms = lambda v: f"{v * 1e3:.2f}"  # noqa: E731
    us = lambda v: _sig(v * 1e6)  # noqa: E731  (s/token -> µs/token, as the TUI shows it)
    a_txt, a_line = units.ms(f["intercept_s"], 2), f"{ms(f['intercept_s'])} ms"
    if fixed is not None and not fixed["pinned"]:
        a_txt = a_line = "a (not pinned)"
    elif fixed is not None and fixed["clamped"]:
        a_txt = "0 ms"
        a_line = f"0 ms (fit {ms(f['intercept_s'])} ms, clamped)"
    a_ci = intercept.physical_ci(f["intercept_ci"])  # cut at 0: never a negative cost
    lines = [
        f"{indent}TTFT = {a_txt} + {us(f['slope_s_per_token'])} µs x n"
        f"      R² {f['r2']:.3f}, n = {f['n']}"
        + (f" ({f['outliers']} outliers set aside)" if f.get("outliers") else ""),
        f"{indent}intercept    {a_line}   95% {_ci(a_ci, ms)} ms",
        f"{indent}slope        {us(f['slope_s_per_token'])} µs/token   95% "
        f"{_ci(f['slope_ci'], us)} µs/token",
    ]
    if f.get("prefill_tokens_per_s"):
        lines.append(f"{indent}throughput   {tp(f['prefill_tokens_per_s'])} prompt tok/s   95% "
                     f"{_ci(f['prefill_tokens_per_s_ci'], tp)} tok/s")
    else:
        lines.append(f"{indent}throughput   {MISSING} (slope <= 0)")
    if f.get("knee_tokens"):
        lines.append(f"{indent}knee: TTFT flat below ~{f['knee_tokens']:,} tokens; line fitted above it")
    return lines


def format_summary(d: dict[str, Any], *, percentile_table: bool = True) -> str:
    """Plain-text summary of an ``analyze`` dict (ms on screen; estimates labelled).
    ``percentile_table=False`` gives only the overall TTFT percentiles (the sweep's
    own table has them per length)."""
    p = d["probes"]
    out = [f"Probes: {p['total']} total, {p['ok']} ok, {p['failed']} failed, {p['warmup']} warm-up, "
           f"{p['cache_hit']} cache hits; {p['fit_eligible']} in the fit"
           + (f" ({p['tokens_min']:,}-{p['tokens_max']:,} tokens)" if p["tokens_min"] else "")]
    if p["errors"]:
        out.append("  errors: " + ", ".join(f"{k} {v}" for k, v in sorted(p["errors"].items())))
    f = d["fit"]
    est = ", prompt lengths estimated" if f.get("lengths") == "estimated" else ""
    out.append(f"Fit ({f.get('method') or 'none'}, all-time{est}):")
    fixed = d.get("fixed_cost")
    out += format_fit_lines(f, fixed=fixed)
    out += intercept.format_lines(fixed)
    q = d.get("quadratic")
    if q and q.get("applies"):
        roof = d.get("roofline") or {}
        line = (f"  curvature: c = {q['c_s_per_token2'] * 1e9:.3g} ms per (1k tokens)² "
                f"(95% {_ci(q['c_ci'], lambda v: f'{v * 1e9:.3g}')})")
        if roof.get("c_expected_s_per_token2"):
            line += (f"; attention expects {roof['c_expected_s_per_token2'] * 1e9:.3g} "
                     f"(ratio {roof['c_ratio']:.2f}, estimate)")
        out.append(line)
        if q.get("prefill_tokens_per_s"):
            out.append(f"  TTFT curves up with n: the line above averages over the range; the "
                       f"linear term alone gives {q['prefill_tokens_per_s']:,.0f} prompt tok/s "
                       f"95% {_ci(q['prefill_tokens_per_s_ci'], lambda v: f'{v:,.0f}')}")
    w = d["window"]
    if w["fit"].get("n") is not None and w["n"] < p["fit_eligible"]:
        tp = w["fit"].get("prefill_tokens_per_s")
        chg = w.get("throughput_change")
        out.append(f"Window (last {w['size']} probes): "
                   + (f"{tp:,.0f} prompt tok/s {_ci(w['fit']['prefill_tokens_per_s_ci'], lambda v: f'{v:,.0f}')}"
                      if tp else "no throughput")
                   + (f", {chg:+.1%} vs all-time" if chg is not None else ""))
    roof, m, hw = d.get("roofline"), d.get("model"), d.get("hardware")
    if m or hw:
        hw_txt = "hardware of unknown peak"
        if hw and hw.get("peak_tflops"):
            hw_txt = f"{hw['name']} {hw['dtype']} {hw['peak_tflops']:g} TFLOP/s"
            if hw.get("bandwidth_tbs"):
                hw_txt += f", {hw['bandwidth_tbs']:g} TB/s, ridge {hw['ridge_point']:.0f} FLOP/byte"
            if hw.get("uncertain") or str(hw.get("matched_by", "")).endswith("(?)"):
                hw_txt += " (?)"
        m_txt = "model unknown" if not m else (
            f"{clean(m['name'])} ({m['params'] / 1e9:.3g} B params" if m.get("params")
            else f"{clean(m['name'])} (params ?")
        if m:
            m_txt += f", L={m['layers']}, d_attn={m['attn_width']})" + (" (?)" if m.get("uncertain") else "")
        out.append(f"Roofline (estimates): {m_txt} on {hw_txt}")
    if roof and roof.get("achieved_flops"):
        line = f"  achieved {roof['achieved_flops'] / 1e12:.3g} TFLOP/s (from the {roof['slope_source']} slope)"
        if roof.get("mfu") is not None:
            line += f" = {roofline.MFU_LABEL} {roof['mfu']:.1%}"
            if roof.get("mfu_ci"):
                line += " " + _ci(roof["mfu_ci"], lambda v: f"{v:.1%}")
        out.append(line)
        e = roof.get("expected_at_max")
        if e and e.get("time_at_peak_s"):
            out.append(f"  at {e['tokens']:,} tokens: {e['flops'] / 1e12:.3g} TFLOP (matmul), expected "
                       f"{units.ms(e['time_at_peak_s'])} at peak, {units.ms(e['time_at_efficiency_s'])} at "
                       f"{e['efficiency']:.0%}; fitted TTFT {units.ms(roof['measured_ttft_at_max_s'])}")
    out += percentiles.format_lines(d.get("percentiles"), by_length=percentile_table)
    v = d.get("verdict")
    if v:
        out.append(f"Verdict: {v['text']}")
    shown = {fixed.get("note")} if fixed else set()
    for n in d.get("notes", []):
        if n in shown:
            continue
        out.append(f"  note: {n}")
    return "\n".join(out)
