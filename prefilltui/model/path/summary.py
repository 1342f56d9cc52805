"""A path's window summarised: the two fits (through the router, and the prefill
worker probed directly), each hop's median and share of TTFT, the KV transfer's bytes
against the model's KV size.  Pure.  Seconds in data.

The prefill worker's line is the prefill; the router's line minus it is the path (what
the transfer, the decode admission and the router add at each length).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Sequence

from prefilltui.model.diagnosis import WORDS, ttft_verdict
from prefilltui.model.fit import LinearFit, fit_ols
from prefilltui.model.hops import HOP_NAMES, Hops
from prefilltui.model.path.kv import KvFigures, kv_figures
from prefilltui.model.types import ProbeResult


@dataclass(frozen=True, slots=True)
class PrefillProbe:
    """A probe sent to the prefill worker directly: its prompt tokens, TTFT (s), ok,
    wall-clock time (unix s) and error (one line) when it failed."""

    tokens: int | None
    ttft_s: float | None
    ok: bool
    t: float
    error: str | None = None

    def to_json(self) -> dict:
        return {"tokens": self.tokens, "ttft_s": self.ttft_s, "ok": self.ok, "t": self.t,
                "error": self.error}


def _fit_json(f: LinearFit | None) -> dict | None:
    if f is None:
        return None
    return {"intercept_s": f.intercept_s, "per_token_s": f.slope_s_per_token, "probes": f.n}


@dataclass(frozen=True, slots=True)
class PathSummary:
    """router / prefill / decode: the URLs as shown; roles: role -> where it came from;
    probes: router probes with hops; path_fit / prefill_fit: the two lines (None: fewer
    than 3 probes); hops_s: each hop's median (s) and the client's TTFT median;
    shares: each hop's share of the median TTFT; kv: the transfers' figures; problems:
    why hops are missing (distinct lines)."""

    router: str
    prefill: str
    decode: str
    roles: dict[str, str]
    probes: int
    path_fit: LinearFit | None
    prefill_fit: LinearFit | None
    hops_s: dict[str, float | None]
    shares: dict[str, float | None]
    kv: KvFigures
    problems: tuple[str, ...] = ()
    cause: str | None = None
    verdict: str = ""
    notices: tuple[str, ...] = field(default=())

    def to_json(self) -> dict:
        fits = {"path": _fit_json(self.path_fit), "prefill": _fit_json(self.prefill_fit)}
        if self.path_fit is not None and self.prefill_fit is not None:
            fits["path_minus_prefill"] = {
                "intercept_s": self.path_fit.intercept_s - self.prefill_fit.intercept_s,
                "per_token_s": self.path_fit.slope_s_per_token - self.prefill_fit.slope_s_per_token}
        return {"router": self.router, "prefill": self.prefill, "decode": self.decode,
                "roles": dict(self.roles), "probes": self.probes, "fits": fits,
                "hops_s": dict(self.hops_s), "shares": dict(self.shares),
                "kv": self.kv.to_json(), "cause": self.cause, "verdict": self.verdict,
                "problems": list(self.problems), "notices": list(self.notices)}


def _median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def hop_medians(results: Sequence[ProbeResult]) -> tuple[dict[str, float | None],
                                                         dict[str, float | None]]:
    """Each hop's median (s, keys ``<hop>_s`` and ``ttft_s``) over the ok probes with
    usable hops, and each hop's share: its median over the medians' sum when every hop
    is known (the shares add up to 1 and match the medians shown; the medians' sum is
    within a few % of the median TTFT when the hops add up), else over the median TTFT."""
    with_hops = [r for r in results if r.ok and not r.warmup and r.hops is not None
                 and r.hops.problem is None and r.ttft_s]
    hops_s: dict[str, float | None] = {f"{h}_s": _median(r.hops.seconds(h) for r in with_hops)
                                       for h in HOP_NAMES}
    hops_s["ttft_s"] = ttft = _median(r.ttft_s for r in with_hops)
    known = [hops_s[f"{h}_s"] for h in HOP_NAMES]
    whole = sum(known) if None not in known else ttft
    shares = {h: (hops_s[f"{h}_s"] / whole if hops_s[f"{h}_s"] is not None and whole else None)
              for h in HOP_NAMES}
    return hops_s, shares


def summarize_path(results: Sequence[ProbeResult], prefill_probes: Sequence[PrefillProbe], *,
                   urls: tuple[str, str, str], roles: dict[str, str] | None = None,
                   expected_bytes_per_token: int | None = None,
                   notices: Sequence[str] = ()) -> PathSummary:
    """The path's summary over ``results`` (the router's probes) and the direct probes
    of the prefill worker (see ``PathSummary``).  Never raises for bad data: a probe
    without hops or with a problem is left out of the medians (its problem listed)."""
    ok = [r for r in results if r.ok and not r.warmup]
    hops_s, shares = hop_medians(ok)
    path_fit = fit_ols([r.tokens for r in ok if r.fit_eligible],
                       [r.ttft_s for r in ok if r.fit_eligible])
    pp = [p for p in prefill_probes if p.ok and p.tokens and p.ttft_s is not None]
    prefill_fit = fit_ols([p.tokens for p in pp], [p.ttft_s for p in pp])
    good: list[Hops] = [r.hops for r in ok if r.hops is not None and r.hops.problem is None]
    moved = [(h.kv_tokens or (r.tokens or 0), float(h.kv_bytes), h.transfer_s)
             for r in ok if (h := r.hops) is not None and h.problem is None
             and h.kv_bytes is not None and not h.failed_transfers]
    failed = sum(h.failed_transfers or 0 for h in good)
    kv = kv_figures(moved, failed, expected_bytes_per_token)
    problems = tuple(dict.fromkeys(r.hops.problem for r in ok
                                   if r.hops is not None and r.hops.problem))
    if good and all(h.transfer_s is None for h in good):
        problems += ("no worker publishes KV transfer times (vLLM's NIXL connector and "
                     "SGLang do; vLLM's ExampleConnector does not): the transfer is inside "
                     "the decode hop",)
    cause, words = hop_cause(ok)
    if kv.words:
        words = f"{words}; {kv.words}" if words else kv.words
    return PathSummary(urls[0], urls[1], urls[2], dict(roles or {}), len(good), path_fit,
                       prefill_fit, hops_s, shares, kv, problems, cause, words,
                       notices=tuple(notices))


#: The causes that name a hop of the path (``model.diagnosis.causes``).
HOP_CAUSES = ("kv_transfer", "decode_admission", "router")


def hop_cause(results: Sequence[ProbeResult]) -> tuple[str | None, str]:
    """The hop that holds TTFT in ``results`` by the verdict's own rules, judged on the
    hops' split alone (no expectation: a sweep's window is its own fit): the first of
    ``HOP_CAUSES`` the verdict found and its words, else (None, "")."""
    v = ttft_verdict(list(results))
    for e in v.evidence:
        if e.cause in HOP_CAUSES:
            return e.cause, f"{WORDS[e.cause]}: {e.text}"
    return None, ""
