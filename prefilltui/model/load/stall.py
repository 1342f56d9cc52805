"""What one prefill costs the decodes beside it: decode stall and excess per probe.

Pure math over token arrival times (``time.perf_counter`` seconds, the same clock as
``ProbeResult.t_send``); the load that produces them is ``measure/load/generator.py``.

For a probe whose prefill ran over the window [t0, t1] (request sent .. first token),
and each decode stream with a token at or before t0 and one at or after t1 (a stream
that starts or ends inside the window cannot say how long it froze):

- the stream's gaps are the times between its consecutive tokens;
- the *baseline gap* is the median gap, over every stream, that overlaps no probe
  window ("the median gap without a probe");
- the *stall* is the longest gap overlapping the window minus the baseline: how long
  everyone froze at once.  Chunked prefill caps it at about one chunk's time;
- the *excess* is the sum over the gaps overlapping the window of (gap - baseline):
  the extra decode time the prefill cost the stream in all.  Chunking does not shrink
  it: the same prompt tokens are computed, only spread over more steps;
- the stream's *tokens* are those that arrived inside the window, the step that
  brought the probe's first token included (up to half a quiet gap after it): one per
  engine step, so about the chunks plus the step the probe arrived in.

A probe's figures are the medians over the measured streams (continuous batching
steps every running decode together, so the streams agree to within the client's
read jitter).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Sequence

from prefilltui.model.loadspec import LoadKind
from prefilltui.model.fit import finite_median
from prefilltui.model.types import ProbeResult
from prefilltui.model.units import MISSING, duration

#: Fewest quiet gaps (gaps overlapping no probe) for a baseline; fewer: no stall.
MIN_QUIET_GAPS = 5
#: A stall at least this share of the excess means the whole prefill ran as one step
#: (no chunking); below it the freeze was capped (chunked prefill).
UNCHUNKED_SHARE = 0.6
#: Arrivals closer than this are one read of the client (two SSE events in one TCP
#: read, e.g. a token and its finish chunk): merged, so a gap is never a read artefact.
MERGE_S = 0.0005


@dataclass(frozen=True, slots=True)
class DecodeTrace:
    """One load request and its token arrivals.

    stream: the decode stream slot (0..N-1), or the request number of a rate load.
    t_send: when the request was sent; arrivals: each token's arrival, ascending
    (perf_counter seconds).  ended: the request finished (False: still streaming or
    cut by a stop).  prompt_tokens: its prompt length as sent (server count when the
    usage said).  first_token_at: the arrival of its first token (its own prefill
    ended), None before.
    """

    stream: int
    kind: LoadKind
    level: float
    t_send: float
    arrivals: tuple[float, ...] = ()
    prompt_tokens: int | None = None
    ended: bool = False
    ok: bool = True
    error: str | None = None

    @property
    def first_token_at(self) -> float | None:
        return self.arrivals[0] if self.arrivals else None

    def gaps(self) -> list[tuple[float, float]]:
        """(start, end) of each gap between consecutive tokens."""
        a = self.arrivals
        return [(a[i], a[i + 1]) for i in range(len(a) - 1)]


def merge_arrivals(times: Iterable[float], within: float = MERGE_S) -> list[float]:
    """Sorted arrivals with those closer than ``within`` s to the previous kept one
    dropped (one read of the client, see ``MERGE_S``)."""
    out: list[float] = []
    for t in sorted(times):
        if not out or t - out[-1] >= within:
            out.append(t)
    return out


def probe_window(r: ProbeResult) -> tuple[float, float] | None:
    """The window a probe's prefill ran in: request sent .. first token (the end of
    the stream for a failed probe); None without stamps."""
    if r.t_send is None:
        return None
    if r.ok and r.ttft_s is not None:
        return (r.t_send, r.t_send + r.ttft_s)
    return (r.t_send, r.t_end) if r.t_end is not None else None


def _overlaps(a: float, b: float, windows: Sequence[tuple[float, float]]) -> bool:
    return any(b > w0 and a < w1 for w0, w1 in windows)


def quiet_gaps(traces: Iterable[DecodeTrace], windows: Sequence[tuple[float, float]],
               *, since: float = -math.inf) -> list[float]:
    """Gaps (s) of the decode traces that start at or after ``since`` (the load's last
    level change) and overlap no probe window."""
    out: list[float] = []
    ws = list(windows)
    for tr in traces:
        if tr.kind != "decode":
            continue
        for a, b in tr.gaps():
            if a >= since and not _overlaps(a, b, ws):
                out.append(b - a)
    return out


def baseline_gap(traces: Iterable[DecodeTrace], windows: Sequence[tuple[float, float]],
                 *, since: float = -math.inf, min_gaps: int = MIN_QUIET_GAPS) -> float | None:
    """The median decode gap without a probe (s) since ``since``, or None with fewer
    than ``min_gaps`` quiet gaps."""
    g = quiet_gaps(traces, windows, since=since)
    return statistics.median(g) if len(g) >= min_gaps else None


@dataclass(frozen=True, slots=True)
class Stall:
    """One probe's effect on the decode streams (seconds; medians over streams).

    stall_s: longest gap overlapping the window minus ``gap_s``; excess_s: sum of
    (gap - gap_s) over the gaps overlapping the window; gap_s: the baseline gap;
    longest_s: the longest gap itself; tokens: decode tokens inside the window;
    streams: the streams measured (each spans the window).
    """

    stall_s: float
    excess_s: float
    gap_s: float
    longest_s: float
    tokens: int
    streams: int


def spans(tr: DecodeTrace, window: tuple[float, float]) -> bool:
    """True when the trace has a token at or before the window's start and one at or
    after its end (it can say how long it froze)."""
    t0, t1 = window
    a = tr.arrivals
    return tr.kind == "decode" and bool(a) and a[0] <= t0 and a[-1] >= t1


def waiting_for(traces: Iterable[DecodeTrace], window: tuple[float, float], need: int = 1
                ) -> int:
    """Decode streams that had a token by the window's start, are still streaming and
    have fewer than ``need`` tokens after its end (their gap over the window is still
    open, or the quiet gaps after it have not come yet)."""
    t0, t1 = window
    return sum(1 for tr in traces
               if tr.kind == "decode" and not tr.ended and tr.arrivals
               and tr.arrivals[0] <= t0
               and sum(1 for t in tr.arrivals[-need:] if t >= t1) < need)


def window_stall(traces: Iterable[DecodeTrace], window: tuple[float, float],
                 gap_s: float | None) -> Stall | None:
    """The stall and excess of a probe window (see the module docstring); None without
    a baseline gap or a stream spanning the window."""
    if gap_s is None or not math.isfinite(gap_s):
        return None
    t0, t1 = window
    per: list[tuple[float, float, float, int]] = []
    for tr in traces:
        if not spans(tr, window):
            continue
        over = [b - a for a, b in tr.gaps() if b > t0 and a < t1]
        if not over:
            continue
        longest = max(over)
        excess = sum(g - gap_s for g in over)
        # the step that brought the probe's first token counts, whichever connection
        # the client read first: up to half a quiet gap after the window's end
        tokens = sum(1 for t in tr.arrivals if t0 < t <= t1 + gap_s / 2)
        per.append((longest - gap_s, excess, longest, tokens))
    if not per:
        return None
    med = lambda i: statistics.median(p[i] for p in per)  # noqa: E731
    return Stall(stall_s=med(0), excess_s=med(1), gap_s=gap_s, longest_s=med(2),
                 tokens=int(round(med(3))), streams=len(per))


def apply_stall(r: ProbeResult, s: Stall | None) -> None:
    """Copy a Stall onto the probe's typed fields (in place; None leaves them unset)."""
    if s is None:
        return
    r.decode_stall_s, r.decode_excess_s, r.decode_gap_s = s.stall_s, s.excess_s, s.gap_s
    r.decode_tokens, r.decode_streams = s.tokens, s.streams


