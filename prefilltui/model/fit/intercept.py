"""The fixed cost TTFT(0): whether the fit pins it, and what the server's own times say.

The intercept a of TTFT = a + b*n is an extrapolation to n = 0.  It is *pinned*
when its 95 % interval's half-width is at most ``pin_bound_s(a)`` =
max(PIN_FLOOR_S, PIN_REL * a): 10 ms is the resolution at which a fixed cost
matters beside a one-token request (a round trip plus scheduling on a local server
is a few ms to tens of ms, and two runs should agree to about +-20 ms); 25 % keeps a
remote API's 300 ms fixed cost to one significant figure (+-75 ms) instead of
demanding 10 ms there.  A fixed cost that is not pinned is reported as such
("fixed cost not pinned: ...") instead of a confident number; a pinned one is never
shown below 0 (it is clamped, with a note saying by how much).

``server_fixed_cost(results)`` is the same quantity from the server's own times
(llama.cpp ``timings.prompt_ms``, vLLM's prefill metric): the intercept of the server
prefill times against prompt tokens (clamped at 0) plus the median of TTFT - server
prefill (the client, network, HTTP and first-token part, constant in n).  Seconds
throughout; no I/O.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable

from prefilltui.model.units import ms
from prefilltui.model.fit.linear import LinearFit
from prefilltui.model.fit.robust import fit_robust
from prefilltui.model.types import JsonObject, ProbeResult

PIN_FLOOR_S = 0.010  # see the module docstring
PIN_REL = 0.25
NOT_PINNED = "fixed cost not pinned: add short prompts / more repeats"


def physical_ci(ci: tuple[float | None, float | None] | list[float | None] | None
                ) -> tuple[float | None, float | None] | None:
    """The 95 % interval of a fixed cost as shown on screen: the fit's interval cut at
    0 (a fixed cost is never negative; the data keep the fit's own bounds).  ``ci`` is
    ``(lo, hi)`` in seconds, either may be None; None stays None."""
    if not ci:
        return None
    lo, hi = ci[0], ci[1]
    return (None if lo is None else max(0.0, lo), None if hi is None else max(0.0, hi))


def pin_bound_s(intercept_s: float) -> float:
    """Largest half-width (seconds) of a's 95 % interval that counts as pinned."""
    return max(PIN_FLOOR_S, PIN_REL * max(intercept_s, 0.0))


def _f(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


@dataclass(frozen=True, slots=True)
class ServerFixedCost:
    """The fixed cost from the server's own prefill times (``server_fixed_cost``),
    seconds: ``fixed_cost_s`` = ``prefill_intercept_s`` (the server prefill time's
    intercept, clamped at 0; ``prefill_intercept_raw_s`` unclamped, with its 95 %
    ``prefill_intercept_ci``) + ``outside_prefill_s`` (median of TTFT - server prefill).
    ``pinned``: the prefill intercept's interval is within the same bound as the fit's;
    ``n``: probes used."""

    fixed_cost_s: float
    pinned: bool
    prefill_intercept_s: float
    prefill_intercept_raw_s: float | None
    prefill_intercept_ci: tuple[float | None, float | None]
    outside_prefill_s: float
    n: int

    def to_json(self) -> JsonObject:
        return {"fixed_cost_s": self.fixed_cost_s, "pinned": self.pinned,
                "prefill_intercept_s": self.prefill_intercept_s,
                "prefill_intercept_raw_s": self.prefill_intercept_raw_s,
                "prefill_intercept_ci": list(self.prefill_intercept_ci),
                "outside_prefill_s": self.outside_prefill_s, "n": self.n}


@dataclass(frozen=True, slots=True)
class FixedCost:
    """The fit's intercept as a fixed cost (seconds).

    ``shown_s``: the value to show -- None when not pinned, else the intercept
    clamped at 0 (``clamped`` then True).  ``half_width_s`` of the 95 % interval
    (inf when it has none) against ``bound_s``.  ``note``: one sentence for a summary
    (not pinned, clamped), or None.  ``server``: ``server_fixed_cost``'s, or None.
    """

    intercept_s: float
    ci: tuple[float, float]
    half_width_s: float
    bound_s: float
    pinned: bool
    shown_s: float | None
    clamped: bool
    note: str | None
    server: ServerFixedCost | None = None

    def to_json(self) -> JsonObject:
        return {"intercept_s": _f(self.intercept_s), "intercept_ci": [_f(self.ci[0]), _f(self.ci[1])],
                "half_width_s": _f(self.half_width_s), "bound_s": self.bound_s,
                "pinned": self.pinned, "shown_s": _f(self.shown_s), "clamped": self.clamped,
                "note": self.note, "server": self.server.to_json() if self.server else None}


def fixed_cost(fit: LinearFit | None, server: ServerFixedCost | None = None) -> FixedCost | None:
    """``FixedCost`` of a fit (None without one).  Never raises for odd values."""
    if fit is None:
        return None
    a = fit.intercept_s
    lo, hi = fit.intercept_ci
    half = (hi - lo) / 2 if math.isfinite(lo) and math.isfinite(hi) else math.inf
    bound = pin_bound_s(a)
    pinned = bool(math.isfinite(a) and half <= bound)
    note = None
    clamped = False
    shown: float | None = None
    if not pinned:
        note = (f"{NOT_PINNED} (95 % interval +-{ms(half, 0)}, wider than the "
                f"+-{ms(bound, 0)} bound)" if math.isfinite(half) else NOT_PINNED)
    elif a < 0:
        shown, clamped = 0.0, True
        if hi < 0:  # the whole interval below 0: the line does not describe short prompts
            note = (f"fixed cost shown as 0: the fit gives {ms(a)}, below 0 beyond its "
                    "interval (TTFT is not a straight line down to short prompts: a knee or "
                    "curvature)")
        else:
            note = f"fixed cost shown as 0: the fit gives {ms(a)}, 0 within its interval"
    else:
        shown = a
    return FixedCost(intercept_s=a, ci=(lo, hi), half_width_s=half, bound_s=bound,
                     pinned=pinned, shown_s=shown, clamped=clamped, note=note, server=server)


def server_fixed_cost(results: Iterable[ProbeResult]) -> ServerFixedCost | None:
    """The fixed cost from the server's own prefill times (see the module docstring and
    ``ServerFixedCost``).  Uses fit-eligible probes with a server prefill time; None with
    fewer than 3 such probes or lengths spanning less than 2x (the prefill intercept
    would be a long extrapolation)."""
    pts = [r for r in results if r.fit_eligible and r.server_prefill_s is not None]
    if len(pts) < 3:
        return None
    xs = [float(r.tokens) for r in pts]
    if min(xs) <= 0 or max(xs) < 2 * min(xs):
        return None
    pf = fit_robust(xs, [r.server_prefill_s for r in pts])
    if pf is None:
        return None
    outside = statistics.median(r.ttft_s - r.server_prefill_s for r in pts)
    a_p = max(pf.intercept_s, 0.0)
    lo, hi = pf.intercept_ci
    pinned = bool(math.isfinite(lo) and math.isfinite(hi)
                  and (hi - lo) / 2 <= pin_bound_s(a_p + outside))
    return ServerFixedCost(fixed_cost_s=a_p + outside, pinned=pinned, prefill_intercept_s=a_p,
                           prefill_intercept_raw_s=_f(pf.intercept_s),
                           prefill_intercept_ci=(_f(pf.intercept_ci[0]), _f(pf.intercept_ci[1])),
                           outside_prefill_s=outside, n=len(pts))
