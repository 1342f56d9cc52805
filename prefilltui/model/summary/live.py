"""The run summary kept up to date probe by probe: ``LiveSummary``.

``analysis.analyze`` summarises a run from all of its probes: percentiles over every
probe, the server-side fixed cost's robust fit over every server-timed probe, chunk
detection and the depth table.  Four times a second over a long live run, and once per
target in a fleet, that is too slow (``tests/bench``).  A ``LiveSummary`` takes each
probe once (``add``: O(1), into a ``RunningFit`` and bounded buffers) and
``summary()`` builds the same ``RunSummary`` from them with the same functions
``analyze`` uses (``analysis.assess`` / ``roofline_summary`` / ``judge`` /
``window_summary``, ``intercept.fixed_cost``, ``percentiles.quantiles``):

- counts (``ProbeCounts``): exact, kept as running counters;
- fits, window, knee, quadratic: the ``RunningFit`` snapshots (exact OLS, the robust
  fit on its reservoir sample above 2,048 points, see ``running_fit``);
- TTFT percentiles, per length and overall, and the median overhead: over the last
  ``recent`` fit-eligible probes (5,000 by default; ``notes`` says so once the run is
  longer), so their cost is bounded however long the run;
- the server-side fixed cost: over the last 500 server-timed probes, refitted once
  they have grown by 5 % (its robust fit was ~3 % of the app's CPU on every redraw);
- model shape, hardware, roofline and verdict: resolved once per (server, GPU names).

Left out (None in the summary): the depth table, the diagnosis (breakdown, chunking,
cache warning, drift), the load part and the server's FLOP count check.  The "why is TTFT high?" verdict is there when
the caller hands the recent probes (``recent``).  ``analyze`` on the run file has them (the TUI's
export, ``report``).  ``summary()`` is cached until the next ``add``.  Seconds in data.
Not thread-safe: feed it from one thread.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

from prefilltui.model import fit as intercept
from prefilltui.model.summary.analysis import (expectation, judge, roofline_summary, slo_part,
                                              window_summary)
from prefilltui.model.roofline import ModelShape
from prefilltui.model.roofline import Hardware
from prefilltui.model.fit import LinearFit
from prefilltui.model.fit import LengthRow, Quantiles, TtftPercentiles, quantiles
from prefilltui.model.fit import RunningFit
from prefilltui.model.spec import AnalysisOptions, resolve_gpu, resolve_model
from prefilltui.model.summary.run import (LiveFacts, ProbeCounts, QuadraticFit, RunSummary,
                                      ServerFacts)
from prefilltui.model.types import FitMethod, FitScope, ProbeResult, ServerInfo
from prefilltui.model.users import UsersEvidence
from prefilltui.model.diagnosis import HeldExpectation, ttft_verdict

#: Fit-eligible probes the percentiles and the median overhead are taken over (overall,
#: and per length): bounded work per summary however long the run.
RECENT = 5000
#: Server-timed probes the server-side fixed cost is fitted over.
RECENT_SERVER_TIMED = 500
#: The server-side fixed cost is refitted once its probes have grown by this share.
SERVER_REFIT_SHARE = 0.05


@dataclass(slots=True)
class _Length:
    """The recent probes of one requested length: TTFT, the server's count and its
    own prefill time (seconds, tokens), and the cache hits kept out of them."""

    ttft: deque = field(default_factory=lambda: deque(maxlen=RECENT))
    counted: deque = field(default_factory=lambda: deque(maxlen=RECENT))
    prefill: deque = field(default_factory=lambda: deque(maxlen=RECENT))
    cache_hits: int = 0


class LiveSummary:
    """A ``RunSummary`` kept up to date probe by probe (see the module docstring).

    options: the fit shown, the window and the roofline inputs (``AnalysisOptions``);
    fit: the ``RunningFit`` to feed (default: a new one with ``options.window``);
    recent: probes the percentiles are taken over.
    """

    def __init__(self, options: AnalysisOptions | None = None, *,
                 fit: RunningFit | None = None, recent: int = RECENT) -> None:
        self.options = options or AnalysisOptions()
        self.fit = fit if fit is not None else RunningFit(window=max(3, self.options.window))
        self.recent = int(recent)
        self.version = 0  # bumps on every add / reset: a cache key for views
        self.total = self.ok = self.failed = self.warmup = self.cache_hits = 0
        self.fit_eligible = self.estimated_lengths = self.cache_counted = 0
        self.errors: dict[str, int] = {}
        self.left_out: dict[str, int] = {}  # ok probes kept out of the fit, by why
        self.tokens_min: int | None = None
        self.tokens_max: int | None = None
        self.last_cached_tokens: int | None = None
        self._ttft: deque[float] = deque(maxlen=self.recent)
        self._overhead: deque[float] = deque(maxlen=self.recent)
        self._lengths: dict[int, _Length] = {}
        self._server: deque[ProbeResult] = deque(maxlen=RECENT_SERVER_TIMED)
        self._server_added = 0
        self._server_fixed: tuple[int, intercept.ServerFixedCost | None] = (-1, None)
        self._resolved: dict[tuple, tuple[ModelShape | None, Hardware | None, list[str]]] = {}
        self._cache: dict[tuple, RunSummary] = {}
        #: the "why is TTFT high?" expectation, held so an incident cannot move it
        #: (``verdict.HeldExpectation``: the first pinned all-time fit, then only faster)
        self.held = HeldExpectation()

    # -- data in
    def add(self, r: ProbeResult) -> None:
        """Count one probe (warm-ups and failures too) and feed the fit.  O(1)."""
        self.version += 1
        self._cache.clear()
        self.total += 1
        if r.ok:
            self.ok += 1
        else:
            self.failed += 1
            kind = r.error_kind or "unknown"
            self.errors[kind] = self.errors.get(kind, 0) + 1
        if r.warmup:
            self.warmup += 1
        why = r.left_out
        if why is not None:
            self.left_out[why] = self.left_out.get(why, 0) + 1
        n = int(r.requested_tokens or r.tokens or 0)
        if r.ok and r.cached_tokens is not None:  # the server counted its hit or miss
            self.cache_counted += 1
        if r.ok and r.cache_hit:  # counted as analyze counts them (warm-ups too)
            self.cache_hits += 1
            self.last_cached_tokens = r.cached_tokens
            if not r.warmup:
                self._lengths.setdefault(n, _Length()).cache_hits += 1
        if not r.fit_eligible:
            return
        self.fit.add(r)
        self.fit_eligible += 1
        tok = int(r.tokens)
        self.tokens_min = tok if self.tokens_min is None else min(self.tokens_min, tok)
        self.tokens_max = tok if self.tokens_max is None else max(self.tokens_max, tok)
        if r.prompt_tokens_source == "estimate":
            self.estimated_lengths += 1
        row = self._lengths.setdefault(n, _Length())
        row.ttft.append(r.ttft_s)
        if r.prompt_tokens is not None:
            row.counted.append(r.prompt_tokens)
        self._ttft.append(r.ttft_s)
        if r.server_prefill_s is not None:
            row.prefill.append(r.server_prefill_s)
            self._overhead.append(r.ttft_s - r.server_prefill_s)
            self._server.append(r)
            self._server_added += 1

    def reset_fit(self) -> None:
        """Forget the fit's points (the TUI's ``r``); counts and percentiles stay."""
        self.fit.reset()
        self.held.reset()
        self.version += 1
        self._cache.clear()

    # -- parts
    @property
    def counts(self) -> ProbeCounts:
        return ProbeCounts(total=self.total, ok=self.ok, failed=self.failed,
                           warmup=self.warmup, cache_hits=self.cache_hits,
                           fit_eligible=self.fit_eligible, errors=dict(self.errors),
                           cache_counted=self.cache_counted,
                           estimated_lengths=self.estimated_lengths,
                           tokens_min=self.tokens_min, tokens_max=self.tokens_max,
                           left_out=dict(self.left_out))

    def percentiles(self) -> TtftPercentiles:
        """TTFT quantiles over the recent probes, overall and per requested length."""
        rows = []
        for n in sorted(self._lengths):
            g = self._lengths[n]
            t = list(g.ttft)
            rows.append(LengthRow(
                requested_tokens=n,
                prompt_tokens=int(statistics.median(g.counted)) if g.counted else None,
                ttft=quantiles(t) if t else Quantiles(), ttft_min_s=min(t) if t else None,
                server_prefill_median_s=statistics.median(g.prefill) if g.prefill else None,
                cache_hits=g.cache_hits))
        return TtftPercentiles(quantiles(list(self._ttft)), tuple(rows))

    def server_fixed_cost(self) -> intercept.ServerFixedCost | None:
        """``intercept.server_fixed_cost`` of the recent server-timed probes, refitted
        once they have grown by ``SERVER_REFIT_SHARE`` (every probe up to 20)."""
        last, value = self._server_fixed
        if last < 0 or self._server_added - last >= max(1, int(last * SERVER_REFIT_SHARE)):
            value = intercept.server_fixed_cost(list(self._server)) if self._server else None
            self._server_fixed = (self._server_added, value)
        return value

    def resolve(self, info: ServerInfo | None, gpu_names: tuple[str, ...] = ()
                ) -> tuple[ModelShape | None, Hardware | None, list[str]]:
        """Model shape, hardware and their notes (``spec.resolve_model`` /
        ``resolve_gpu``), once per (server, GPU names)."""
        key = (info.model if info else None, info.params if info else None,
               info.hidden if info else None, info.layers if info else None, gpu_names)
        got = self._resolved.get(key)
        if got is None:
            spec = self.options.roofline
            if spec.config_problem:
                model, notes = None, [f"--model-config not used: {spec.config_problem}"]
            else:
                model, notes = resolve_model(spec, info)
            names = [n for n in gpu_names if n and not n.upper().startswith("CPU")]
            hw, hnotes = resolve_gpu(spec, names)
            self._resolved.clear()
            got = self._resolved[key] = (model, hw, notes + hnotes)
        return got

    def _all_fit(self, method: FitMethod) -> LinearFit | None:
        snap = self.fit.snapshot("all", method)
        return snap.fit if snap is not None else None

    def slo(self, info: ServerInfo | None, users_evidence: UsersEvidence | None = None, *,
            method: FitMethod | None = None, baseline_fit: LinearFit | None = None,
            now_s: float | None = None, users_buckets=(),
            buckets_window_s: float | None = None) -> tuple[tuple, list[str]]:
        """Each objective of ``options.slo`` now (``analysis.slo_part``): n_max at the
        held idle line (``baseline_fit``, else the fit ``held`` keeps, else the
        all-time fit) and at the window's line, the recent probes' attainment, the
        users' from ``users_evidence``'s kept spans (else from ``users_buckets``, the
        server's TTFT histogram), burn windows ending at ``now_s``.
        Returns (statuses, notes); ((), []) without objectives."""
        if not self.options.slo:
            return (), []
        method = method or self.options.fit
        idle = baseline_fit or self.held.fit or self._all_fit(method)
        win = self.fit.window_fit(method)
        return slo_part(self.options, info, idle, win.fit if win else None, list(self._ttft),
                        users_evidence, now_s=now_s, users_buckets=users_buckets,
                        buckets_window_s=buckets_window_s)

    # -- the summary
    def summary(self, info: ServerInfo | None = None, *, gpu_names: tuple[str, ...] = (),
                which: FitScope = "all", method: FitMethod | None = None,
                live: LiveFacts | None = None, recent: Sequence[ProbeResult] = (),
                baseline_fit: LinearFit | None = None,
                users_evidence: UsersEvidence | None = None) -> RunSummary:
        """The ``RunSummary`` of the probes so far (see the module docstring): ``which``
        picks the fit shown ("all" or "window"), ``method`` overrides
        ``options.fit``; ``recent``: the last probes (every one added since, failures
        included), for the "why is TTFT high?" verdict (``model.diagnosis.verdict``, as ``analyze``
        judges it: against ``baseline_fit``, else the idle fit as ``held`` keeps it:
        an incident cannot move it); none: no verdict.  ``users_evidence``: what the
        users' requests tell the verdict (``model.users.UsersEvidence``; its reference
        defaults to the one ``held`` keeps).  Cached until the next ``add``
        (``users_evidence`` is part of the key).  Never raises for bad data."""
        method = method or self.options.fit
        ev = users_evidence if users_evidence is not None else UsersEvidence()
        key = (which, method, id(info), gpu_names, live, bool(recent), id(baseline_fit), ev)
        got = self._cache.get(key)
        if got is not None:
            return got
        snap = self.fit.snapshot(which, method)
        win = snap if which == "window" else self.fit.window_fit(method)
        model, hw, rnotes = self.resolve(info, gpu_names)
        notes = list(rnotes)
        fit = snap.fit if snap else None
        fixed = intercept.fixed_cost(fit, self.server_fixed_cost())
        if fixed is not None and fixed.note:
            notes.append(fixed.note)
        if fit is not None and fit.knee_tokens:
            notes.append(f"the intercept is the line's above the knee at {fit.knee_tokens:,} "
                         "tokens, not TTFT(0)")
        if self.fit_eligible > self.recent:
            notes.append(f"TTFT percentiles over the last {self.recent:,} probes")
        counts = self.counts
        roof = roofline_summary(snap, model, hw, self.options.roofline.efficiency)
        verdict = judge(snap, model, hw, roof, counts)
        why = None
        if recent:  # held against the all-time fit whatever ``which`` shows, as analyze
            idle = fit if which == "all" else self._all_fit(method)
            self.held.offer(idle, recent)
            ev = ev.with_before(self.held.users_before)
            why = ttft_verdict(list(recent), expectation(self.held.fit or idle, baseline_fit,
                                                         roof, verdict,
                                                         idle_source=self.held.label),
                               users_evidence=ev)
            self.held.observe(why, ev.users_now, changes=ev.server_changes)
        slo, slo_notes = self.slo(info, ev, method=method, baseline_fit=baseline_fit)
        notes += slo_notes
        summary = RunSummary(
            server=ServerFacts.of(info) if info is not None else None, probes=counts,
            fit=fit, ols=snap.ols if snap else None, robust=snap.robust if snap else None,
            knee_tokens=snap.knee_tokens if snap else None,
            quadratic=(QuadraticFit(snap.quadratic, snap.quadratic_applies)
                       if snap and snap.quadratic is not None else None),
            fixed_cost=fixed, percentiles=self.percentiles(),
            overhead_median_s=statistics.median(self._overhead) if self._overhead else None,
            window=window_summary(win, snap, self.options.window), model=model, hardware=hw,
            roofline=roof, verdict=verdict, notes=tuple(notes),
            fit_lengths_estimated=bool(counts.estimated_lengths and fit is not None),
            live=live, ttft_verdict=why, slo=slo)
        self._cache.clear()  # one entry: the view asks for one (which, method) at a time
        self._cache[key] = summary
        return summary
