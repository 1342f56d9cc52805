"""The run's figure as a standalone SVG, and an HTML page with it and the summary table.

``svg_figure(results, d)`` draws TTFT (ms) against prompt tokens: the probes in the
fit, the fitted line, probes left out (warm-up, cache hits) and, when the run has
``--depth`` probes, one series per context depth against the *new* tokens after the
cached prefix, each with its own fitted line.  ``d`` is the run's ``RunSummary``
(``model.summary.analysis.analyze``; its ``depth`` table when the run has one).  ``html_page``
embeds the same SVG, the summary's per-length table, the depth table and the text summary.  Plain strings, no
external resources (fonts, scripts, images), so a file opens anywhere, offline.
Data in seconds; the figure shows ms (and µs per token).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Iterable, Literal, Sequence

from prefilltui.model.depth import depth_of, is_depth_probe
from prefilltui.model.fit import LinearFit, throughput_text
from prefilltui.model.summary import RunSummary
from prefilltui.model.types import ProbeResult
from prefilltui.model.units import MISSING, ms
from prefilltui.render.text import finite
from prefilltui.render.ticks import nice_step

#: Series colours (colour-blind-safe Okabe-Ito palette): depth 0, then deeper.
COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
MUTED = "#999999"
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """About ``count`` round tick values (1, 2, 5 x 10^k steps) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    step = nice_step((hi - lo) / max(1, count - 1))
    start = math.floor(lo / step) * step
    ticks = []
    v = start
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    if ticks[-1] < hi:
        ticks.append(round(v, 10))
    return ticks


def tick_text(v: float) -> str:
    """An axis tick's label: thousands separated, no decimals from 10 up."""
    return f"{v:,.0f}" if abs(v) >= 10 or v == int(v) else f"{v:g}"


def esc(s: str) -> str:
    """``s`` escaped for SVG/HTML text and attributes."""
    return html.escape(str(s), quote=True)


@dataclass(frozen=True, slots=True)
class Series:
    """One plot series: its legend label, colour, points (x tokens, y ms), the fit drawn
    through them (or None) and its kind."""

    label: str
    color: str
    points: list[tuple[float, float]]
    fit: LinearFit | None
    kind: Literal["main", "sweep", "depth", "excluded"]


def _series(results: Sequence[ProbeResult], d: RunSummary) -> list[Series]:
    """The plot's series (see ``Series``)."""
    out: list[Series] = []
    sweep = [r for r in results if not is_depth_probe(r)]
    pts = [(float(r.tokens), r.ttft_s * 1e3) for r in sweep if r.fit_eligible]
    f = d.fit
    said = throughput_text(f, "tok/s")  # "too noisy yet" while the slope's interval reaches 0
    fit_label = (f" · fit {said}" if said else " · fit (slope ≤ 0)") if f is not None else ""
    depth = d.depth
    if not depth:
        out.append(Series("probes in the fit" + fit_label, COLORS[0], pts, f, "main"))
    else:
        phase = [r for r in results if r.depth is not None and r.depth.role == "probe"]
        phase0 = any(depth_of(r) == 0 for r in phase)
        if phase0 and pts:
            out.append(Series("sweep probes" + fit_label.replace("fit", "their fit"),
                              "#a6c8e0", pts, None, "sweep"))
        for i, row in enumerate(depth.rows):
            dd = row.depth
            if dd == 0 and not phase0:
                dp = pts
            else:
                dp = [(float(r.depth.new_tokens or 0), r.ttft_s * 1e3) for r in phase
                      if depth_of(r) == dd and r.depth.verified and r.ttft_s is not None]
            lab = "depth 0 (cold prompt)" if dd == 0 else f"depth {dd:,} (cached prefix)"
            if throughput_text(row.fit, "tok/s"):
                lab += f" · {throughput_text(row.fit, 'tok/s')}"
            if dd and row.ratio:
                lab += f" · slope ×{row.ratio:.2f}"
            out.append(Series(lab, COLORS[i % len(COLORS)], dp, row.fit, "depth"))
    left = [(float(r.tokens), r.ttft_s * 1e3) for r in sweep
            if r.ok and not r.fit_eligible and r.ttft_s is not None and r.tokens]
    left += [(float(r.depth.new_tokens or r.requested_tokens), r.ttft_s * 1e3)
             for r in results if r.depth is not None and r.depth.role == "probe" and r.ok
             and not r.depth.verified and r.ttft_s is not None]
    if left:
        out.append(Series("left out (warm-up, cache hit, not verified)", MUTED, left, None,
                          "excluded"))
    return out


