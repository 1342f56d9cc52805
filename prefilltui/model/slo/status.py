"""One objective's state now, from every source: ``SloStatus``, ``slo_status``.

What a run's summary, the TUI, the exporter and ``report`` show for each objective:
the longest prompt that meets it at the held idle line and at the line of the moment
(``prompt_limit``), the users' attainment from their spans (exact) and the probes'
(prefilltui's own requests, labelled so), the users' share longer than n_max, their
TTFT at the objective's percentile, and the burn over the workbook's windows.  Pure:
no I/O.  Seconds, unix time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from prefilltui.model.fit import LinearFit
from prefilltui.model.slo.attainment import Attainment, attainment_from_buckets, attainment_of
from prefilltui.model.slo.burn import BurnState, burn_state
from prefilltui.model.slo.objective import Objective
from prefilltui.model.slo.prompt_limit import PromptLimit, longest_prompt
from prefilltui.model.users import UserRequest


@dataclass(frozen=True, slots=True)
class SloStatus:
    """One objective, now.

    idle / now -- n_max at the held idle line and at the window's line (None: no
      resolved fit); users -- the users' attainment from their spans, else from the
      server's TTFT histogram (source "histogram": known at its bucket bounds, and
      counting prefilltui's own requests too); None: neither;
    probes -- the probes' attainment (prefilltui's own requests); users_ttft_s -- the
      users' TTFT at the objective's percentile (s; from the spans);
    users_over -- the share of the users' prompts longer than n_max now (0..1);
    burn -- the burn rate over the workbook's windows from the users' spans (None: no
      spans).
    """

    objective: Objective
    idle: PromptLimit | None = None
    now: PromptLimit | None = None
    users: Attainment | None = None
    probes: Attainment | None = None
    users_ttft_s: float | None = None
    users_over: float | None = None
    burn: BurnState | None = None

    def to_json(self) -> dict:
        b = self.burn
        return {
            **self.objective.to_json(),
            "n_max_idle": self.idle.to_json() if self.idle else None,
            "n_max_now": self.now.to_json() if self.now else None,
            "users": self.users.to_json() if self.users else None,
            "probes": self.probes.to_json() if self.probes else None,
            "users_ttft_s": self.users_ttft_s,
            "users_over_n_max": self.users_over,
            "burn": None if b is None else {
                "burning": b.burning,
                "rates": {f"{w.window_s:g}s": w.rate for w in b.windows},
            },
        }


def _users_queue_s(users: Sequence[UserRequest], percentile: float) -> float:
    """The users' queue time at ``percentile`` (s): the waiting the probes' line does
    not hold (0 without spans that report it)."""
    q = [u.queue_s for u in users if u.queue_s is not None and math.isfinite(u.queue_s)
         and u.queue_s >= 0]
    return float(np.quantile(q, percentile / 100.0)) if q else 0.0


def slo_status(objective: Objective, *, idle_fit: LinearFit | None,
               now_fit: LinearFit | None, probe_ttfts_s: Sequence[float] = (),
               users: Sequence[UserRequest] = (), now_s: float | None = None,
               add_users_queue: bool = True,
               users_buckets: Sequence[tuple[float, float]] = (),
               buckets_window_s: float | None = None) -> SloStatus:
    """``objective``'s state (see ``SloStatus``).  ``users``: the users' kept requests
    (their spans); ``now_s``: unix s the burn windows end at (the newest request's
    finish when None).  ``users_buckets``: the server's TTFT histogram over a window
    (cumulative (le, count) deltas, ``buckets_window_s`` long), read when no span is
    there: the share known at its bounds (``attainment_from_buckets``).  With ``add_users_queue``, n_max *now* leaves room for the
    users' queue time at the objective's percentile (the idle line never: it is the
    server at its best).  Never raises for bad data."""
    spans = [u for u in users if u.ttft_s is not None and math.isfinite(u.ttft_s)]
    queue = _users_queue_s(spans, objective.percentile) if add_users_queue else 0.0
    idle = longest_prompt(idle_fit, objective, line="idle")
    now = longest_prompt(now_fit, objective, queue_s=queue, line="now")
    probes = attainment_of(probe_ttfts_s, objective, source="probes") if probe_ttfts_s else None
    att = burn = users_ttft = over = None
    if spans:
        finished = [u.finished_s for u in spans]
        end = now_s if now_s is not None else max(finished)
        att = attainment_of([u.ttft_s for u in spans], objective, source="spans",
                            window_s=max(0.0, end - min(u.arrival_s for u in spans)))
        users_ttft = float(np.quantile([u.ttft_s for u in spans], objective.target))
        burn = burn_state(zip(finished, [u.ttft_s for u in spans]), objective, end)
        lengths = [u.prompt_tokens for u in spans if u.prompt_tokens is not None]
        if lengths and now is not None and now.tokens is not None:
            over = sum(n > now.tokens for n in lengths) / len(lengths)
    elif users_buckets:
        att = attainment_from_buckets(users_buckets, objective, buckets_window_s)
    return SloStatus(objective, idle=idle, now=now, users=att, probes=probes,
                     users_ttft_s=users_ttft, users_over=over, burn=burn)
