"""What the exporter publishes about background load and the TTFT verdict.

``LoadFigures`` is published only for a target whose config asks for a load
(``load = "decode:2"``): a monitor never loads a production server by default.  The
verdict ("why is TTFT high?", ``model.diagnosis.verdict``) comes with every target's window
summary (``RunSummary.ttft_verdict``): it costs the server nothing.  Computed in the
prober's thread after each probe, read by the collector from the frozen snapshot (no
I/O at scrape time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from prefilltui.model.load import itl_quantiles
from prefilltui.model.types import ProbeResult
from prefilltui.model.fit import finite_median

#: The span of decode gaps the ITL quantiles cover (s): the last minute.
ITL_SPAN_S = 60.0


@dataclass(frozen=True, slots=True)
class LoadFigures:
    """The load on one target and what its probes' prefills cost the decodes
    (seconds; medians over the window's probes that measured a stall).

    kind / level: the load (decode streams or requests/s; 0 while paused); state: the
    generator's state; requests / tokens: load requests sent and tokens received in
    all (what the load cost the target); stall_s / excess_s: the window's medians;
    itl_p50_s / itl_p99_s: the decode gaps of the last minute (client side).
    """

    kind: str
    level: float
    state: str
    requests: int
    tokens: int
    stall_s: float | None = None
    excess_s: float | None = None
    itl_p50_s: float | None = None
    itl_p99_s: float | None = None


def load_figures(gen: Any, window: Sequence[ProbeResult], now: float) -> LoadFigures:
    """The figures of a ``LoadGenerator`` and the window's probes at ``now``
    (perf_counter)."""
    traces = gen.traces(since=now - ITL_SPAN_S)
    p50, p99, _ = itl_quantiles(traces, (now - ITL_SPAN_S, now))
    stalled = [r for r in window if r.decode_stall_s is not None and r.load_level == gen.level]
    return LoadFigures(kind=gen.spec.kind, level=float(gen.level if gen.alive else 0.0),
                       state=gen.state, requests=gen.requests, tokens=gen.tokens,
                       stall_s=finite_median(r.decode_stall_s for r in stalled),
                       excess_s=finite_median(r.decode_excess_s for r in stalled),
                       itl_p50_s=p50, itl_p99_s=p99)
