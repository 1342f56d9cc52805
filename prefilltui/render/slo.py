"""Each TTFT objective in words: the TUI's one line (``slo_line_forms``, longest form
first) and the text summary's block (``slo_lines``).

Milliseconds and seconds as people read a threshold ("2 s", "500 ms"); token counts
in thousands ("5.9k").  n_max is a prediction of the fitted line (its percentile offset
an estimate from the fit's noise model): marked "est." (long forms) or "~"; beyond the
longest probe it says so.  The probes' attainment is labelled as the probes', never as
the users'.
"""

from __future__ import annotations

from prefilltui.model.slo import (N_SEARCH_MAX, Attainment, PromptLimit, SloStatus,
                                  merged_attainment, replicas_worst_first)
from prefilltui.model.units import MISSING, ms


def tokens_k(n: int | None) -> str:
    """850 -> "850", 5,912 -> "5.9k", 123,456 -> "123k"; None -> N/A."""
    if n is None:
        return MISSING
    if n < 1000:
        return f"{n:,}"
    if n < 100_000:
        return f"{n / 1e3:.1f}k"
    if n < 1_000_000:
        return f"{n / 1e3:.0f}k"
    return f"{n / 1e6:.1f}M"


def seconds_text(s: float | None) -> str:
    """A TTFT as people read one: "1.4 s" from 1 s up, "480 ms" below; N/A for None."""
    if s is None:
        return MISSING
    if s < 1:
        return ms(s, 0)  # "480 ms": grouped by the one formatter
    return f"{s:.2g} s" if s < 10 else f"{s:.3g} s"


def _pct(v: float | None, digits: int = 1) -> str:
    return MISSING if v is None else f"{v * 100:.{digits}f} %"


def _limit(lim: PromptLimit | None, *, long: bool) -> str:
    """The n_max clause: "prompts ≤ 5.9k tokens meet it now, est. (95 % 5.6k–6.2k)"."""
    if lim is None:
        return "n_max needs a resolved fit" if long else "n_max: no fit yet"
    when = "now" if lim.line == "now" else "at idle"
    if lim.unbounded:
        return f"every prompt up to {tokens_k(N_SEARCH_MAX)} tokens meets it {when}"
    if lim.tokens == 0:
        return (f"no prompt meets it {when} (the fixed cost alone is above)" if long
                else "no prompt meets it")
    lo, hi = lim.ci
    ci = f"{tokens_k(lo)}–{tokens_k(hi) if hi is not None else '∞'}"
    beyond = ", beyond the probes" if lim.extrapolated else ""
    if long:
        return f"prompts ≤ {tokens_k(lim.tokens)} tokens meet it {when}, est.{beyond} (95 % {ci})"
    return f"≤ ~{tokens_k(lim.tokens)} tok {when} ({ci})"


def _window(s: float | None) -> str:
    if s is None or s <= 0:
        return ""
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def _users(st: SloStatus, *, long: bool) -> str:
    u = st.users
    if u is None or not u.total:
        p = st.probes
        if p is None or not p.total:
            return ""
        return (f"probes {_pct(p.share)} within (prefilltui's, not the users')" if long
                else f"probes {_pct(p.share)} in")
    if u.source == "histogram":
        lo, hi = u.share_bounds
        if u.exact:
            within = _pct(lo)
        else:
            within = f"{lo * 100:.1f}–{hi * 100:.1f} %"
        if long:
            b = u.bounds_s
            at = (f" (at the buckets {seconds_text(b[0])} / "
                  f"{seconds_text(b[1]) if b[1] is not None else '+Inf'})" if b else "")
            return f"server's TTFT histogram {within} within{at}, probes counted in"
        return f"hist {within} in"
    pname = f"p{st.objective.percentile:g}"
    left = u.budget_left
    win = _window(u.window_s)
    if long:
        return (f"users' {pname} {seconds_text(st.users_ttft_s)}, {_pct(u.share)} within, "
                f"{_pct(left, 0)} of the budget left" + (f" over {win}" if win else ""))
    return f"users {_pct(u.share)} in, {_pct(left, 0)} budget left"


def _burn(st: SloStatus, *, long: bool) -> str:
    b = st.burn
    if b is None or b.burning is None:
        return ""
    rate = b.rate(3600.0 if b.burning == "fast" else 21600.0)
    if long:
        return f"budget burning {rate:.0f}× ({b.burning}: the page rule fires)"
    return f"burn {b.burning}"


def slo_line_forms(st: SloStatus) -> tuple[str, ...]:
    """The objective in one line, longest form first (the TUI shows the first that
    fits): "SLO 2 s p99: prompts ≤ 5.9k tokens meet it now, est. (95 % 5.6k–6.2k);
    users' p99 1.4 s, 99.2 % within, 43 % of the budget left over 25 min"."""
    head = f"SLO {st.objective.label}"
    forms = []
    for long in (True, False):
        parts = [p for p in (_limit(st.now or st.idle, long=long), _users(st, long=long),
                             _burn(st, long=long)) if p]
        forms.append(f"{head}: " + "; ".join(parts))
    short = [p for p in (_burn(st, long=False),
                         f"≤ ~{tokens_k(st.now.tokens)} tok" if st.now and st.now.tokens is not None
                         else "", _users(st, long=False).split(",")[0]) if p]
    forms.append(f"{head}: " + ", ".join(short) if short else head)
    return tuple(forms)


def _attainment(a: Attainment, who: str) -> str:
    ci = a.ci
    ci_text = f" (95 % {_pct(ci[0])}–{_pct(ci[1])})" if ci else ""
    bound = ""
    if a.bounds_s is not None and not a.exact:
        lo, hi = a.bounds_s
        bound = (f", between the bucket bounds {seconds_text(lo)} and "
                 f"{seconds_text(hi) if hi is not None else '+Inf'}")
    return (f"  {who}: {int(a.total):,} requests, {_pct(a.share)} within{ci_text}{bound}; "
            f"budget left {_pct(a.budget_left, 0)}")


