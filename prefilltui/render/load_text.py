"""Text of the background-load part of a summary: the decode stall against prompt
tokens, the load-level table and the "why is TTFT high?" verdict (ms on screen)."""

from __future__ import annotations

from prefilltui.model.load import LevelTable, share
from prefilltui.model.load import LoadSummary
from prefilltui.model.load import StallSummary
from prefilltui.model import units
from prefilltui.model.units import MISSING
from prefilltui.model.diagnosis import WORDS, TtftVerdict, expected_words


def format_stall(s: StallSummary | None, level: float | None = None) -> list[str]:
    """Text lines: the per-length table (ms) and the sentence; ``level``: the load
    level the table is of, named in its title."""
    if s is None:
        return []
    ms = lambda v: units.ms(v, 0, unit=False)  # noqa: E731
    at = f" at load level {level:g}" if level is not None else ""
    out = [f"decode stall per probe{at} (baseline gap {ms(s.gap_s)} ms; medians)",
           f"{'requested':>9} {'counted':>8} {'n':>3} {'TTFT':>9} {'stall':>9} {'excess':>9} "
           f"{'tokens':>6} {'server ITL max':>15}   (ms)"]
    for r in s.rows:
        out.append(f"{r.requested_tokens:>9} {r.prompt_tokens or '-':>8} {r.n:>3} "
                   f"{ms(r.ttft_s):>9} {ms(r.stall_s):>9} {ms(r.excess_s):>9} "
                   f"{'-' if r.decode_tokens is None else r.decode_tokens:>6} "
                   f"{('≤ ' + ms(r.server_itl_max_s)) if r.server_itl_max_s is not None else '-':>15}")
    out.append(s.sentence)
    return out


def format_levels(t: LevelTable | None) -> list[str]:
    """The level table as text (ms on screen)."""
    if t is None:
        return []
    c = lambda s: f"{'-':>8}" if s is None else f"{units.ms(s, 0, unit=False):>8}"  # noqa: E731
    head = "streams" if t.kind != "rate" else "req/s"
    out = [f"TTFT against offered load ({'decode streams' if t.kind != 'rate' else 'requests/s'};"
           " medians; stall and excess at the longest prompt)",
           f"{head:>7} {'n':>4} {'TTFT':>8} {'queue':>8} {'prefill':>8} {'overhead':>8} "
           f"{'wait':>8} {'queue%':>6} {'fit tok/s':>15} {'ITL p50':>8} {'ITL p99':>8} "
           f"{'stall':>8} {'excess':>8}   (ms)"]
    for r in t.rows:
        sh = share(r)
        pct = "-" if sh is None else f"{sh:.0%}"
        tp = "-" if r.throughput_tok_s is None else f"{r.throughput_tok_s:,.0f}"
        lo, hi = r.throughput_ci
        if r.throughput_tok_s and lo is not None and hi is not None:
            tp += f" ±{(hi - lo) / 2 / r.throughput_tok_s:.0%}"
        elif r.throughput_tok_s:
            tp += " ±inf"
        own = r.queue_s if r.queue_n * 2 >= max(1, r.probes) else None  # the probes' own
        out.append(f"{r.level:>7g} {r.probes:>4} {c(r.ttft_p50_s)} {c(own)} "
                   f"{c(r.prefill_s)} {c(r.overhead_s)} {c(r.wait_s)} {pct:>6} {tp:>15} "
                   f"{c(r.itl_p50_s)} {c(r.itl_p99_s)} {c(r.stall_s)} {c(r.excess_s)}")
    out += [t.knee_line, "wait = TTFT above the idle fit at the probe's length; queue% = "
            "the server's queue time / TTFT where it is the probe's own, else wait / TTFT"]
    return out


def format_verdict(v: TtftVerdict | None) -> list[str]:
    """"why is TTFT high? queueing: ...", then "  also ...: ..." for the other causes,
    only when TTFT is above its expectation beyond the uncertainty (``v.above``) or a
    cause was named without an expectation; else the expected TTFT at each length
    ("TTFT as expected (idle fit): 128 tok 70 ± 4 ms, ..., "4 tok not pinned (± 12,639 ms)""), not an alarm."""
    if v is None:
        return [f"why is TTFT high? {MISSING}"]
    if v.cause == "none" and not v.above and v.expected:
        return expected_lines(v)
    who = "users' " if v.whose == "users" else ""
    return [f"why is {who}TTFT high? {v.headline}"] + [
        f"  also {WORDS[e.cause]}: {e.text}" for e in v.evidence[1:]]


def expected_lines(v: TtftVerdict) -> list[str]:
    """What TTFT is and should be when nothing stands out: the verdict's words, then
    the expected TTFT and its uncertainty at each probed length (ms on screen)."""
    head = f"TTFT: {v.headline}"
    idle = " on an idle server (no users' requests)" if v.idle else ""
    rows = ", ".join(expected_words(n, e, m) for n, e, m in v.expected)
    return [head, f"  expected TTFT{idle}: {rows}"]


def format_load(load: LoadSummary | None) -> list[str]:
    """The load's line, the stall table with its sentence and the level table."""
    if load is None:
        return []
    out: list[str] = [f"note: the fit above is {load.under}"] if load.under else []
    f = load.facts
    if f is not None:
        state = f"; {f.state}" if f.state else ""
        out.append(f"background load: {f.spec.label()} ({f.requests} requests, {f.tokens:,} "
                   f"tokens{state}" + (f": {f.fault}" if f.fault else "") + ")")
    out += format_stall(load.stall, load.stall_level)
    if load.levels is not None:
        out += [""] + format_levels(load.levels)
    return out


def load_block(load: LoadSummary | None, verdict: TtftVerdict | None) -> str:
    """The summary's closing block: the load's tables, then the verdict."""
    lines = format_load(load)
    return "\n".join(lines + ([""] if lines else []) + format_verdict(verdict))