def ahead_tokens(traces: Iterable[DecodeTrace], t_send: float) -> int:
    """Prompt tokens of load requests sent before ``t_send`` whose first token had not
    come by then (still queued or in prefill ahead of a request sent at ``t_send``)."""
    n = 0
    for tr in traces:
        first = tr.first_token_at
        if tr.t_send < t_send and (first is None or first > t_send) and tr.ok:
            if tr.ended and first is None:
                continue  # ended without a token: not ahead of anything
            n += tr.prompt_tokens or 0
    return n


def itl_quantiles(traces: Iterable[DecodeTrace], between: tuple[float, float] | None = None
                  ) -> tuple[float | None, float | None, int]:
    """(p50, p99, n) of every decode gap in ``traces`` (s) that ends within
    ``between`` (a load level's time span; None: all): the inter-token latency the
    decodes saw, probes' windows included (the p99 is where stalls show)."""
    lo, hi = between if between is not None else (-math.inf, math.inf)
    g = sorted(b - a for tr in traces if tr.kind == "decode" for a, b in tr.gaps()
               if lo <= b <= hi)
    if not g:
        return None, None, 0
    return _q(g, 0.5), _q(g, 0.99), len(g)


def _q(sorted_vals: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of sorted values (numpy's default method)."""
    if len(sorted_vals) == 1:
        return sorted_vals[0]
    pos = q * (len(sorted_vals) - 1)
    i = int(math.floor(pos))
    j = min(i + 1, len(sorted_vals) - 1)
    return sorted_vals[i] + (sorted_vals[j] - sorted_vals[i]) * (pos - i)


def gap_series(traces: Iterable[DecodeTrace], since: float = -math.inf
               ) -> list[tuple[float, float]]:
    """(arrival, gap before it) of every decode token after ``since``, by time: the
    inter-token latency over time (the TUI's decode row)."""
    out = [(b, b - a) for tr in traces if tr.kind == "decode" for a, b in tr.gaps() if b >= since]
    out.sort()
    return out


# ------------------------------------------------------------------ by prompt length


@dataclass(frozen=True, slots=True)
class StallRow:
    """Stall and excess at one requested prompt length (medians over its probes)."""

    requested_tokens: int
    prompt_tokens: int | None
    n: int
    ttft_s: float | None
    stall_s: float | None
    excess_s: float | None
    decode_tokens: int | None
    server_itl_max_s: float | None


@dataclass(frozen=True, slots=True)
class StallSummary:
    """Stall and excess against prompt tokens, and what they mean in one sentence.

    chunked: True when the longest prompt's stall is well below its excess (the
    freeze was capped), False when the stall is most of it, None without data.
    chunk_tokens: the chunk size the sentence names (``chunk_source`` "server": the
    server's own figure; "estimate": prompt tokens x stall / excess).
    """

    rows: tuple[StallRow, ...]
    gap_s: float | None
    chunked: bool | None
    chunk_tokens: int | None
    chunk_source: str | None
    sentence: str

    def to_json(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def _round_chunk(c: float) -> int:
    """A chunk estimate to two significant figures (it is an estimate, not a count)."""
    if c <= 0:
        return 0
    mag = 10 ** max(0, int(math.floor(math.log10(c))) - 1)
    return int(round(c / mag) * mag)


def stall_summary(results: Iterable[ProbeResult], *, chunk_tokens: int | None = None
                  ) -> StallSummary | None:
    """The per-length stall table of probes that carry a stall, and its sentence;
    None when no probe does.  ``chunk_tokens``: the server's chunk budget when known
    (vLLM ``--max-num-batched-tokens``, llama.cpp ``n_batch``)."""
    by: dict[int, list[ProbeResult]] = {}
    for r in results:
        if r.ok and not r.warmup and r.decode_stall_s is not None:
            by.setdefault(r.requested_tokens, []).append(r)
    if not by:
        return None
    rows = []
    for n in sorted(by):
        rs = by[n]
        pt = finite_median(r.prompt_tokens for r in rs)
        dt = finite_median(r.decode_tokens for r in rs)
        rows.append(StallRow(n, None if pt is None else int(pt), len(rs),
                             finite_median(r.ttft_s for r in rs), finite_median(r.decode_stall_s for r in rs),
                             finite_median(r.decode_excess_s for r in rs),
                             None if dt is None else int(round(dt)),
                             finite_median(r.server_itl_max_s for r in rs)))
    gap = finite_median(r.decode_gap_s for rs in by.values() for r in rs)
    top = rows[-1]
    chunked: bool | None = None
    source = None
    chunk = None
    if top.stall_s is not None and top.excess_s is not None and top.excess_s > 0:
        chunked = top.stall_s < UNCHUNKED_SHARE * top.excess_s
    n_top = top.prompt_tokens or top.requested_tokens
    if chunked:
        if chunk_tokens:
            chunk, source = int(chunk_tokens), "server"
        elif top.excess_s:
            chunk, source = _round_chunk(n_top * top.stall_s / top.excess_s), "estimate"
    return StallSummary(tuple(rows), gap, chunked, chunk, source,
                        stall_sentence(rows, chunked, chunk, source))


def stall_sentence(rows: Sequence[StallRow], chunked: bool | None, chunk: int | None,
                   source: str | None) -> str:
    """"chunked prefill: decode freezes at most 0.43 s (≈ 256-token chunks); a
    2,048-token prompt still costs each decode 2.5 s in all", or "no chunking: a
    2,048-token prompt freezes every decode for 24.5 s"."""
    if not rows or chunked is None:
        return "decode stall: not enough data (no decode stream spanned a probe's window)"
    top = rows[-1]
    n = top.prompt_tokens or top.requested_tokens
    if not chunked:
        return (f"no chunking: a {n:,}-token prompt freezes every decode for "
                f"{_secs(top.stall_s)} (TTFT {_secs(top.ttft_s)})")
    worst = max((r.stall_s for r in rows if r.stall_s is not None), default=top.stall_s)
    size = ""
    if chunk:
        size = f" (≈ {chunk:,}-token chunks{', the server says' if source == 'server' else ''})"
    return (f"chunked prefill: decode freezes at most {_secs(worst)}{size}; a {n:,}-token "
            f"prompt still costs each decode {_secs(top.excess_s)} in all")


def _secs(s: float | None) -> str:
    """Seconds for a sentence: "0.43 s", "24.5 s", "12 ms"."""
    if s is None or not math.isfinite(s):
        return MISSING
    if abs(s) < 0.1:
        return duration(s)
    return f"{s:.2f} s" if abs(s) < 10 else f"{s:.1f} s"
