"""The one signature every cause's rule has: ``judge(ctx: Context) -> Evidence | None``.

``Context`` is the evidence in (the probes judged and their split, the expectation,
the server's queue, the users' windows and requests, what the judge found, the
findings of the rules before); ``Evidence`` is a finding out (its cause, the seconds of
TTFT it explains, its numbers in words); ``Rule`` is a registry entry.  The thresholds
more than one rule uses live here, with their reasons; the others beside their rule.
Pure.  Seconds in data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Sequence

# MIN_QUEUE_S, the least size of a cause, is also the floor of the expectation's margin:
# its home is there
from prefilltui.model.diagnosis.expectation import (  # noqa: F401  (the rules import them here)
    MIN_QUEUE_S, Expectation, expected_ttft, finite, median,
)
from prefilltui.model.diagnosis.ttft_breakdown import ProbeParts
from prefilltui.model.server_change import ServerChange
from prefilltui.model.types import ProbeResult
from prefilltui.model.users import UserRequest, UsersWindow

if TYPE_CHECKING:
    from prefilltui.model.diagnosis.causes import Cause

#: A part of TTFT at least this share of it is a cause; a change in the users' traffic
#: that explains at least this share of their TTFT's rise is named before the queueing
#: or blocking it brings.
SHARE = 0.25
#: The fewest recent probes the verdict (and a rule that reads them one by one) needs.
MIN_PROBES = 3


@dataclass(frozen=True, slots=True)
class Evidence:
    """One cause that holds: the seconds of TTFT it explains and its numbers in words."""

    cause: Cause
    seconds: float
    text: str


@dataclass(frozen=True, slots=True)
class Context:
    """What every rule is given (one verdict's evidence; nothing to change).

    probes: the ok probes judged (the recent ones, or the newest when only they are
    above), oldest first; parts: their ``probe_parts`` (queue / prefill / overhead s),
    one per probe; ttft_s: their median TTFT (s); expect: the expectation (None: the
    server's own split alone); waiting: requests waiting at the server (the gauge as
    read now, else the probes' median; None: unknown); waiting_now: it is the gauge as
    read now; users / users_before: the users' window now (with requests; None:
    none) and its reference; user_requests: the users' recent requests (spans);
    blocked: probe index -> (seconds of its wait behind users' longer prompts in
    prefill, the longest such prompt) (``head_of_line.blocked``); late / late_s: the
    probe in flight (or the newest) that is late, in words, and by how many s ("" /
    0.0: none); users_rise_s: the users' TTFT p50 above its reference (s); counted:
    probe index -> (s above the expectation, other requests' prompt tokens the server
    counted in its /metrics window) (``head_of_line.counted_ahead``); slowdown: the
    probes' prefill slowdown factor and its half-width when the judge found one
    (``slowdown.slowdown``); server_changes: what changed on the server lately
    (``model.server_change.ServerChange``, ``UsersEvidence.server_changes``); now_s:
    the verdict's time (unix s, read once); cache_off: one of those changes turned off
    the prefix cache the users' reference hit (``server_changed.cache_turned_off``); found:
    the findings of the rules before in the registry.
    """

    probes: Sequence[ProbeResult]
    parts: Sequence[ProbeParts]
    ttft_s: float
    expect: Expectation | None = None
    waiting: float | None = None
    waiting_now: bool = False
    users: UsersWindow | None = None
    users_before: UsersWindow | None = None
    user_requests: Sequence[UserRequest] = ()
    blocked: dict[int, tuple[float, int]] = field(default_factory=dict)
    late: str = ""
    late_s: float = 0.0
    users_rise_s: float = 0.0
    counted: dict[int, tuple[float, int]] = field(default_factory=dict)
    server_changes: tuple[ServerChange, ...] = ()
    now_s: float = 0.0
    cache_off: bool = False
    slowdown: tuple[float, float] | None = None
    found: tuple[Evidence, ...] = ()


@dataclass(frozen=True, slots=True)
class Rule:
    """A registry entry: ``judge`` answers for ``cause``.

    reads: "probes" (asked when there are probes judged), "either" (then or when the
    users' TTFT is above) or "users" (asked when the
    users' TTFT is above its reference); change: a change in the users' traffic, named
    first when it explains ``SHARE`` of their rise (the queueing or blocking it brings
    is its consequence) and ``leads`` says its finding may lead.
    """

    cause: Cause
    judge: Callable[[Context], Evidence | None]
    reads: Literal["probes", "users", "either"] = "probes"
    change: bool = False
    leads: Callable[[Evidence], bool] = lambda e: True


def pct(x: float) -> str:
    return f"{x:.0%}"


def after_prefix(r: ProbeResult) -> bool:
    """A ``--depth`` probe sent after a prefix that should be cached."""
    return r.depth is not None and r.depth.depth > 0 and r.depth.role != "prefix"
