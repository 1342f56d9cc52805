"""The run summary as plain text: the views ``sweep`` and ``report`` print.

``format_summary(summary)`` is the analysis (probes, fit with 95 % intervals, fixed
cost, curvature, window, roofline, percentiles, verdict, notes); ``format_sweep`` the
sweep's header and per-length table; ``format_fit_lines`` / ``format_fixed_cost`` /
``format_percentiles`` its parts.  Every function reads a ``RunSummary`` (or one of its
parts) and returns text: data in seconds, ms and µs on screen; estimates labelled.
"""

from __future__ import annotations

import json
import math
from typing import Callable, Collection, Sequence

from prefilltui.model import units
from prefilltui.model.fit import TOO_NOISY, LinearFit, throughput_text
from prefilltui.model.fit import FixedCost, physical_ci
from prefilltui.model.fit import Quantiles, TtftPercentiles
from prefilltui.model.sanitize import clean
from prefilltui.model.summary import RunSummary
from prefilltui.model.fit import Progress
from prefilltui.model.units import MISSING
from prefilltui.render.slo import slo_lines


def doubt(why: str) -> str:
    """The mark after a figure in doubt, with why (``Hardware.doubt``,
    ``ModelShape.doubt``): " (? matched by family: ...)"; '' for none."""
    return f" (? {why})" if why else ""


def finite(v: float | None) -> float | None:
    """``v`` as a float, or None when it is None, infinite or NaN (an open interval end)."""
    return None if v is None or not math.isfinite(v) else float(v)


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


def _ci(ci: Sequence[float | None] | None, fmt: Callable[[float], str]) -> str:
    """'[lo to hi]' of a 95 % interval ('inf' for an unbounded top; '' without one)."""
    if not ci:
        return ""
    lo, hi = finite(ci[0]), finite(ci[1])
    if lo is None:
        return ""
    return f"[{fmt(lo)} to {'inf' if hi is None else fmt(hi)}]"


def format_fit_lines(f: LinearFit | None, indent: str = "  ",
                     fixed: FixedCost | None = None) -> list[str]:
    """Lines for one fit; ms on screen.  With ``fixed`` the intercept is shown as it
    allows: "not pinned", or clamped at 0, never as a confident negative number."""
    if f is None:
        return [indent + "no fit (too few usable probes)"]
    tp = lambda v: f"{v:,.0f}"  # noqa: E731
    ms = lambda v: units.ms(v, 2, unit=False)  # noqa: E731
    us = lambda v: _sig(v * 1e6)  # noqa: E731  (s/token -> µs/token, as the TUI shows it)
    a = finite(f.intercept_s)
    a_txt, a_line = units.ms(a, 2), f"{ms(a)} ms"
    if fixed is not None and not fixed.pinned:
        a_txt = a_line = "a (not pinned)"
    elif fixed is not None and fixed.clamped:
        a_txt = "0 ms"
        a_line = f"0 ms (fit {ms(a)} ms, clamped)"
    a_ci = physical_ci((finite(f.intercept_ci[0]), finite(f.intercept_ci[1])))
    lines = [
        f"{indent}TTFT = {a_txt} + {us(f.slope_s_per_token)} µs x n"
        f"      R² {f.r2:.3f}, n = {f.n}"
        + (f" ({f.outliers} outlier{'s' if f.outliers != 1 else ''} set aside)" if f.outliers else ""),
        f"{indent}intercept    {a_line}   95% {_ci(a_ci, ms)} ms",
        f"{indent}slope        {us(f.slope_s_per_token)} µs/token   95% "
        f"{_ci(f.slope_ci, us)} µs/token",
    ]
    said = throughput_text(f)
    if said is not None:  # "too noisy yet" in place of 1/b while the slope reaches 0
        lines.append(f"{indent}throughput   {said}   95% "
                     f"{_ci(f.prefill_tokens_per_s_ci, tp)} tok/s")
    else:
        lines.append(f"{indent}throughput   {MISSING} (slope <= 0)")
    if f.unresolved:
        lines.append(f"{indent}too noisy yet: the slope's 95% interval includes 0, so the "
                     "throughput is not measured yet (more probes, or a quieter server)")
    if f.knee_tokens:
        lines.append(f"{indent}knee: TTFT flat below ~{f.knee_tokens:,} tokens; line fitted above it")
    return lines


