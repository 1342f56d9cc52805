"""One target of the exporter: a paced, continuous sweep and its health, as snapshots.

``TargetProber(cfg, run_dir=...)`` owns a ``SweepRunner`` (continuous, one probe in
flight, probe starts at least ``cfg.interval_s`` seconds apart plus up to 20 % jitter,
lengths reshuffled every round) in its own thread, a size-rotated run file, and the
state the ``/metrics`` page shows.  After every probe (in the runner's thread) it
summarises the sliding window -- the last ``cfg.window`` successful probes -- with the
same ``analysis.analyze`` as ``sweep`` and ``report`` (a ``RunSummary``) and publishes a
new frozen ``TargetSnapshot`` (``snapshot``); a scrape only reads the newest snapshot,
so a slow or dead target never delays a scrape or another target.

Freshness is data: the snapshot carries when the fit's newest probe finished, when
the probe in flight began, and the hang threshold; the collector turns them into
ages at scrape time.  The alerts' other inputs (explicit baseline, per-length
medians, hang threshold, buckets) are computed in ``health``.

Memory is bounded whatever the uptime: the window (``cfg.window`` results), one
histogram row per probed length, a few counters, and the runner's last
``KEEP_RESULTS`` results.  Every probe is in the run file.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import replace
from pathlib import Path

from prefilltui.model.summary import RunSummary
from prefilltui.model.types import ERROR_KINDS, ProbeResult, ServerInfo
from prefilltui.model.server_change import ServerChange, change_words
from prefilltui.model.users import UsersEvidence
from prefilltui.exporter.config import (JITTER, RUN_FILE_KEEP, RUN_FILE_MAX_BYTES,
                                        TargetConfig, otlp_options, path_options)
from prefilltui.exporter.health import (Expected, baseline_fit, explicit_baseline,
                                        hang_threshold, length_medians, roofline_expected,
                                        ttft_buckets)
from prefilltui.exporter.load_figures import LoadFigures, load_figures
from prefilltui.exporter.slo import SloCounters, objectives_of
from prefilltui.exporter.snapshot import LengthHistogram, TargetSnapshot
from prefilltui.model.diagnosis import (
    Expectation, HeldExpectation, throughput_expectation, ttft_verdict,
)
from prefilltui.options import (LoadOptions, RunFileOptions, SessionOptions, SweepDesign,
                                TelemetryOptions)

log = logging.getLogger(__name__)

#: Results the runner keeps in memory (the window holds its own).
KEEP_RESULTS = 8

__all__ = ["TargetProber", "window_health"]


class _InFlight:
    """A probe hook (first in the runner's list) that notes when each probe begins."""

    def __init__(self, prober: "TargetProber") -> None:
        self.prober = prober

    async def before_probe(self, client) -> None:
        self.prober._begin_probe()

    async def after_probe(self, result: ProbeResult) -> None:
        return None


def window_health(window: list[ProbeResult], info: ServerInfo | None, cfg: TargetConfig,
                  hold: HeldExpectation | None = None, *,
                  users_evidence: UsersEvidence | None = None) -> RunSummary:
    """The window's summary: the same analysis ``sweep`` prints (``analysis.analyze``,
    robust fit, the target's roofline inputs) and its TTFT breakdown (``diagnosis``).
    The verdict's expectation is ``hold``'s when given (offered the window fit first):
    the ``baseline_run`` fit, else the window fit held before any change, with the
    slope of a numeric ``expected_throughput``; never the window fit of the moment,
    which follows a slowdown (a true 2x slower prefill read 1.50x at +26 s, then
    0.97x).  ``users_evidence``: the users' window and spans for the verdict
    (``model.users.UsersEvidence``; without a reference of its own, ``hold``'s).
    Never raises for bad data."""
    from prefilltui.model.summary import analyze
    from prefilltui.model.fit import RunningFit

    rf = RunningFit(window=max(3, len(window)))
    for r in window:
        rf.add(r)
    if hold is None:
        return analyze(window, info, cfg.analysis, running_fit=rf, users_evidence=users_evidence)
    snap = rf.snapshot("all", cfg.analysis.fit)
    hold.offer(snap.fit if snap is not None else None, window)
    fit, source = verdict_expectation(hold, cfg)
    ev = (users_evidence or UsersEvidence()).with_before(hold.users_before)
    summary = analyze(window, info, cfg.analysis, running_fit=rf, baseline_fit=fit,
                      baseline_source=source, users_evidence=ev)
    if summary.ttft_verdict is not None:
        hold.observe(summary.ttft_verdict, ev.users_now, changes=ev.server_changes)
    return summary


def verdict_expectation(hold: HeldExpectation, cfg: TargetConfig) -> tuple:
    """(line, words) the verdict holds the window against: ``hold``'s fit, its slope
    replaced by a numeric ``expected_throughput`` (the fixed cost stays the held fit's);
    (None, "") before a fit is held.  "roofline" is not used here: it is what the
    hardware could do, not what this server did."""
    fit, source = hold.fit, hold.label
    tps = cfg.expected_throughput
    if isinstance(tps, (int, float)) and not isinstance(tps, bool):
        fit = throughput_expectation(float(tps), fit, "config")
        source = f"expected_throughput {float(tps):,.0f} tok/s"
    return fit, source


class TargetProber:
    """Probes one target forever (see the module docstring).

    ``start()`` returns at once; ``snapshot`` is the newest ``TargetSnapshot`` (read it
    from any thread); ``stop(timeout)`` cancels the probe in flight, waits for the
    thread, then flushes and closes the run file.

    One wiring with the other commands: ``session.build_session`` builds the probe
    client, the ``/metrics`` hook, the run file and the runner (``session_options``).
    """

    def __init__(self, cfg: TargetConfig, *, run_dir: str | Path,
                 run_max_bytes: int = RUN_FILE_MAX_BYTES, run_keep: int = RUN_FILE_KEEP,
                 seed: int | None = None) -> None:
        """Raises ValueError (naming the target) when ``cfg.baseline_run`` holds no fit."""
        self.cfg = cfg
        base = baseline_fit(cfg)
        self._expected = explicit_baseline(cfg, base)
        #: the verdict's expectation, held so an incident cannot move it (baseline_run's
        #: fit, else the window fit held before any change)
        self._hold = HeldExpectation(baseline=base, source=f"baseline_run {cfg.baseline_run}"
                                     if base is not None else "baseline run")
        self._bounds = ttft_buckets(cfg.probe.timeout_s)
        self.run_dir = Path(run_dir)
        self.run_max_bytes = run_max_bytes
        self.run_keep = run_keep
        self.seed = seed
        self.session = None
        self.runner = None
        self.writer = None
        self._info: ServerInfo | None = None
        self._window: deque[ProbeResult] = deque(maxlen=cfg.window)
        self._counts: dict[tuple[str, str], int] = {("ok", ""): 0}
        self._counts.update({("failed", k): 0 for k in ERROR_KINDS})
        self._hist: dict[int, list[float]] = {}  # tokens -> [per-bucket counts..., +Inf, sum]
        self._slo = SloCounters()  # the objectives' counters (``exporter.slo``)
        self._totals = {"cache_hit_probes": 0, "cached_tokens": 0, "cache_counted_probes": 0,
                        "prompt_tokens": 0}
        self._health: RunSummary | None = None
        self._up: bool | None = None  # the last probe or discovery answered
        self._last_probe_ts: float | None = None
        self._last_success_ts: float | None = None
        self._fit_ts: float | None = None  # when the newest probe of the fit finished
        self._in_flight_since: float | None = None  # when the probe in flight began
        self._last_error: tuple[str, int | None] | None = None
        self._medians: tuple[tuple[int, float], ...] = ()
        self.metrics_hook = None
        self._life = threading.Lock()  # start() and stop() never interleave
        self._stopped = False
        self._expect_now: Expectation | None = None  # the verdict's, for "now" (snapshot)
        self._now_cache: tuple = (None, None)
        self.snapshot = self._make_snapshot("queued", "waiting for its turn to start")

    # -- the snapshot a scrape reads
    @property
    def snapshot(self) -> TargetSnapshot:
        """The newest snapshot; while a probe is in flight its verdict is judged again
        with the probe's age and the waiting gauge of the newest ``/metrics`` scrape
        (in a queue probes rarely complete: the one waiting is the evidence now).
        Pure computation over the window (no I/O), at most once per half second."""
        snap, since = self._snapshot, self._in_flight_since
        why = snap.summary.ttft_verdict if snap.summary is not None else None
        if since is None or why is None or self._expect_now is None:
            return snap
        age = max(0.0, time.time() - since)
        # the snapshot itself, not its id(): a freed snapshot's id is reused by a later
        # one, and a stale cached answer carried the old probe's in-flight start (a steady
        # target paged as hung)
        key = (snap, since, round(age * 2))
        cached_key = self._now_cache[0]
        if (cached_key is not None and cached_key[0] is snap and cached_key[1] == since
                and cached_key[2] == key[2]):
            return self._now_cache[1]
        try:
            ev = self._users_evidence().with_before(self._hold.users_before)
            v = ttft_verdict(list(self._window), self._expect_now, users_evidence=ev,
                             in_flight_age_s=age, waiting_now=self._waiting_now())
            out = replace(snap, summary=replace(snap.summary, ttft_verdict=v))
        except Exception:  # never into a scrape
            log.exception("verdict now failed for %s", self.cfg.label)
            out = snap
        self._now_cache = (key, out)
        return out

    @snapshot.setter
    def snapshot(self, snap: TargetSnapshot) -> None:
        self._snapshot = snap

    def _users_evidence(self) -> UsersEvidence:
        """The verdict's users' evidence: this target's receiver or /metrics window
        (against the held expectation) and its kept requests; the empty
        ``UsersEvidence`` without either (or when they fail)."""
        changes = self.server_changes()
        try:
            users = self.users
            if users is None:
                return UsersEvidence(server_changes=changes)
            return UsersEvidence(users_now=users.window(fit=self._hold.fit),
                                 user_requests=users.recent(), server_changes=changes)
        except Exception:  # a receiver's problem never reaches the probing or a scrape
            log.exception("users' figures failed for %s", self.cfg.label)
            return UsersEvidence(server_changes=changes)

    def server_changes(self) -> tuple[ServerChange, ...]:
        """The server's restarts and changes of the last 10 minutes
        (``measure.server_watch.ServerWatch.recent``), oldest first; () before the
        session is built."""
        watch = self.session.server_watch if self.session is not None else None
        return watch.recent() if watch is not None else ()

    def _server_changed(self, change: ServerChange) -> None:
        """A change the watch confirmed (runner thread): one line in the log, and a new
        snapshot so a scrape publishes it before the next probe ends."""
        log.warning("target %s: %s (%s)", self.cfg.label, change_words([change], time.time()),
                    "; ".join(change.evidence))
        self.snapshot = self._make_snapshot(self.runner.state if self.runner else "probing",
                                            self.runner.state_detail if self.runner else "")

    def _waiting_now(self) -> float | None:
        sample = getattr(self.metrics_hook, "last_sample", None)
        got = sample.get("waiting") if sample is not None else None
        return float(got) if got is not None else None

    # -- wiring
    def session_options(self) -> SessionOptions:
        """The options ``session.build_session`` builds this target's probing from: the
        probe client (the target's ``ProbeOptions``), a size-rotated run file, and the
        pacing: the interval is the rate ceiling, with no duty-cycle idle (the TUI's
        pacing).  No local telemetry: the exporter rarely runs on the target's machine."""
        cfg = self.cfg
        design = SweepDesign(lengths=cfg.lengths, pause_s=0.0, seed=self.seed,
                             interval_s=cfg.interval_s, jitter=JITTER, keep_results=KEEP_RESULTS)
        run_file = RunFileOptions(path=str(self.run_dir / f"{cfg.slug}.jsonl"),
                                  max_bytes=self.run_max_bytes, keep=self.run_keep)
        return SessionOptions(probe=cfg.probe, design=design,
                              telemetry=TelemetryOptions(enabled=False), run_file=run_file,
                              analysis=cfg.analysis, load=LoadOptions(spec=cfg.load),
                              otlp=otlp_options(cfg), path=path_options(cfg))

    def start(self) -> "TargetProber":
        """Build the session and start probing.

        Raises:
            SessionError: an API key that cannot be sent (USAGE; the message holds no
                key) or a run file that cannot be created (FAILURE).
        """
        from prefilltui.session import build_session

        with self._life:
            if self._stopped:  # removed (a reload) before its turn came
                return self
            self.session = build_session(self.session_options(), self.cfg.url, continuous=True)
            self.metrics_hook = self.session.metrics
            self.writer = self.session.writer
            if self.session.server_watch is not None:
                self.session.server_watch.on_change.append(self._server_changed)
            self.runner = self.session.new_runner(on_result=self._on_result,
                                                  on_state=self._on_state)
            self.runner.hooks.insert(0, _InFlight(self))  # first: its /metrics scrape counts
            if self.session.load is not None:
                self.session.load.start()  # asked for in the config; bounded (docs/load.md)
            self.runner.start()
        return self

    def mark_failed(self, why: str) -> None:
        """The prober could not start (``why``: one line): shown as state "failed"."""
        self._up = False
        self.snapshot = self._make_snapshot("failed", why)

    def request_stop(self) -> None:
        """Ask the runner and the load to stop (cancels the probe in flight and every
        load request); returns at once."""
        self._stopped = True
        if self.session is not None and self.session.load is not None:
            self.session.load.stop(timeout=0)
        if self.runner is not None:
            self.runner.stop(timeout=0)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop, wait up to ``timeout`` s for the runner, flush and close the run file."""
        self._stopped = True
        with self._life:
            if self.runner is not None:
                self.runner.stop(timeout=timeout)
            if self.session is not None:
                self.session.close()

    # -- runner callbacks (runner thread)
    def _set_up(self, up: bool, why: str) -> None:
        """Record up/down; a change is logged once (one line on stderr / the journal)."""
        was = self._up
        self._up = up
        if was is not None and was != up:
            if up:
                log.warning("target %s answers again", self.cfg.label)
            else:
                log.warning("target %s is down: %s", self.cfg.label, why)
        elif was is None and not up:
            log.warning("target %s is down: %s", self.cfg.label, why)

    def _on_state(self, state: str, detail: str) -> None:
        info = self.runner.server_info if self.runner is not None else None
        if state == "retrying" and info is None:
            self._set_up(False, detail)  # discovery failed: the server is unreachable
            self._last_error = ("connect", None)
        self.snapshot = self._make_snapshot(state, detail)

    def _begin_probe(self) -> None:
        self._in_flight_since = time.time()
        self.snapshot = self._make_snapshot(self.runner.state if self.runner else "probing",
                                            self.runner.state_detail if self.runner else "")

    def _on_result(self, r: ProbeResult) -> None:
        self._info = self.runner.server_info if self.runner is not None else self._info
        self._in_flight_since = None
        now = r.started_at or time.time()
        self._last_probe_ts = now
        self._set_up(bool(r.ok), f"{r.error_kind}: {r.error_message}")
        if r.ok:
            self._last_success_ts = now
            self._counts[("ok", "")] += 1
        else:
            key = ("failed", r.error_kind or "protocol")
            self._counts[key] = self._counts.get(key, 0) + 1
            # the status only where it is the error (a timeout's stream began with 200)
            status = r.http_status if key[1] in ("http", "rate_limited", "context_length") else None
            self._last_error = (key[1], status)
        if r.ok:
            if r.cached_tokens is not None:  # usage, timings or the server's /metrics
                self._totals["cache_counted_probes"] += 1
            if r.cache_hit:
                self._totals["cache_hit_probes"] += 1
                self._totals["cached_tokens"] += int(r.cached_tokens or 0)
            self._totals["prompt_tokens"] += int(r.prompt_tokens or r.requested_tokens or 0)
            if not r.warmup and r.ttft_s is not None:
                self._observe(r.requested_tokens, r.ttft_s)
                if r.fit_eligible:  # the probes' attainment counts the fit's probes
                    self._slo.probe(self._objectives(), r.ttft_s)
                self._window.append(r)
                self._medians = length_medians(self._window)
                try:
                    # probes under the configured load are fitted as that level's own
                    loaded = self.session is not None and self.session.load is not None
                    self._health = window_health([replace(x, load_level=None)
                                                  for x in self._window], self._info, self.cfg,
                                                 None if loaded else self._hold,
                                                 users_evidence=self._users_evidence())
                    if self.session is not None and self.session.load is not None:
                        # under a constant load there is no idle fit to hold TTFT
                        # against: the verdict reads the server's own split only
                        self._health = replace(self._health, ttft_verdict=ttft_verdict(
                            list(self._window), None))
                    self._expect_now = self._expectation_now()
                    self._fit_ts = time.time()
                except Exception:  # a fit problem must never stop the probing
                    log.exception("window fit failed for %s", self.cfg.label)
        self.snapshot = self._make_snapshot(self.runner.state if self.runner else "probing",
                                            self.runner.state_detail if self.runner else "")

    def _expectation_now(self) -> Expectation | None:
        """The expectation the window's verdict was held against (for ``snapshot``)."""
        if self.session is not None and self.session.load is not None:
            return None
        fit, source = verdict_expectation(self._hold, self.cfg)
        h = self._health
        roof = h.roofline if h is not None else None
        if fit is None:
            fit, source = (h.fit, "idle fit") if h is not None else (None, "")
        return Expectation(fit, source, roof.mfu if roof is not None else None,
                           h.verdict.level if h is not None else None)

    def _observe(self, tokens: int, ttft_s: float) -> None:
        row = self._hist.get(tokens)
        if row is None:
            row = self._hist[tokens] = [0.0] * (len(self._bounds) + 2)
        for i, b in enumerate(self._bounds):
            if ttft_s <= b:
                row[i] += 1
                break
        else:
            row[len(self._bounds)] += 1
        row[-1] += ttft_s

    def _make_snapshot(self, state: str, detail: str) -> TargetSnapshot:
        info = self._info
        hists = []
        for tokens in sorted(self._hist):
            row = self._hist[tokens]
            cum, acc = [], 0
            for c in row[:-1]:
                acc += int(c)
                cum.append(acc)
            hists.append(LengthHistogram(tokens, tuple(cum), row[-1], acc))
        hook, cfg = self.metrics_hook, self.cfg
        expected = self._expected
        if cfg.expected_throughput == "roofline":
            tps = roofline_expected(self._health)
            expected = Expected(tps, "roofline") if tps else None
        has_fit = self._health is not None and self._health.fit is not None
        return TargetSnapshot(
            target=cfg.label,
            model=cfg.probe.model or (info.model if info else None) or "",
            server_kind=info.kind if info else "", api=cfg.probe.api,
            url=cfg.shown_url,
            interval_s=cfg.interval_s, state=state, detail=detail, up=self._up,
            ready=self.runner is not None and self.runner.server_info is not None,
            last_probe_ts=self._last_probe_ts, last_success_ts=self._last_success_ts,
            probes=tuple(sorted(self._counts.items())), ttft_bounds_s=self._bounds,
            histograms=tuple(hists), summary=self._health, length_medians_s=self._medians,
            fit_ts=self._fit_ts if has_fit else None, window_size=cfg.window,
            stale_after_s=cfg.stale_window_s, in_flight_since=self._in_flight_since,
            hang_threshold_s=hang_threshold(cfg, self._window), timeout_s=cfg.probe.timeout_s,
            expected=expected, last_error=self._last_error,
            metrics_problem=hook.problem if hook is not None else None,
            run_file=str(self.writer.path) if self.writer is not None else None,
            load=self._load_figures(), slo=self._slo_figures(), **self._users_figures(),
            **self._server_figures(), **self._path_figures(), **self._totals)

    def _path_figures(self) -> dict:
        """A path's window summarised (``Session.path_summary``) and its failed transfers
        so far; nothing for a single server (or when the summary fails)."""
        session = self.session
        # a session stand-in (the incident bed drives the prober without sockets) has none
        if getattr(session, "path", None) is None:
            return {}
        try:
            return {"path": session.path_summary(list(self._window), self._info),
                    "kv_failed_total": session.path.failed_total}
        except Exception:  # never into the probing or a scrape
            log.exception("path figures failed for %s", self.cfg.label)
            return {}

    def _objectives(self) -> tuple:
        """The target's objectives for its server's model (``exporter.slo``)."""
        info = self._info
        return objectives_of(self.cfg.slo, self.cfg.probe.model or (info.model if info else None))

    def _slo_figures(self) -> tuple:
        """Each objective's counters (the users' new spans counted now) and state."""
        if not self.cfg.slo:
            return ()
        try:
            objectives = self._objectives()
            trace = self.session.trace if self.session is not None else None
            if trace is not None:
                self._slo.users(objectives, trace.recent())
            return self._slo.figures(objectives, self._health.slo if self._health else ())
        except Exception:  # never into the probing
            log.exception("objectives failed for %s", self.cfg.label)
            return ()

    @property
    def users(self):
        """The users' requests of this target (``session.Session.users``: ``window(now)``,
        ``before()``, ``recent()``, ``stats()``), None before the session is built."""
        return self.session.users if self.session is not None else None

    def _users_figures(self) -> dict:
        """The snapshot's ``users`` window (against the window fit) and ``spans``."""
        users = self.users
        if users is None:
            return {}
        try:
            fit = self._health.fit if self._health is not None else None
            w = users.window(fit=fit)
            trace = self.session.trace
            return {"users": w if w.source != "none" else None,
                    "spans": trace.stats() if trace is not None else None}
        except Exception:  # never into the probing
            log.exception("users' window failed for %s", self.cfg.label)
            return {}

    def _server_figures(self) -> dict:
        """The snapshot's ``server_start_time_s`` and ``server_changes`` (counts by
        kind, every kind present once the watch runs)."""
        watch = self.session.server_watch if self.session is not None else None
        if watch is None:
            return {}
        return {"server_start_time_s": watch.start_time_s,
                "server_changes": tuple(sorted(watch.counts.items()))}

    def _load_figures(self) -> LoadFigures | None:
        gen = self.session.load if self.session is not None else None
        if gen is None:
            return None
        try:
            return load_figures(gen, list(self._window), time.perf_counter())
        except Exception:  # never into the probing
            log.exception("load figures failed for %s", self.cfg.label)
            return None
