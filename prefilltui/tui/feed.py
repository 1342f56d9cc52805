"""One watched target's live data, kept whether or not its dashboard is on screen.

``FeedConfig`` is how a target is watched (built once by the command: its runner
factory, telemetry source, analysis options, pacing, run file ...); ``TargetFeed``
holds what its probes have told so far: the ``LiveSummary`` (counts, the running fit,
bounded percentile buffers), the recent results, the runner's state.  The app feeds
it from the runner's messages (one thread: the app's); the dashboard screen and the
fleet overview read it.  No widget here.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Protocol

from prefilltui.measure.otlp import UsersTrace
from prefilltui.measure.users_metrics import WINDOW_S as USERS_WINDOW_S, UsersMetrics
from prefilltui.measure.telemetry import TelemetrySnapshot
from prefilltui.model import defaults
from prefilltui.model.fleet import ITL_GOAL_S, Advice, CacheFinding, advise, target_inputs
from prefilltui.model.fit import LinearFit
from prefilltui.model.fleet import RecentProbes
from prefilltui.model.fleet import HANG_AFTER_S
from prefilltui.model.summary import LiveSummary
from prefilltui.model.metrics import MetricsSample
from prefilltui.model.pacing import Pacing
from prefilltui.model.spec import AnalysisOptions
from prefilltui.model.summary import LiveFacts, RunSummary
from prefilltui.model.types import FitScope, ProbeResult, RunnerState, ServerInfo
from prefilltui.model.fit import Progress
from prefilltui.model.server_change import ServerChange
from prefilltui.model.users import UsersEvidence, UsersWindow
from prefilltui.render.users import users_lines


class TelemetrySource(Protocol):
    """Where telemetry is read: a started ``measure.telemetry.Sampler`` (local NVML,
    the CPU, a remote GPU page, or nothing), or a test's sampler of real snapshots."""

    def snapshot(self) -> TelemetrySnapshot: ...


class Runner(Protocol):
    """What the app drives and reads: ``measure.sweep.runner.SweepRunner`` (or a test's fake)."""

    state: RunnerState
    state_detail: str
    notes: list[str]  # each said once (lengths capped at the context, ...)
    cap_note: str | None  # "context cap", "time cap": for the status line

    @property
    def server_info(self) -> ServerInfo | None: ...
    @property
    def notices(self) -> dict[str, str]: ...
    @property
    def lengths(self) -> list[int]: ...
    @property
    def progress(self) -> Progress | None: ...

    def start(self) -> None: ...
    def stop(self, timeout: float | None = ...) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def burst(self) -> None: ...
    def set_range(self, lo: int, hi: int) -> None: ...


#: runner_factory(on_result, on_state) -> the Runner (SweepRunner) the app drives.
RunnerFactory = Callable[[Callable[[ProbeResult], None], Callable[[str, str], None]], Runner]
#: exporter(results, fit snapshot) -> files written (``commands.exports.make_exporter``).
Exporter = Callable[[list[ProbeResult], Any], list[Path]]

#: Throughput points kept per target for the overview's sparkline.
SPARK_POINTS = 48