def slo_lines(statuses: tuple[SloStatus, ...]) -> list[str]:
    """The summary's block: per objective its source, n_max at the idle line and now,
    the users' attainment (spans) and the probes' (labelled), the share of users'
    prompts longer than n_max, the burn."""
    out: list[str] = []
    for st in statuses:
        o = st.objective
        out.append(f"SLO {o.label} (TTFT ≤ {seconds_text(o.threshold_s)} for "
                   f"{o.percentile:g} % of requests; budget {o.budget * 100:.2g} %)"
                   + (f" [{o.source}]" if o.source and o.source not in ("--slo", "config") else ""))
        for lim, name in ((st.idle, "held idle line"), (st.now, "line now")):
            if lim is None:
                out.append(f"  n_max, {name}: {MISSING} (no resolved fit)")
                continue
            extra = f", queue {seconds_text(lim.queue_s)} added" if lim.queue_s else ""
            out.append(f"  n_max, {name}: {_limit(lim, long=True)}; "
                       f"{o.percentile:g}th-percentile offset {seconds_text(lim.offset_s)} "
                       f"(estimate: the fit's noise model){extra}")
        if st.users is not None:
            out.append(_attainment(st.users, "users (spans, exact)" if st.users.source == "spans"
                                   else "all requests (the server's TTFT histogram)"))
            if st.users_ttft_s is not None:
                out.append(f"  users' p{o.percentile:g} TTFT {seconds_text(st.users_ttft_s)}")
            if st.users_over is not None:
                out.append(f"  {_pct(st.users_over)} of the users' prompts are longer than "
                           "the SLO allows at this throughput")
        if st.probes is not None:
            out.append(_attainment(st.probes, "probes (prefilltui's own, the sweep's lengths)"))
        b = st.burn
        if b is not None:
            rates = ", ".join(f"{_window(w.window_s)} {w.rate:.1f}×" if w.rate is not None
                              else f"{_window(w.window_s)} {MISSING}" for w in b.windows)
            out.append(f"  burn rate: {rates}"
                       + (f"; {b.burning} burn (page)" if b.burning else "; not burning"))
    return out


def detail_lines(statuses) -> list[str]:
    """The TUI details' lines per objective: its source when a preset, n_max at the
    idle line beside now's, the users above n_max ("3.0 % of the users' prompts are
    longer than SLO 2 s p99 allows at this throughput")."""
    out = []
    for st in statuses:
        o = st.objective
        if o.source and o.source not in ("--slo", "config"):
            out.append(f"SLO {o.label}: {o.source}")
        if st.idle is not None and st.idle.tokens is not None and st.now is not None:
            out.append(f"SLO {o.label}: n_max {tokens_k(st.now.tokens)} now, "
                       f"{tokens_k(st.idle.tokens)} at the idle line (est.)")
        if st.users_over is not None:
            out.append(f"{_pct(st.users_over)} of the users' prompts are longer than SLO "
                       f"{o.label} allows at this throughput")
    return out


def worst_first(statuses) -> list[SloStatus]:
    """The objectives worst first: burning fast, then slow, then by the budget left
    (the users', else the probes'; none known last), then by the shorter n_max."""
    def key(st: SloStatus):
        burn = st.burn.burning if st.burn is not None else None
        a = st.users if st.users is not None and st.users.total else st.probes
        left = a.budget_left if a is not None and a.total else None
        n = st.now.tokens if st.now is not None and st.now.tokens is not None else 1 << 62
        return ({"fast": 0, "slow": 1}.get(burn or "", 2),
                left if left is not None else float("inf"), n)
    return sorted(statuses, key=key)


def fleet_lines(replicas: list[tuple[str, tuple[SloStatus, ...]]]) -> list[str]:
    """Per objective (by key, in the order first seen): each replica's attainment and
    budget, worst first (the users' where their spans are known, else the probes',
    labelled), then the fleet's from the merged counts (``model.slo.merged_attainment``:
    never an average of shares)."""
    keys: dict[str, SloStatus] = {}
    for _label, sts in replicas:
        for st in sts:
            keys.setdefault(st.objective.key, st)
    out: list[str] = []
    for key, first in keys.items():
        o = first.objective
        rows = []
        for label, sts in replicas:
            st = next((x for x in sts if x.objective.key == key), None)
            a = None
            if st is not None:
                a = st.users if st.users is not None and st.users.total else st.probes
            rows.append((label, a))
        out.append(f"SLO {o.label}, each replica worst first:")
        for label, a in replicas_worst_first(rows):
            if a is None or not a.total:
                out.append(f"  {label}: no requests counted")
                continue
            ci = a.ci
            who = "users" if a.source == "spans" else a.source
            out.append(f"  {label}: {_pct(a.share)} within (95 % {_pct(ci[0])}–{_pct(ci[1])}, "
                       f"{int(a.total):,} {who}' requests), budget left {_pct(a.budget_left, 0)}")
        fleet = merged_attainment(o, [a for _, a in rows])
        if fleet is not None:
            ci = fleet.ci
            out.append(f"  fleet (merged counts): {_pct(fleet.share)} within (95 % "
                       f"{_pct(ci[0])}–{_pct(ci[1])}, {int(fleet.total):,} requests), budget left "
                       f"{_pct(fleet.budget_left, 0)}")
        elif any(a is not None and a.total for _, a in rows):
            out.append("  fleet: the replicas count different requests (users' and probes'): "
                       "not merged")
    return out
