"""The rate search (``sweep --load rate:... --slo OBJECTIVE --rate-search LO:HI``): the
highest offered request rate whose attainment meets the objective.

Each step offers one rate (open-loop Poisson arrivals of the load's prompts) for
``dwell_s`` seconds, waits for that step's requests to see their first token (up to
``drain_s``: a request still waiting then counts as a miss), and takes their TTFTs
(first token - send, client side) in send order; the load then pauses until nothing
is in flight, so one step's queue is not the next one's.  The pure part (which rate
next, when a step meets the objective or saturated, the answer) is
``model.slo.rate_search``.  Prints each step (the curve) and the answer with its
attainment interval.
"""

from __future__ import annotations

import time
from typing import Callable

from prefilltui.model.slo import (Objective, RateSearch, RateStep, next_rate, search_result,
                                  step_of)

#: Longest wait after a step's dwell for its requests' first tokens (s), at least
#: this, else 3 x the objective's threshold.
DRAIN_MIN_S = 5.0
#: Longest wait for the load to empty between steps (s).
IDLE_WAIT_S = 60.0
#: Most steps: lo, hi and a bisection from 100x down to 10 % takes 2 + 7.
MAX_STEPS = 12


def measure_step(gen, rate: float, objective: Objective, dwell_s: float,
                 clock: Callable[[], float] = time.perf_counter) -> RateStep:
    """Offer ``rate`` requests/s on the load generator ``gen`` for ``dwell_s`` s and
    judge its requests (module docstring).  The load is left paused (level 0)."""
    refused0 = gen.skipped
    gen.set_level(rate)
    t0 = clock()
    time.sleep(dwell_s)
    t1 = clock()
    gen.set_level(0)
    drain = max(DRAIN_MIN_S, 3 * objective.threshold_s)
    end = clock() + drain
    while clock() < end:
        pending = [t for t in gen.traces() if t0 <= t.t_send < t1 and not t.arrivals
                   and not t.ended]
        if not pending:
            break
        time.sleep(0.05)
    mine = sorted((t for t in gen.traces() if t0 <= t.t_send < t1), key=lambda t: t.t_send)
    ttfts = [t.first_token_at - t.t_send if t.first_token_at is not None else None
             for t in mine if t.first_token_at is not None or t.ended]
    unanswered = sum(1 for t in mine if t.first_token_at is None and not t.ended)
    idle_end = clock() + IDLE_WAIT_S
    while gen.in_flight and clock() < idle_end:
        time.sleep(0.05)
    return step_of(rate, ttfts, objective, unanswered=unanswered,
                   refused=gen.skipped - refused0, achieved=len(mine) / max(t1 - t0, 1e-9))


def run_rate_search(gen, objective: Objective, lo: float, hi: float, dwell_s: float,
                    say: Callable[[str], None], measure=measure_step) -> RateSearch:
    """Bisect between ``lo`` and ``hi`` requests/s (``model.slo.next_rate``), one
    ``measure(gen, rate, objective, dwell_s)`` per step, saying each as it ends."""
    steps: list[RateStep] = []
    while len(steps) < MAX_STEPS and (rate := next_rate(steps, lo, hi)) is not None:
        if not gen.alive:
            say(f"  stopped: {gen.describe()}")
            break
        st = measure(gen, rate, objective, dwell_s)
        steps.append(st)
        say("  " + step_line(st))
    return search_result(objective, steps)


def _pct(v: float | None) -> str:
    return "N/A" if v is None else f"{v * 100:.1f} %"


def step_line(st: RateStep) -> str:
    """"  4.00 req/s (3.9 sent)   n 78   within 93.6 % (95 % 85.8 %–97.2 %)   meets" ."""
    a = st.attainment
    ci = a.ci
    verdict = ("saturated: " + st.why if st.saturated
               else ("meets" if st.meets else "misses") + ("" if st.decided else " (undecided)"))
    sent = f" ({st.achieved:.2f} sent)" if st.achieved is not None else ""
    return (f"{st.rate:7.2f} req/s{sent}   n {int(a.total):>4}   within {_pct(a.share)}"
            + (f" (95 % {_pct(ci[0])}–{_pct(ci[1])})" if ci else "") + f"   {verdict}")


def answer_lines(res: RateSearch) -> list[str]:
    """The answer in words, with the bracket and the answer step's interval."""
    o = res.objective
    if res.rate is None:
        return [f"rate search ({o.label}): not even {res.steps[0].rate:g} req/s meets it"
                if res.steps else f"rate search ({o.label}): no step ran"]
    a = res.answer_step.attainment
    ci = a.ci
    above = (f"; {res.above:.2f} req/s does not" if res.above is not None
             else "; the highest rate tried, it may hold more")
    return [f"rate search ({o.label}): {res.rate:.2f} req/s holds it ({_pct(a.share)} within, "
            f"95 % {_pct(ci[0])}–{_pct(ci[1])}, {int(a.total)} requests){above}"]