@dataclass(frozen=True)
class FeedConfig:
    """How one target is watched (built once by the command, or by a test).

    label: the name shown (a TOML ``name``, else the URL without credentials);
    runner_factory: see ``RunnerFactory``; sampler / gpu_source: where its telemetry
    comes from and that in words ("local NVML", "dcgm-exporter at URL", "no GPU
    source: ..."); analysis: the fit shown, window and roofline inputs; baseline: the
    ``--baseline`` run's fit (the drift warning); sweep_range: the (shortest, longest)
    prompt; context_cap: the longest prompt the server takes, when known; run_path,
    exporter, cache_checker: the dashboard's ``e`` and ``c``; probe_timeout_s: the
    per-probe cap (the cache check waits for a probe in flight that long); pacing:
    how the runner spaces probes (the help says it); problems: said once at start;
    start_delay_s: when the runner starts after the app (the fleet's stagger);
    max_results: recent results kept in memory (every probe is in the run file);
    url: the server URL as shown (credentials as ***); baseline_tok_s /
    baseline_source: an explicit throughput baseline for the health rules (a target's
    ``expected_throughput`` or ``baseline_run``, the ``--baseline`` run's fit);
    baseline_roofline: the roofline's expected throughput is the baseline
    (``expected_throughput = "roofline"``); hang_after_s / interval_s: the hang
    threshold's floor and the probe interval (the hung and stalled rules); metrics: the latest ``/metrics`` sample of the session
    (the advisor's context and prompt-length facts); itl_goal_s: the advisor's ITL goal.
    """

    label: str
    runner_factory: RunnerFactory
    sampler: TelemetrySource | None = None
    gpu_source: str | None = None
    analysis: AnalysisOptions = AnalysisOptions()
    baseline: LinearFit | None = None
    sweep_range: tuple[int, int] = (defaults.MIN_TOKENS, defaults.MAX_TOKENS)
    context_cap: int | None = None
    run_path: Path | None = None
    exporter: Exporter | None = None
    cache_checker: Callable[[], CacheFinding] | None = None
    probe_timeout_s: float = defaults.TIMEOUT_S
    pacing: Pacing | None = None
    problems: tuple[str, ...] = ()
    start_delay_s: float = 0.0
    max_results: int = 100_000
    url: str = ""
    baseline_tok_s: float | None = None
    baseline_source: str | None = None
    baseline_roofline: bool = False
    hang_after_s: float = HANG_AFTER_S
    interval_s: float | None = None
    metrics: Callable[[], MetricsSample | None] | None = None
    itl_goal_s: float = ITL_GOAL_S
    load: Any = None
    #: the users' requests from the server's traces (``measure.otlp.UsersTrace``,
    #: ``--otlp-listen``), None without a receiver
    users: UsersTrace | UsersMetrics | None = None
    #: the server's restarts and changes of the last 10 minutes, oldest first
    #: (``measure.server_watch.ServerWatch.recent``); None: not watched
    server_changes: Callable[[], tuple[ServerChange, ...]] | None = None


@dataclass
class _Spark:
    """(unix time, prompt tokens/s) of the all-time fit, one point per summary that
    saw new probes (so a burst of probes between two redraws costs one fit)."""

    points: deque = field(default_factory=lambda: deque(maxlen=SPARK_POINTS))
    seen: int = -1  # LiveSummary.version of the last point


