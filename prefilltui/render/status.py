"""``prefilltui status`` as text and JSON: the overview's table (``render.fleet``), then
per target what is wrong (the alert rules that hold), the verdict and the advice."""

from __future__ import annotations

import json

from prefilltui.model.sanitize import clean
from prefilltui.model.fleet import FleetStatus
from prefilltui.render.fleet import figures, table
from prefilltui.render.slo import fleet_lines


def format_status(status: FleetStatus, width: int = 100, ref_tokens: int = 1024) -> str:
    """The snapshot as text: the table of every target, worst first, then one block per
    target: its figures in words (``render.fleet.figures``: what "310 ±∞", "7/0" and
    "0 ✓" in the table stand for), findings, the verdict, notes and advice."""
    rows = [t.row for t in status.targets]
    out = table(rows, width=width, ref_tokens=ref_tokens)
    for t in status.targets:
        h = t.row.health
        lines = [f"{clean(t.label)}: {h.word}" + (f" ({clean(t.url)})" if t.url and
                                                   t.url != t.label else ""),
                 f"  {figures(t.row)}"]
        for f in h.findings:
            lines.append(f"  {f.severity} {f.rule}: {clean(f.text)}")
        if t.row.verdict_text:
            lines.append(f"  verdict: {clean(t.row.verdict_text)}")
        for note in h.notes:
            lines.append(f"  note: {clean(note)}")
        for a in t.advice:
            lines.append(f"  advice: {clean(a.text)}")
        if t.gpu_source:
            lines.append(f"  GPU: {clean(t.gpu_source)}")
        out.append("")
        out.extend(lines)
    slo = fleet_lines([(clean(t.label), t.summary.slo) for t in status.targets
                       if t.summary is not None])
    if slo:
        out.append("")
        out.extend(slo)
    bad = [t.label for t in status.targets if not t.healthy]
    out.append("")
    out.append("healthy: every target" if not bad else
               f"unhealthy: {', '.join(clean(b) for b in bad)}")
    if status.load is not None:
        out.append(f"load of this snapshot: {status.load.line()}")
    return "\n".join(out)


def status_json(status: FleetStatus) -> str:
    """One JSON object (schema ``model.fleet.status.SCHEMA``)."""
    return json.dumps(status.to_json(), indent=2, allow_nan=False)