def format_fixed_cost(fc: FixedCost | None, indent: str = "  ") -> list[str]:
    """The fixed cost TTFT(0) and what the server's own times say (ms on screen)."""
    if fc is None:
        return []
    ms = units.ms
    lo, hi = physical_ci((finite(fc.ci[0]), finite(fc.ci[1])))
    if fc.pinned:
        line = (f"{indent}fixed cost   {ms(fc.shown_s)} (fit, 95% {ms(lo, unit=False)} to "
                f"{ms(hi)}; pinned: +-{ms(fc.half_width_s, unit=False)} <= "
                f"{ms(fc.bound_s, 0)})")
    else:
        line = f"{indent}{fc.note}"
    out = [line]
    if fc.pinned and fc.note:
        out.append(f"{indent}  {fc.note}")
    s = fc.server
    if s is not None and not s.pinned:
        lo, hi = physical_ci(s.prefill_intercept_ci)
        out.append(f"{indent}server-side  not pinned either: prefill at n=0 95% {ms(lo, 0, unit=False)} to "
                   f"{ms(hi, 0)}; outside prefill {ms(s.outside_prefill_s)} (median "
                   f"TTFT - server prefill, {s.n} probes)")
    elif s is not None:
        raw = s.prefill_intercept_raw_s
        clamp = f" (fit {ms(raw)}, shown as 0)" if raw is not None and raw < 0 else ""
        out.append(f"{indent}server-side  {ms(s.fixed_cost_s)} = prefill at n=0 "
                   f"{ms(s.prefill_intercept_s)}{clamp} + outside prefill "
                   f"{ms(s.outside_prefill_s)} (median TTFT - server prefill, {s.n} probes)")
    return out


def _pct_ms(v: float | None) -> str:
    return "-" if v is None else units.ms_short(v)


def format_percentiles(p: TtftPercentiles | None, *, by_length: bool = True) -> list[str]:
    """TTFT percentile lines (ms on screen): a row per length (``by_length``; lengths
    whose probes were all cache hits have none) and the overall row."""
    if p is None or not p.overall.n:
        return []

    def row(label: str, q: Quantiles) -> str:
        return (f"  {label:>9} {q.n:>5} {_pct_ms(q.p50_s):>9} {_pct_ms(q.p90_s):>9} "
                f"{_pct_ms(q.p99_s):>9}")

    out = ["TTFT percentiles (ms, fit-eligible probes):",
           f"  {'tokens':>9} {'n':>5} {'p50':>9} {'p90':>9} {'p99':>9}"]
    if by_length:
        out += [row(str(r.requested_tokens), r.ttft) for r in p.by_length if r.n]
    out.append(row("all", p.overall))
    return out


def _roofline_lines(d: RunSummary) -> list[str]:
    out: list[str] = []
    roof, m, hw = d.roofline, d.model, d.hardware
    if m or hw:
        hw_txt = "hardware of unknown peak"
        if hw and hw.peak_tflops:
            hw_txt = f"{hw.name} {hw.dtype} {hw.peak_tflops:g} TFLOP/s"
            if hw.bandwidth_tbs:
                hw_txt += f", {hw.bandwidth_tbs:g} TB/s, ridge {hw.ridge_point:.0f} FLOP/byte"
            hw_txt += doubt(hw.doubt)
        m_txt = "model unknown" if not m else (
            f"{clean(m.name)} ({m.params / 1e9:.3g} B params" if m.params
            else f"{clean(m.name)} (params ?")
        if m:
            m_txt += f", L={m.layers}, d_attn={m.d_attn})" + doubt(m.doubt)
        out.append(f"Roofline (estimates): {m_txt} on {hw_txt}")
    sf = d.server_flops
    if sf:
        lo, hi = sf.rows[0], sf.rows[-1]
        out.append(f"  the server's own FLOP count (vLLM --enable-mfu-metrics) / prefilltui's matmul count: "
                   f"median {sf.ratio_median:.2f} over {sf.probes} probes; {lo[3]:.2f} at "
                   f"{lo[0]:,} tokens, {hi[3]:.2f} at {hi[0]:,} (vLLM bills attention's full n² "
                   "square, MFU its causal half)")
    if roof and roof.achieved_flops:
        line = f"  achieved {units.flops(roof.achieved_flops)} (from the {roof.slope_source} slope)"
        if roof.mfu is not None:
            line += f" = {roof.mfu_label} {roof.mfu:.1%}"
            if roof.mfu_ci:
                line += " " + _ci(roof.mfu_ci, lambda v: f"{v:.1%}")
        out.append(line)
        e = roof.expected_at_max
        if e and e.time_at_peak_s:
            out.append(f"  at {e.tokens:,} tokens: {e.flops / 1e12:.3g} TFLOP (matmul), expected "
                       f"{units.ms(e.time_at_peak_s)} at peak, {units.ms(e.time_at_efficiency_s)} at "
                       f"{e.efficiency:.0%}; fitted TTFT {units.ms(roof.measured_ttft_at_max_s)}")
    return out