class TargetFeed:
    """One target's live data (see the module docstring).  ``index`` is its place in
    the app's list of feeds (messages carry it)."""

    def __init__(self, config: FeedConfig, index: int = 0, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.index = index
        self.clock = clock
        #: (monotonic s, the users' window then): the redraw's two reads share one window
        self._users_memo: tuple[float, UsersWindow | None] | None = None
        self._slo_memo: tuple[tuple, tuple] | None = None
        self.runner: Runner | None = None
        self.live = LiveSummary(config.analysis)  # the idle fit: no probe under load
        #: each background-load level's own summary (probes under that load, fitted as
        #: if idle there: ``model.load.levels``)
        self.levels: dict[float, LiveSummary] = {}
        self.results: deque[ProbeResult] = deque(maxlen=config.max_results)
        self.windows: deque[tuple[float, float]] = deque(maxlen=256)
        self.last_ok: ProbeResult | None = None
        self.last_probe_at: float | None = None  # unix time the last probe ended
        self.probing_since: float | None = None  # unix time the probe in flight started
        self.state: str = "waiting" if config.start_delay_s > 0 else "connecting"
        self.state_detail = ""
        self.paused = False
        self.which: FitScope = "all"
        self.sweep_range = tuple(config.sweep_range)
        self.context_cap = config.context_cap
        self.device_names: tuple[str, ...] = ()
        self.device_label: str | None = None
        self.version = 0  # bumps on every probe and state change: a cache key for rows
        self.spark = _Spark()
        self.start_error: str | None = None
        self.recent = RecentProbes()
        #: the last cache check's finding (the dashboard's ``c``), for the advisor
        self.cache: CacheFinding | None = None
        #: probes added since the start or the last ``reset_fit`` (the recent results
        #: the verdict reads are only these)
        self.since_reset = 0
        #: probes of the whole session, ok and failed: never reset (the exit line and
        #: the exit code read them; the run file holds them all)
        self.session_total = self.session_ok = self.session_failed = 0
        #: the server changes ``new_server_changes`` already handed out (their seen_s)
        self._changes_told: set[tuple[float, str]] = set()

    # -- runner
    def start(self, on_result: Callable[[ProbeResult], None],
              on_state: Callable[[str, str], None]) -> None:
        """Build and start the runner; a failure (an empty sweep, ...) becomes the
        "failed" state with the reason, never an exception."""
        try:
            self.runner = self.config.runner_factory(on_result, on_state)
            self.runner.start()
        except Exception as exc:  # noqa: BLE001 - said on screen, the app goes on
            self.start_error = f"cannot start probing: {exc}"
            self.set_state("failed", self.start_error)

    def stop(self, timeout: float = 2.0) -> None:
        if self.runner is not None:
            try:
                self.runner.stop(timeout=timeout)
            except Exception:  # noqa: BLE001 - never a traceback at exit
                pass

    @property
    def in_flight_s(self) -> float | None:
        """How long the probe in flight has been waiting (None: none in flight)."""
        return None if self.probing_since is None else max(0.0, self.clock() - self.probing_since)

    @property
    def info(self) -> ServerInfo | None:
        return self.runner.server_info if self.runner is not None else None

    # -- data in (the app's thread)
    def add(self, r: ProbeResult) -> None:
        """One probe: counts, fit, recent results, the request window, the sparkline."""
        self.results.append(r)
        self.live.add(r)  # its fit takes no probe under load (ProbeResult.fit_eligible)
        if r.load_level and r.level_eligible:
            level = self.levels.get(r.load_level)
            if level is None:
                level = self.levels[r.load_level] = LiveSummary(self.config.analysis)
            level.add(replace(r, load_level=None))
        self.since_reset += 1
        self.session_total += 1
        if r.ok:
            self.session_ok += 1
        else:
            self.session_failed += 1
        self.last_probe_at = self.clock()
        self.probing_since = None
        self.recent.add(r, self.last_probe_at)
        if r.ok:
            self.last_ok = r
        if r.t_send is not None and r.t_end is not None:
            self.windows.append((r.t_send, r.t_end))
        self.version += 1

    def set_state(self, state: str, detail: str = "") -> None:
        if state in ("probing", "burst"):
            if self.probing_since is None:
                self.probing_since = self.clock()
        else:
            self.probing_since = None
        if (state, detail) != (self.state, self.state_detail):
            self.state, self.state_detail = state, detail
            self.version += 1

    def reset_fit(self) -> None:
        """The dashboard's ``r``: forget everything derived from the probes so far (the
        fit, the counts, the percentiles, each load level's summary, the recent probes
        the verdict and the health rules read, the sparkline, the last probe's
        figures); ``results`` keeps them for the export (the run file has every
        probe)."""
        self.live = LiveSummary(self.config.analysis)
        self.levels.clear()
        self.spark = _Spark()
        self.recent = RecentProbes()
        self.last_ok = None
        self.since_reset = 0
        self.version += 1

    # -- telemetry
    def telemetry(self, snap: TelemetrySnapshot | None = None) -> TelemetrySnapshot | None:
        """The sampler's latest snapshot, or ``snap`` when the caller already read it
        (None without a sampler or when it fails); keeps ``device_names`` /
        ``device_label`` up to date (the roofline reads the GPU name)."""
        if self.config.sampler is None:
            return None
        if snap is None:
            try:
                snap = self.config.sampler.snapshot()
            except Exception:  # noqa: BLE001 - the dashboard says so; the fleet shows N/A
                return None
        names = tuple(d.name for d in snap.devices)
        if names != self.device_names:
            self.device_names = names
            devices = snap.devices
            if devices:
                first = devices[0].name or devices[0].label
                label = "CPU" if snap.kind == "cpu" else first
                self.device_label = label + (f" ×{len(devices)}" if len(devices) > 1 else "")
            self.version += 1
        return snap

    # -- views
    def summary(self, *, which: FitScope | None = None,
                live: LiveFacts | None = None) -> RunSummary:
        """The run summary now (``LiveSummary.summary``, cached until the next probe) over
        ``which`` (default: the dashboard's choice); records the all-time throughput for
        the sparkline when it saw new probes."""
        scope = which or self.which
        shown = self.shown()
        s = shown.summary(self.info, gpu_names=self.device_names, which=scope,
                          method=self.config.analysis.fit, live=live,
                          recent=self.recent_results() if shown is self.live else (),
                          baseline_fit=self.config.baseline)
        if self.spark.seen != self.live.version:
            self.spark.seen = self.live.version
            fit = s.fit if scope == "all" else self._all_time_fit()
            tps = fit.prefill_tokens_per_s if fit is not None else None
            if tps:
                self.spark.points.append((self.last_probe_at or self.clock(), tps))
        return s

    def current_level(self) -> float:
        """The background-load level of the last ok probe since the last reset (0:
        idle)."""
        last = next((r for r in reversed(self.recent_results()) if r.ok and not r.warmup),
                    None)
        return float(last.load_level or 0.0) if last is not None else 0.0

    def shown(self) -> LiveSummary:
        """The summary shown: the current load level's own, else the idle one."""
        level = self.current_level()
        return self.levels.get(level, self.live) if level else self.live

    def recent_results(self, n: int = 40) -> tuple[ProbeResult, ...]:
        """The last ``n`` probes since the last reset (the "why is TTFT high" verdict
        reads them)."""
        n = min(n, self.since_reset)
        return tuple(itertools.islice(reversed(self.results), n))[::-1]

    def _all_time_fit(self) -> LinearFit | None:
        snap = self.live.fit.snapshot("all", self.config.analysis.fit)
        return snap.fit if snap is not None else None

    def advice(self, summary: RunSummary) -> tuple[Advice, ...]:
        """What the advisor makes of this target's measurements (``model.fleet.advisor``)."""
        sample = self.config.metrics() if self.config.metrics is not None else None
        return advise(target_inputs(summary, self.info, self.recent_results(),
                                    cache=self.cache, itl_goal_s=self.config.itl_goal_s,
                                    metrics=sample))

    # -- the users' requests (the server's traces)
    def users_window(self, now_s: float | None = None) -> UsersWindow | None:
        """The users' window now (``UsersTrace.window``) against the all-time idle fit,
        with the server's running/waiting gauges as last scraped; None without a
        receiver.  ``config.users.before()`` / ``.recent()`` give the rest."""
        trace = self.config.users
        if trace is None:
            return None
        t = time.monotonic()
        if now_s is None and self._users_memo is not None and t - self._users_memo[0] < 0.1:
            return self._users_memo[1]  # one redraw reads it for the stats and the verdict
        sample = self.config.metrics() if self.config.metrics is not None else None
        w = trace.window(now_s, fit=self._all_time_fit(),
                         running=sample.get("running") if sample is not None else None,
                         waiting=sample.get("waiting") if sample is not None else None)
        if now_s is None:
            self._users_memo = (t, w)
        return w

    def users_evidence(self) -> UsersEvidence:
        """What the users' requests tell the verdict (``viewmodel.verdict_now`` reads
        it): the users' window now and their kept requests (head-of-line needs their
        prefill intervals); the empty ``UsersEvidence`` without a receiver.
        ``users_before`` is left to the feed's ``HeldExpectation`` (the users' window
        of the last healthy verdict)."""
        trace = self.config.users
        changes = self.server_changes()
        if trace is None:
            return UsersEvidence(server_changes=changes)
        return UsersEvidence(users_now=self.users_window(), user_requests=trace.recent(),
                             server_changes=changes)

    # -- the server itself
    def server_changes(self) -> tuple[ServerChange, ...]:
        """The server's restarts and changes of the last 10 minutes, oldest first (the
        verdict's ``UsersEvidence.server_changes``); () when not watched or it fails."""
        get = self.config.server_changes
        if get is None:
            return ()
        try:
            return tuple(get())
        except Exception:  # noqa: BLE001 - the verdict goes on without them
            return ()

    def new_server_changes(self) -> list[ServerChange]:
        """The changes not handed out before (the probe log's lines), oldest first."""
        recent = self.server_changes()
        out = [c for c in recent if (c.seen_s, c.kind) not in self._changes_told]
        if out:  # remember only what is still recent: bounded however long it runs
            self._changes_told = {(c.seen_s, c.kind) for c in recent}
        return out

    def users_lines(self) -> list[str]:
        """The users' window as the stats panel's lines (``render.users.users_lines``),
        with how many probes got their own span; none without a receiver."""
        trace = self.config.users
        if trace is None:
            return []
        st = trace.stats()
        n = st.probes_matched + st.probes_expired if st is not None else 0
        matched = f"probes' own spans {st.probes_matched}/{n}" if n else None
        return users_lines(self.users_window(), matched=matched)

    def slo(self) -> tuple:
        """Each TTFT objective now (``LiveSummary.slo``: n_max at the held idle line and
        at the window's, the probes' attainment, the users' from their spans), cached
        until the next probe or span; () without ``--slo``."""
        if not self.config.analysis.slo:
            return ()
        # the burn windows end now (unix s, the spans' clock), re-judged once a second
        key = (self.live.version, self.users_version(), id(self.info), int(time.time()))
        if self._slo_memo is not None and self._slo_memo[0] == key:
            return self._slo_memo[1]
        statuses, _notes = self.live.slo(self.info, self.users_evidence(),
                                         baseline_fit=self.config.baseline, now_s=time.time(),
                                         users_buckets=self._users_buckets(),
                                         buckets_window_s=USERS_WINDOW_S)
        self._slo_memo = (key, statuses)
        return statuses

    def _users_buckets(self) -> tuple:
        """The server's TTFT histogram over the users' window (``UsersMetrics``, the
        /metrics source; or the span receiver's fallback to it), () without one."""
        users = self.config.users
        for src in (users, getattr(users, "fallback", None)):
            read = getattr(src, "ttft_buckets", None)
            if callable(read):
                return read(window_s=USERS_WINDOW_S)
        return ()

    def users_version(self) -> int:
        """What the users' source has taken so far (``UsersTrace.version``; 0 without
        spans): the redraw compares it with the one it drew, an int read per tick."""
        return self.config.users.version if self.config.users is not None else 0

    def user_points(self, limit: int = 2000) -> list[tuple[int, float]]:
        """The kept users' requests with a prompt count and a TTFT, as (prompt tokens,
        TTFT ms) for the plot: the newest ``limit``."""
        trace = self.config.users
        if trace is None:
            return []
        rs = [u for u in trace.recent() if u.prompt_tokens is not None and u.ttft_s is not None]
        return [(int(u.prompt_tokens), u.ttft_s * 1000.0) for u in rs[-limit:]]

    @property
    def notices(self) -> dict[str, str]:
        return dict(self.runner.notices) if self.runner is not None else {}
