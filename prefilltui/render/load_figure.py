"""The background-load figure of ``report``: one SVG, two panels.

Left: against prompt tokens (the highest load level's probes), median TTFT, decode
excess and decode stall per length: chunked prefill shows as a flat stall under a
rising excess, no chunking as a stall that follows TTFT.  Right: against offered load
(``sweep --load-levels``), each level's median TTFT split into queue / prefill /
overhead / the rest as stacked bars, the decode stall and excess at the longest
prompt as lines, and the knee marked.  Data in seconds, the figure in ms.  Plain SVG,
no external resources.
"""

from __future__ import annotations

from typing import Sequence

from prefilltui.model.load import LevelTable
from prefilltui.model.load import StallSummary
from prefilltui.render.figure import FONT, esc, nice_ticks, tick_text

#: Okabe-Ito colours: TTFT, excess, stall; queue, prefill, overhead, rest.
C_TTFT, C_EXCESS, C_STALL = "#0072B2", "#E69F00", "#D55E00"
C_PARTS = {"queue": "#CC79A7", "prefill": "#56B4E9", "overhead": "#999999", "rest": "#dddddd"}


def _axes(o: list[str], x0: float, y0: float, w: float, h: float, yt: Sequence[float],
          xlabels: Sequence[tuple[float, str]], xtitle: str, ytitle: str) -> None:
    y1 = yt[-1]
    for v in yt:
        Y = y0 + h * (1 - v / y1)
        o.append(f'<line x1="{x0}" y1="{Y:.1f}" x2="{x0 + w}" y2="{Y:.1f}" stroke="#e5e5e5"/>')
        o.append(f'<text x="{x0 - 6}" y="{Y + 4:.1f}" text-anchor="end" fill="#333">{tick_text(v)}</text>')
    for X, lab in xlabels:
        o.append(f'<text x="{X:.1f}" y="{y0 + h + 16}" text-anchor="middle" fill="#333">{esc(lab)}</text>')
    o.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#888"/>')
    o.append(f'<text x="{x0 + w / 2:.1f}" y="{y0 + h + 34}" text-anchor="middle" fill="#222">{esc(xtitle)}</text>')
    o.append(f'<text transform="translate({x0 - 48} {y0 + h / 2:.1f}) rotate(-90)" '
             f'text-anchor="middle" fill="#222">{esc(ytitle)}</text>')


def _legend(o: list[str], x: float, y: float, items: Sequence[tuple[str, str]]) -> None:
    for i, (color, label) in enumerate(items):
        o.append(f'<rect x="{x}" y="{y + 16 * i - 8}" width="10" height="10" fill="{color}"/>')
        o.append(f'<text x="{x + 15}" y="{y + 16 * i + 1}" fill="#222">{esc(label)}</text>')