def svg_figure(results: Iterable[ProbeResult], d: RunSummary, *, width: int = 820,
               height: int = 500, title: str | None = None) -> str:
    """The figure as an SVG document (a string).  Never raises for a run without
    points: it then says "no usable probes" in the plot area."""
    results = list(results)
    series = _series(results, d)
    W, H = width, height
    left, right, top, bottom = 72, 20, 58, 54
    pw, ph = W - left - right, H - top - bottom
    allpts = [p for s in series for p in s.points]
    xmax = max((p[0] for p in allpts), default=1.0)
    ymax = max((p[1] for p in allpts), default=1.0)
    xt = nice_ticks(0.0, max(xmax, 1.0))
    yt = nice_ticks(0.0, max(ymax, 1e-3))
    x1, y1 = xt[-1], yt[-1]
    sx = lambda x: left + pw * x / x1  # noqa: E731
    sy = lambda y: top + ph * (1 - y / y1)  # noqa: E731
    model = ((d.server.model if d.server else None) or (d.model.name if d.model else None)
             or "")
    model = model.replace("\\", "/").rsplit("/", 1)[-1]  # a GGUF path: its file name
    if len(model) > 48:
        model = model[:47] + "…"
    title = title or "TTFT vs prompt tokens" + (f" — {model}" if model else "")
    f = d.fit
    sub = ""
    if f is not None and finite(f.slope_s_per_token) is not None:
        fc = d.fixed_cost
        a = ("a (not pinned)" if fc is not None and not fc.pinned  # as the summary says it
             else ms(max(0.0, f.intercept_s)))
        sub = (f"TTFT = {a} + {f.slope_s_per_token * 1e6:,.1f} µs × n"
               f" · R² {f.r2:.3f} · {f.n} probes in the fit")
        if throughput_text(f, "tok/s"):
            sub += f" · prefill {throughput_text(f, 'tok/s')}"
    else:
        sub = f"{d.probes.ok} probes ok, no fit"
    o: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" font-family="{FONT}" font-size="12">',
        f"<title>{esc(title)}</title>",
        f'<rect x="0" y="0" width="{W}" height="{H}" fill="#ffffff"/>',
        f'<text x="{left}" y="22" font-size="16" font-weight="bold" fill="#222">{esc(title)}</text>',
        f'<text x="{left}" y="41" fill="#444">{esc(sub)}</text>',
    ]
    for v in xt:
        X = sx(v)
        o.append(f'<line x1="{X:.1f}" y1="{top}" x2="{X:.1f}" y2="{top + ph}" stroke="#e5e5e5"/>')
        o.append(f'<text x="{X:.1f}" y="{top + ph + 16}" text-anchor="middle" fill="#333">'
                 f"{tick_text(v)}</text>")
    for v in yt:
        Y = sy(v)
        o.append(f'<line x1="{left}" y1="{Y:.1f}" x2="{left + pw}" y2="{Y:.1f}" stroke="#e5e5e5"/>')
        o.append(f'<text x="{left - 6}" y="{Y + 4:.1f}" text-anchor="end" fill="#333">{tick_text(v)}</text>')
    o.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
    xl = "prompt tokens" + (" (new tokens after the prefix, for depth series)"
                            if d.depth else " (as the server counts them)")
    o.append(f'<text x="{left + pw / 2:.1f}" y="{H - 14}" text-anchor="middle" fill="#222">'
             f"{esc(xl)}</text>")
    o.append(f'<text transform="translate(18 {top + ph / 2:.1f}) rotate(-90)" '
             f'text-anchor="middle" fill="#222">TTFT (ms)</text>')
    o.append(f'<clipPath id="plot"><rect x="{left}" y="{top}" width="{pw}" height="{ph}"/></clipPath>')
    o.append('<g clip-path="url(#plot)">')
    for s in series:
        fit = s.fit
        if fit is not None and finite(fit.slope_s_per_token) is not None and s.points:
            xs = [q[0] for q in s.points]
            lo = max(float(fit.knee_tokens or 0), min(xs))
            hi = max(xs)
            a, b = fit.intercept_s * 1e3, fit.slope_s_per_token * 1e3
            o.append(f'<line x1="{sx(lo):.1f}" y1="{sy(a + b * lo):.1f}" x2="{sx(hi):.1f}" '
                     f'y2="{sy(a + b * hi):.1f}" stroke="{s.color}" stroke-width="2"/>')
        for x, y in s.points:
            if s.kind == "excluded":
                o.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="none" '
                         f'stroke="{s.color}" stroke-width="1.2"/>')
            else:
                o.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.2" fill="{s.color}" '
                         'fill-opacity="0.8"/>')
    o.append("</g>")
    if not allpts:
        o.append(f'<text x="{left + pw / 2:.1f}" y="{top + ph / 2:.1f}" text-anchor="middle" '
                 f'font-size="14" fill="#666">no usable probes</text>')
    ly = top + 10
    lw = 30 + 7 * max((len(s.label) for s in series), default=0)
    o.append(f'<rect x="{left + 6}" y="{ly - 5}" width="{lw}" height="{18 * len(series) + 6}" '
             'fill="#ffffff" fill-opacity="0.85" stroke="#dddddd"/>')
    for s in series:
        o.append(f'<circle cx="{left + 16}" cy="{ly + 4}" r="4" fill="{s.color}"/>')
        o.append(f'<text x="{left + 26}" y="{ly + 8}" fill="#222">{esc(s.label)}</text>')
        ly += 18
    o.append("</svg>")
    return "\n".join(o) + "\n"