def format_summary(d: RunSummary, *, percentile_table: bool = True) -> str:
    """Plain-text summary of a run (ms on screen; estimates labelled).
    ``percentile_table=False`` gives only the overall TTFT percentiles (the sweep's
    own table has them per length)."""
    p = d.probes
    counted = p.cache_counted
    hits = (f"{p.cache_hits} cache hits" if counted is None
            else f"{p.cache_hits} cache hits (server-counted)" if counted == p.ok
            else "cache hits not counted by the server" if counted == 0
            else f"{p.cache_hits} cache hits (server-counted on {counted} of {p.ok})")
    out = [f"Probes: {p.total} total, {p.ok} ok, {p.failed} failed, {p.warmup} warm-up, "
           f"{hits}; {p.fit_eligible} in the fit"
           + (f" ({p.tokens_min:,}-{p.tokens_max:,} tokens)" if p.tokens_min else "")]
    if p.errors:
        out.append("  errors: " + ", ".join(f"{k} {v}" for k, v in sorted(p.errors.items())))
    f = d.fit
    est = ", prompt lengths estimated" if d.fit_lengths_estimated else ""
    out.append(f"Fit ({f.method if f else 'none'}, all-time{est}):")
    out += format_fit_lines(f, fixed=d.fixed_cost)
    out += format_fixed_cost(d.fixed_cost)
    q = d.quadratic
    if q is not None and q.applies:
        qf = q.fit
        # one format and one unit for c, its interval and attention's c (units.curvature)
        c_ci = _ci(qf.c_ci, lambda v: units.curvature(v, unit=False))
        out.append(f"  curvature: c = {units.curvature(qf.c_s_per_token2)}"
                   + (f"   95% {c_ci} {units.CURVATURE_UNIT}" if c_ci else ""))
        if d.roofline and d.roofline.c_expected_s_per_token2:
            out.append(f"    attention expects c = "
                       f"{units.curvature(d.roofline.c_expected_s_per_token2)} "
                       f"(ratio {d.roofline.c_ratio:.2f}, estimate)")
        said = throughput_text(qf)
        if said is not None:
            tp_ci = _ci(qf.prefill_tokens_per_s_ci, lambda v: f'{v:,.0f}')
            out.append(f"  TTFT curves up with n: the line above averages over the range; the "
                       f"linear term alone gives {said}"
                       + (f"   95% {tp_ci} tok/s" if tp_ci else ""))
    w = d.window
    if w.fit is not None and w.n < p.fit_eligible:
        said = throughput_text(w.fit)
        chg = w.throughput_change if said not in (None, TOO_NOISY) else None
        out.append(f"Window (last {w.size} probes): "
                   + (f"throughput {TOO_NOISY}" if said == TOO_NOISY
                      else f"{said} {_ci(w.fit.prefill_tokens_per_s_ci, lambda v: f'{v:,.0f}')}"
                      if said else "no throughput")
                   + (f", {chg:+.1%} vs all-time" if chg is not None else ""))
    out += _roofline_lines(d)
    out += format_percentiles(d.percentiles, by_length=percentile_table)
    out.append(f"Verdict: {d.verdict.text}")
    out += slo_lines(d.slo)
    shown = {d.fixed_cost.note} if d.fixed_cost else set()
    out += [f"  note: {n}" for n in d.notes if n not in shown]
    return "\n".join(out)