def _line(o: list[str], pts: Sequence[tuple[float, float]], color: str) -> None:
    """A series: its points (SVG coordinates) as dots, joined when there are two or more."""
    if len(pts) > 1:
        o.append('<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>'.format(
            color, " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)))
    for a, b in pts:
        o.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3.5" fill="{color}"/>')


def load_figure(stall: StallSummary | None, levels: LevelTable | None, *, title: str = "",
                width: int = 980, height: int = 520) -> str:
    """The figure as an SVG document (a string); a panel without data says so."""
    W, H = width, height
    top, bottom, gapx = 80, 140, 90
    pw = (W - 2 * 70 - gapx) / 2
    ph = H - top - bottom
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         f'viewBox="0 0 {W} {H}" font-family="{FONT}" font-size="12">',
         f"<title>{esc(title or 'prefill under background load')}</title>",
         f'<rect x="0" y="0" width="{W}" height="{H}" fill="#ffffff"/>',
         f'<text x="70" y="22" font-size="16" font-weight="bold" fill="#222">'
         f'{esc(title or "Prefill under background load")}</text>']
    if stall is not None:
        o.append(f'<text x="70" y="42" fill="#444">{esc(stall.sentence)}</text>')
    if levels is not None and levels.knee_line and len(levels.rows) > 1:
        o.append(f'<text x="70" y="60" fill="#444">{esc(levels.knee_line)}</text>')
    _prompt_panel(o, stall, 70, top, pw, ph)
    _level_panel(o, levels, 70 + pw + gapx, top, pw, ph)
    o.append("</svg>")
    return "\n".join(o) + "\n"


def _prompt_panel(o, s: StallSummary | None, x0, y0, w, h) -> None:
    rows = [r for r in (s.rows if s else ()) if r.ttft_s is not None]
    if not rows:
        o.append(f'<text x="{x0 + w / 2:.1f}" y="{y0 + h / 2:.1f}" text-anchor="middle" '
                 'fill="#666">no probe ran beside decode streams</text>')
        return
    xs = [float(r.prompt_tokens or r.requested_tokens) for r in rows]
    ymax = max(max(r.ttft_s or 0, r.excess_s or 0, r.stall_s or 0) for r in rows) * 1e3
    yt = nice_ticks(0.0, max(ymax, 1e-3))
    xt = nice_ticks(0.0, max(xs))
    sx = lambda x: x0 + w * x / xt[-1]  # noqa: E731
    sy = lambda y: y0 + h * (1 - y / yt[-1])  # noqa: E731
    _axes(o, x0, y0, w, h, yt, [(sx(v), tick_text(v)) for v in xt], "prompt tokens", "ms")
    for attr, color in (("ttft_s", C_TTFT), ("excess_s", C_EXCESS), ("stall_s", C_STALL)):
        _line(o, [(sx(x), sy(getattr(r, attr) * 1e3)) for x, r in zip(xs, rows)
                  if getattr(r, attr) is not None], color)
    _legend(o, x0, y0 + h + 58, [(C_TTFT, "TTFT (probe)"),
                                   (C_EXCESS, "decode excess (extra time in all)"),
                                   (C_STALL, "decode stall (longest freeze)")])


def _level_panel(o, t: LevelTable | None, x0, y0, w, h) -> None:
    rows = [r for r in (t.rows if t else ()) if r.ttft_p50_s is not None]
    if len(rows) < 2:
        o.append(f'<text x="{x0 + w / 2:.1f}" y="{y0 + h / 2:.1f}" text-anchor="middle" '
                 'fill="#666">one load level (sweep --load-levels for this panel)</text>')
        return
    ymax = max(max(r.ttft_p50_s or 0, r.excess_s or 0, r.stall_s or 0) for r in rows) * 1e3
    yt = nice_ticks(0.0, max(ymax, 1e-3))
    slot = w / len(rows)
    sx = lambda i: x0 + slot * (i + 0.5)  # noqa: E731
    sy = lambda y: y0 + h * (1 - y / yt[-1])  # noqa: E731
    unit = "requests/s" if t.kind == "rate" else "decode streams"
    _axes(o, x0, y0, w, h, yt, [(sx(i), f"{r.level:g}") for i, r in enumerate(rows)],
          f"offered load ({unit})", "ms")
    bw = slot * 0.5
    for i, r in enumerate(rows):
        base = 0.0
        known = {"queue": r.queue_s if r.queue_n * 2 >= max(1, r.probes) else None,
                 "prefill": r.prefill_s, "overhead": r.overhead_s}
        parts = [(k, v) for k, v in known.items() if v is not None and v > 0]
        rest = max(0.0, r.ttft_p50_s - sum(v for _, v in parts))
        for k, v in parts + [("rest", rest)]:
            y_top = sy((base + v) * 1e3)
            o.append(f'<rect x="{sx(i) - bw / 2:.1f}" y="{y_top:.1f}" width="{bw:.1f}" '
                     f'height="{sy(base * 1e3) - y_top:.1f}" fill="{C_PARTS[k]}"/>')
            base += v
        if t.knee is not None and r.level == t.knee:
            o.append(f'<text x="{sx(i):.1f}" y="{sy(base * 1e3) - 6:.1f}" text-anchor="middle" '
                     f'fill="{C_PARTS["queue"]}" font-weight="bold">knee</text>')
    for attr, color in (("excess_s", C_EXCESS), ("stall_s", C_STALL)):
        _line(o, [(sx(i), sy(getattr(r, attr) * 1e3)) for i, r in enumerate(rows)
                  if getattr(r, attr) is not None], color)
    _legend(o, x0, y0 + h + 58, [(C_PARTS["queue"], "queue (the server's, per probe)"),
                                  (C_PARTS["prefill"], "prefill"),
                                  (C_PARTS["overhead"], "overhead"),
                                  (C_PARTS["rest"], "rest of TTFT (not split: waiting, interference)")])
    _legend(o, x0 + w * 0.62, y0 + h + 58, [(C_EXCESS, "excess, longest prompt"),
                                           (C_STALL, "stall, longest prompt")])