_CSS = """body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:24px;color:#222;
background:#fff;max-width:900px}table{border-collapse:collapse;margin:8px 0 20px}
th,td{border:1px solid #ccc;padding:3px 9px;text-align:right}th{background:#f2f2f2}
pre{background:#f7f7f7;padding:10px;overflow-x:auto;font-size:12px}h1{font-size:20px}
h2{font-size:16px;margin-top:22px}.note{color:#555;font-size:12px}"""


def _table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    h = "".join(f"<th>{esc(c)}</th>" for c in head)
    b = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{b}</tbody></table>"




def html_page(results: Iterable[ProbeResult], d: RunSummary, summary_text: str, *,
              title: str = "prefilltui report", extra_svg: str | None = None) -> str:
    """A standalone HTML page: the SVG figure, the summary's per-length table, the depth
    table (when present), ``extra_svg`` (the background-load figure) and
    ``summary_text`` (the text summary)."""
    results = list(results)
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{esc(title)}</h1>"]
    if d.run_file:
        parts.append(f'<p class="note">run file: {esc(d.run_file)}</p>')
    parts.append(svg_figure(results, d))
    parts.append("<h2>Probes per length</h2>")
    parts.append(_table(["requested tokens", "counted", "probes", "TTFT median (ms)",
                         "TTFT min (ms)", "server prefill median (ms)"],
                        [[f"{r.requested_tokens:,}",
                          MISSING if r.prompt_tokens is None else f"{r.prompt_tokens:,}",
                          str(r.n), ms(r.ttft.p50_s, unit=False), ms(r.ttft_min_s, unit=False),
                          ms(r.server_prefill_median_s, unit=False)]
                         for r in d.percentiles.by_length if r.n]))
    dt = d.depth
    if dt:
        parts.append("<h2>Prefill at context depth</h2>")
        body = []
        for r in dt.rows:
            f = r.fit
            slope = finite(f.slope_s_per_token) if f is not None else None
            tps = throughput_text(f, "")
            body.append([f"{r.depth:,}", MISSING if not r.prefix_tokens else f"{r.prefix_tokens:,}",
                         MISSING if not r.depth or r.cached_tokens is None else f"{r.cached_tokens:,}",
                         f"{r.verified}/{r.probes}",
                         MISSING if slope is None else f"{slope * 1e6:,.1f}",
                         tps or MISSING,
                         MISSING if r.ratio is None else f"{r.ratio:.2f}×",
                         MISSING if r.expected_ratio is None else f"{r.expected_ratio:.2f}×"])
        parts.append(_table(["depth", "prefix tokens", "cached tokens", "probes (verified/sent)",
                             "slope (µs/token)", "prefill tok/s", "ratio vs depth 0",
                             "formula ratio (estimate)"], body))
        parts.append(f'<p class="note">{esc(dt.formula)}</p>')
    if extra_svg:
        parts.append("<h2>Prefill under background load</h2>")
        parts.append(extra_svg)
    parts.append("<h2>Summary</h2>")
    parts.append(f"<pre>{esc(summary_text)}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