def _ms_cell(v: float | None, width: int = 9) -> str:
    return f"{'-':>{width}}" if v is None else f"{v * 1e3:>{width},.1f}"


def until_line(u: Progress) -> str:
    """'target +-2 % reached after 57 probes (240 s): throughput +-1.9 %' and the like."""
    hw = finite(u.half_width_pct)
    now = "no throughput interval" if hw is None else f"throughput +-{hw:.1f} %"
    tgt = f"target +-{u.target_pct:g} % " if u.target_pct is not None else ""
    if u.reason == "target reached":
        return f"{tgt}reached after {u.probes} probes ({u.elapsed_s:.0f} s): {now}"
    if u.target_pct is None:  # --budget alone
        return (f"{u.reason or 'sweep finished within the budget'}: {u.probes} probes "
                f"({u.elapsed_s:.0f} s)")
    why = u.reason or "stopped before the target"
    return f"{tgt}not reached: {why} after {u.probes} probes ({u.elapsed_s:.0f} s): {now}"


def format_sweep(d: RunSummary, *, fit_line: bool = False, said: Collection[str] = ()) -> str:
    """The sweep's view: the server, a row per length (TTFT quantiles of the probes in
    the fit, ms), the probe counts, the client overhead, the until-CI outcome, the run
    file and the run's notes but those in ``said`` (printed as they came: the plan's
    notes, said once).  ``fit_line``: also a one-line fit (when the full analysis is not
    printed below)."""
    s, p, live = d.server, d.probes, d.live
    proxy = live.proxy if live is not None else None
    out = [f"server  {s.kind if s else None}  model {clean(s.model) if s and s.model else '?'}  "
           "context "
           f"{(s.context_tokens if s else None) or '?'} tokens"
           + (f"  via proxy {proxy}" if proxy else ""),
           "",
           f"{'requested':>9} {'counted':>8} {'n':>4} {'TTFT p50':>9} {'p90':>9} {'p99':>9} "
           f"{'min':>9} {'server prefill':>15}   (ms)"]
    for r in d.percentiles.by_length:
        out.append(f"{r.requested_tokens:>9} {r.prompt_tokens or '-':>8} {r.n:>4} "
                   f"{_ms_cell(r.ttft.p50_s)} {_ms_cell(r.ttft.p90_s)} {_ms_cell(r.ttft.p99_s)} "
                   f"{_ms_cell(r.ttft_min_s)} {_ms_cell(r.server_prefill_median_s, 15)}")
    out.append("")
    rate_limited = live.rate_limited if live else 0
    out.append(f"probes ok {p.ok}, failed {p.failed}, warm-up {p.warmup}"
               + (f", rate-limited {rate_limited}" if rate_limited else "")
               + (f", cache hits {p.cache_hits}" if p.cache_hits else ""))
    if p.errors:
        out.append("errors  " + ", ".join(f"{k} {v}" for k, v in sorted(p.errors.items())))
    f = d.fit
    if fit_line and f is not None:
        said = throughput_text(f, "tokens/s")
        est = ", lengths estimated" if d.fit_lengths_estimated else ""
        out.append(f"fit ({f.method}{est})  TTFT = {units.ms(f.intercept_s, 2)} + "
                   f"{units.ms(f.slope_s_per_token, 4, unit=False)} ms/token x n   "
                   f"prefill {said}   R2 {f.r2:.3f}   n {f.n}"
                   if said else f"fit  intercept {units.ms(f.intercept_s, 2)}, slope <= 0")
    elif fit_line:
        out.append("fit  too few points (need 3 fit-eligible probes at 2+ lengths)")
    if d.overhead_median_s is not None:
        out.append(f"client overhead (TTFT - server prefill, median)  "
                   f"{units.ms(d.overhead_median_s, 2)}")
    if live is not None and live.until_ci is not None:
        out.append("until-ci  " + until_line(live.until_ci))
    if d.run_file:
        out.append(f"run file  {d.run_file}")
    out += [f"note: {n}" for n in (live.notes if live else ()) if n not in said]
    return "\n".join(out)


def summary_json(d: RunSummary) -> str:
    """The summary as the JSON text ``sweep`` and ``report`` print (schema in
    docs/schema.md); strict JSON: a NaN or infinity is an error, never written."""
    return json.dumps(d.to_json(), indent=2, allow_nan=False, default=str)
