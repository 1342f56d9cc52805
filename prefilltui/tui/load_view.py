"""What the TUI shows of the background load: the decode row, the status words and the
stats lines (the stall of the last probe, the verdict).  Plain functions and data, no
textual (as ``viewmodel.py``): the app calls them on its throttled tick.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from prefilltui.model.fit import LinearFit
from prefilltui.model.sanitize import clean
from prefilltui.model.load import DecodeTrace, gap_series
from prefilltui.model.types import ProbeResult
from prefilltui.model.units import MISSING, duration
from prefilltui.model.diagnosis import Expectation, HeldExpectation, TtftVerdict, ttft_verdict
from prefilltui.tui.viewmodel import VerdictNow

#: A decode gap at least this many baseline gaps long (and 20 ms over it) is a stall
#: on the decode row.
STALL_GAPS = 3.0
STALL_MIN_S = 0.020


@dataclass(frozen=True, slots=True)
class DecodeView:
    """The decode row: its text (a head line, then up to two detail lines after a
    newline), the decode gaps over the span as
    (arrival, gap) pairs, the quiet baseline gap and the stalls as (start, end)."""

    text: str
    gaps: tuple[tuple[float, float], ...] = ()
    baseline_s: float | None = None
    stalls: tuple[tuple[float, float], ...] = ()


def _ms(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return MISSING
    return duration(s)


def decode_view(traces: Sequence[DecodeTrace], now: float, span: float, *, describe: str,
                last: ProbeResult | None = None) -> DecodeView:
    """The decode row from the load's traces (``LoadGenerator.traces``) over [now -
    span, now]: ITL p50 of the span, the last probe's stall and excess."""
    gaps = tuple(gap_series(traces, since=now - span))
    vals = sorted(g for _, g in gaps)
    base = (last.decode_gap_s if last is not None and last.decode_gap_s is not None
            else (statistics.median(vals) if vals else None))
    stalls: list[tuple[float, float]] = []
    if base is not None:
        limit = max(STALL_GAPS * base, base + STALL_MIN_S)
        stalls = [(t - g, t) for t, g in gaps if g >= limit]
    head = f"decode ITL ▲ stall  {describe}"
    if vals:
        head += f" · ITL p50 {_ms(statistics.median(vals))}, max {_ms(vals[-1])}"
    detail = ["no decode tokens in the last minute"] if not vals else []
    if last is not None and last.decode_stall_s is not None:
        detail = [f"last probe {last.tokens or last.requested_tokens:,} tok: stall "
                  f"{_ms(last.decode_stall_s)}, excess {_ms(last.decode_excess_s)}"]
        if last.server_itl_max_s is not None:
            detail.append(f"server ITL histogram: longest ≤ {_ms(last.server_itl_max_s)}")
    return DecodeView(head + "\n" + "\n".join(detail), gaps, base, tuple(stalls))


def stall_lines(last: ProbeResult | None) -> list[str]:
    """The stats panel's lines about the last probe under load."""
    if last is None or not last.load_level:
        return []
    if last.decode_stall_s is None:
        return [f"under load {last.load_level:g}: stall {MISSING}"]
    return [f"under load {last.load_level:g}: stall {_ms(last.decode_stall_s)}",
            f"  excess {_ms(last.decode_excess_s)} ({last.decode_tokens} decode tok)"]


def live_verdict(results: Sequence[ProbeResult], fit: LinearFit | None, *,
                 assessment: Any = None, held: HeldExpectation | None = None,
                 now: VerdictNow | None = None) -> TtftVerdict:
    """The verdict over the recent probes with the idle fit as the expectation (the
    TUI's fit keeps probes under load out), as ``held`` keeps it when given (offered
    ``fit``; the baseline or the first pinned fit, then only a faster one: an
    incident cannot move it).  ``now``: the present (``viewmodel.VerdictNow``: the
    users' evidence, the probe in flight's age, the waiting gauge; None: nothing);
    the users' reference (``users_before``) defaults to the one ``held`` keeps."""
    now = now if now is not None else VerdictNow()
    users = now.users
    mfu = getattr(assessment, "mfu", None)
    level = getattr(assessment, "level", None)
    source = "idle fit"
    if held is not None:
        held.offer(fit, results)
        if held.fit is not None:
            fit, source = held.fit, held.label
        users = users.with_before(held.users_before)
    expect = Expectation(fit, source, mfu, level) if fit is not None or level else None
    v = ttft_verdict(list(results), expect, users_evidence=users,
                     in_flight_age_s=now.in_flight_age_s, waiting_now=now.waiting_now)
    if held is not None:
        held.observe(v, users.users_now, changes=users.server_changes)
    return v


def load_status(describe: str | None) -> str | None:
    """The status line's load words (markup), or None without a load configured."""
    if describe is None:
        return None
    colour = "$error" if "stopped" in describe else "$warning"
    words = clean(describe).replace("[", "\\[")  # a server's words never become markup
    return f"[{colour}]{words}[/]"
