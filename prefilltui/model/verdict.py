""""Why is TTFT high right now?": one verdict over the recent probes, each cause
quoting the numbers behind it.  Pure; shared by the sweep summary, the TUI, the
exporter and (later) the fleet view.

Causes, each with its test and the seconds of TTFT it explains (the verdict is the
cause that explains most; the others that hold are listed after it):

- ``queueing``: the server's queue time is at least ``SHARE`` of TTFT (and 5 ms), or
  requests are waiting; explains the median queue time.
- ``head_of_line``: a long prompt was in prefill ahead of the probe (the background
  load's prompts still in prefill when it was sent, or the decodes froze longer than
  the probe's own prefill should take); explains TTFT above the expected TTFT.
- ``slow_prefill``: prefill is slower than the expectation (the idle fit or a baseline
  run: server prefill or the fit's throughput at most ``SLOW`` of it), or the MFU
  verdict says "wrong"; explains the extra prefill time.
- ``prefix_cache``: probes sent after a prefix that should be cached (``--depth``)
  got no cached tokens from the server; explains the prefix's prefill time.
- ``overhead``: client/network/TLS/gateway time (TTFT - the server's own time) is at
  least ``SHARE`` of TTFT (and 20 ms); explains it.

"not_enough_data" (fewer than 3 recent probes, or no split and no expectation) and
"none" (nothing stands out) are valid answers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Literal, Sequence

from prefilltui.model.breakdown import probe_parts
from prefilltui.model.fit import LinearFit
from prefilltui.model.percentiles import finite_median
from prefilltui.model.types import ProbeResult
from prefilltui.model.units import duration

Cause = Literal["queueing", "head_of_line", "slow_prefill", "prefix_cache", "overhead",
                "none", "not_enough_data"]
#: Every verdict, in the order the exporter's state set lists them.
CAUSES: tuple[Cause, ...] = ("queueing", "head_of_line", "slow_prefill", "prefix_cache",
                             "overhead", "none", "not_enough_data")
#: Words for each cause (the headline's first words).
WORDS = {"queueing": "queueing", "head_of_line": "head-of-line blocking",
         "slow_prefill": "slow prefill", "prefix_cache": "prefix cache not used",
         "overhead": "overhead (network/TLS/gateway)", "none": "nothing stands out",
         "not_enough_data": "not enough data"}

#: A part of TTFT at least this share of it is a cause.
SHARE = 0.25
#: Prefill at most this fraction of the expected throughput (1/SLOW x the time) is slow.
SLOW = 0.75
#: Recent probes the verdict reads, and the fewest it needs.
RECENT = 20
MIN_PROBES = 3
#: Least absolute size of a cause (s): below it a share is noise on a fast server.
MIN_QUEUE_S = 0.005
MIN_OVERHEAD_S = 0.020


@dataclass(frozen=True, slots=True)
class Expectation:
    """What TTFT should be, to hold the recent probes against.

    fit: TTFT = a + b*n of the server at its best (the idle level, or ``--baseline``);
    source: where it comes from ("idle fit", "baseline run ..."); mfu / mfu_level: the
    current MFU and its roofline verdict level (``analysis.assess``), when known.
    """

    fit: LinearFit | None = None
    source: str = ""
    mfu: float | None = None
    mfu_level: str | None = None


@dataclass(frozen=True, slots=True)
class Evidence:
    """One cause that holds: the seconds of TTFT it explains and its numbers in words."""

    cause: Cause
    seconds: float
    text: str


@dataclass(frozen=True, slots=True)
class TtftVerdict:
    """The answer: ``cause`` (the strongest), ``headline`` (its words and evidence),
    every cause that holds strongest first (``evidence``), the median TTFT and the
    probes read."""

    cause: Cause
    headline: str
    evidence: tuple[Evidence, ...]
    ttft_s: float | None
    probes: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _med(vals: Iterable[float | int | None]) -> float | None:
    """``finite_median`` as a float."""
    m = finite_median(vals)
    return None if m is None else float(m)


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _expected_ttft(e: Expectation | None, n: int | None) -> float | None:
    if e is None or e.fit is None or n is None:
        return None
    return e.fit.intercept_s + e.fit.slope_s_per_token * n


def ttft_verdict(results: Sequence[ProbeResult], expect: Expectation | None = None, *,
                 recent: int = RECENT) -> TtftVerdict:
    """The verdict over the last ``recent`` ok, non-warm-up probes (see the module
    docstring).  Never raises for bad data."""
    ok = [r for r in results if r.ok and not r.warmup and r.ttft_s is not None][-recent:]
    if len(ok) < MIN_PROBES:
        return TtftVerdict("not_enough_data", f"not enough data: {len(ok)} recent probe(s), "
                       f"{MIN_PROBES} needed", (), _med(r.ttft_s for r in ok), len(ok))
    parts = [probe_parts(r) for r in ok]
    ttft = _med(r.ttft_s for r in ok) or 0.0
    found = [e for e in (_queueing(ok, parts, ttft, expect), _head_of_line(ok, expect),
                         _slow_prefill(ok, parts, expect), _prefix_cache(ok, expect),
                         _overhead(ok, parts, ttft)) if e is not None]
    found.sort(key=lambda e: e.seconds, reverse=True)
    if found:
        top = found[0]
        return TtftVerdict(top.cause, f"{WORDS[top.cause]}: {top.text}", tuple(found), ttft, len(ok))
    split = any(getattr(p, k) is not None for p in parts for k in ("queue_s", "prefill_s", "overhead_s"))
    if not split and (expect is None or expect.fit is None):
        return TtftVerdict("not_enough_data",
                       f"not enough data: TTFT {duration(ttft)}, but the server reports no "
                       "queue or prefill time (/metrics, llama.cpp timings) and there is no "
                       "idle fit or --baseline to hold it against", (), ttft, len(ok))
    bits = ", ".join(f"{k.removesuffix('_s')} {duration(v)}" for k in
                     ("queue_s", "prefill_s", "overhead_s")
                     if (v := _med(getattr(p, k) for p in parts)) is not None)
    exp = _med(_expected_ttft(expect, r.tokens) for r in ok)
    vs = f"; {duration(exp)} expected ({expect.source})" if exp is not None and expect else ""
    # above the expectation by as much as slow prefill needs, yet no cause's test held
    # (the server's split, if any, is in proportion): say so, not "nothing stands out"
    high = exp is not None and exp > 0 and ttft * SLOW > exp
    head = (f"no single cause found, TTFT {ttft / exp:.1f}x the expected" if high
            else "nothing stands out")
    return TtftVerdict("none", f"{head}: TTFT {duration(ttft)}"
                   + (f" = {bits}" if bits else "") + vs, (), ttft, len(ok))


def _queueing(ok, parts, ttft: float, expect: Expectation | None) -> Evidence | None:
    q = _med(p.queue_s for p in parts)
    wait = _med(r.server_waiting for r in ok)
    run = _med(r.server_running for r in ok)
    load = ""
    if wait is not None or run is not None:
        load = f", {wait or 0:g} waiting, {run or 0:g} running"
    if q is not None and q >= max(SHARE * ttft, MIN_QUEUE_S):
        src = {p.queue_source for p in parts if p.queue_s is not None}
        est = " (estimated: TTFT - prefill - idle overhead)" if src <= {"estimated", "idle"} else ""
        return Evidence("queueing", q, f"queue {duration(q)} of TTFT {duration(ttft)} "
                        f"({_pct(q / ttft)}){est}{load}")
    if wait is not None and wait >= 1:
        # requests wait at the server but its queue time is not this probe's own (several
        # requests finished in the window): what TTFT has beyond the expectation
        extra = _med(max(0.0, r.ttft_s - e) for r in ok
                     if (e := _expected_ttft(expect, r.tokens)) is not None)
        if extra is not None:
            if extra < SHARE * ttft:
                return None
            return Evidence("queueing", extra, f"{wait:g} requests waiting at the server; TTFT "
                            f"{duration(ttft)}, {duration(extra)} above the {expect.source} "
                            f"(the server's queue time is not attributable to one request)"
                            + load.replace(f", {wait or 0:g} waiting", ""))
        return Evidence("queueing", 0.0, f"{wait:g} requests waiting at the server (no queue "
                        f"time of this probe's own: its share of TTFT {duration(ttft)} is "
                        f"unknown){load}")
    return None


def _head_of_line(ok, expect: Expectation | None) -> Evidence | None:
    if (_med(r.server_waiting for r in ok) or 0) >= 1:
        return None  # requests wait in line: queueing (above), not one prompt ahead
    hits = []
    for r in ok:
        exp = _expected_ttft(expect, r.tokens)
        # the probe's own prefill: the server's figure, else the expectation's
        own = r.server_prefill_s
        if own is None and exp is not None and expect is not None:
            own = exp - expect.fit.intercept_s
        ahead = r.load_ahead_tokens or 0
        froze = (r.decode_stall_s is not None and own is not None
                 and r.decode_stall_s > 1.5 * own + 2 * (r.decode_gap_s or 0.0) + 0.01)
        if ahead > (r.tokens or 0) or (ahead > 0 and exp is not None and r.ttft_s > 1.5 * exp):
            # a prompt ahead: TTFT above the expectation is its doing
            hits.append((r, exp, ahead, max(0.0, r.ttft_s - exp) if exp is not None else None))
        elif froze:
            # the decodes froze longer than this prefill: the rest was another prefill
            hits.append((r, exp, 0, r.decode_stall_s - own))
    if len(hits) < max(1, len(ok) // 3):
        return None
    extra = _med(h[3] for h in hits)
    ttft = _med(h[0].ttft_s for h in hits)
    ahead = _med(h[2] for h in hits if h[2])
    stall = _med(h[0].decode_stall_s for h in hits)
    what = (f"a median {ahead:,.0f} prompt tokens in prefill ahead of the probe" if ahead
            else f"decodes froze {duration(stall)}, longer than the probe's own prefill")
    exp = _med(h[1] for h in hits)
    vs = f" vs {duration(exp)} expected ({expect.source})" if exp is not None and expect else ""
    if extra is None:  # no expectation: the stall or the ahead tokens alone
        extra = stall or 0.0
    if ttft and extra < SHARE * ttft:
        return None
    return Evidence("head_of_line", extra, f"{what} in {len(hits)} of {len(ok)} probes; "
                    f"TTFT {duration(ttft)}{vs}")


def _slow_prefill(ok, parts, expect: Expectation | None) -> Evidence | None:
    if expect is not None and expect.mfu_level == "wrong" and expect.mfu is not None:
        pre = _med(p.prefill_s for p in parts) or _med(r.ttft_s for r in ok) or 0.0
        return Evidence("slow_prefill", pre * 0.5, f"MFU {expect.mfu:.1%} of peak: far below "
                        "what the hardware does (roofline verdict)")
    if expect is None or expect.fit is None or expect.fit.slope_s_per_token <= 0:
        return None
    b = expect.fit.slope_s_per_token
    # probes sent after a prefix (--depth) prefill it too when it is not cached: the
    # prefix-cache cause speaks for them
    keep = [i for i, r in enumerate(ok) if not _after_prefix(r)]
    ok, parts = [ok[i] for i in keep], [parts[i] for i in keep]
    if len(ok) < MIN_PROBES:
        return None
    rows = [(p.prefill_s, r.tokens) for p, r in zip(parts, ok)
            if p.prefill_s is not None and r.tokens]
    if len(rows) >= MIN_PROBES:  # the server's own prefill time against the expected
        # expected prefill: the expected TTFT less the overhead outside the server (the
        # fixed cost is partly the server's own), never below b x n
        over = _med(p.overhead_s for p in parts) or 0.0
        exp = [(pre, max(b * n, expect.fit.intercept_s + b * n - over)) for pre, n in rows]
        ratio = _med(pre / e for pre, e in exp if e > 0)
        extra = _med(pre - e for pre, e in exp)
        what = "server prefill"
    else:  # TTFT above the expected line, per probe: only when nothing else explains it
        waiting = _med(r.server_waiting for r in ok)
        if (waiting or 0) >= 1 or any(r.load_ahead_tokens for r in ok):
            return None  # TTFT holds queueing or a prompt ahead: not the prefill's speed
        pts = [(r.ttft_s, _expected_ttft(expect, r.tokens), r.tokens) for r in ok]
        ratio = _med((t - expect.fit.intercept_s) / (e - expect.fit.intercept_s)
                     for t, e, _ in pts if e is not None and e > expect.fit.intercept_s)
        extra = _med(t - e for t, e, _ in pts if e is not None)
        what = ("TTFT minus the fixed cost" if waiting is not None
                else "TTFT minus the fixed cost (no server metrics: queueing not excluded)")
    if ratio is None or extra is None or ratio < 1 / SLOW:
        return None
    tps = 1.0 / b
    return Evidence("slow_prefill", extra, f"{what} {ratio:.2f}x the expected ({tps:,.0f} "
                    f"prompt tok/s from the {expect.source}; now ≈ {tps / ratio:,.0f} tok/s)")


def _after_prefix(r: ProbeResult) -> bool:
    """A ``--depth`` probe sent after a prefix that should be cached."""
    return r.depth is not None and r.depth.depth > 0 and r.depth.role != "prefix"


def _prefix_cache(ok, expect: Expectation | None) -> Evidence | None:
    after = [r for r in ok if _after_prefix(r)]
    miss = [r for r in after if not r.cached_tokens]
    if not after or len(miss) * 2 < len(after):
        return None
    depth = int(_med(r.depth.depth for r in miss) or 0)
    b = expect.fit.slope_s_per_token if expect is not None and expect.fit is not None else None
    saved = depth * b if b else 0.0
    cost = f" (≈ {duration(saved)} of prefill it should have saved)" if b else ""
    return Evidence("prefix_cache", saved, f"{len(miss)} of {len(after)} probes sent after a "
                    f"{depth:,}-token prefix got 0 cached tokens from the server{cost}")


def _overhead(ok, parts, ttft: float) -> Evidence | None:
    o = _med(p.overhead_s for p in parts)
    if o is None or o < max(SHARE * ttft, MIN_OVERHEAD_S):
        return None
    conn = _med(r.connect_s for r in ok)
    extra = f"; new connections {duration(conn)} each" if conn is not None else ""
    return Evidence("overhead", o, f"TTFT - server time {duration(o)} of TTFT {duration(ttft)} "
                    f"({_pct(o / ttft)}): network, TLS or a gateway{extra}")


