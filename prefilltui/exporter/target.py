"""One target of the exporter: a paced, continuous sweep and its health, as snapshots.

``TargetProber(cfg, run_dir=...)`` owns a ``SweepRunner`` (continuous, one probe in
flight, probe starts at least ``cfg.interval`` seconds apart plus up to 20 % jitter,
lengths reshuffled every round) in its own thread, a size-rotated run file, and the
state the ``/metrics`` page shows.  After every probe (in the runner's thread) it
refits the sliding window -- the last ``cfg.window`` successful probes -- and
publishes a new frozen ``TargetSnapshot``; a scrape only reads the newest snapshot,
so a slow or dead target never delays a scrape or another target.

Memory is bounded whatever the uptime: the window (``cfg.window`` results), one
histogram row per probed length, a few counters, and the runner's last
``KEEP_RESULTS`` results.  Every probe is in the run file.
"""

from __future__ import annotations

import argparse
import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefilltui.model.types import ERROR_KINDS, ProbeResult, ServerInfo
from prefilltui.exporter.config import JITTER, TargetConfig

log = logging.getLogger(__name__)

#: TTFT histogram bucket bounds in seconds, a 1-2-5 series from the fastest fixed cost
#: a loopback server shows (~5 ms) to the default probe timeout (60 s).
TTFT_BUCKETS_S = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 60.0)
#: Results the runner keeps in memory (the window holds its own).
KEEP_RESULTS = 8
#: Run file rotation defaults: 16 MiB (~25k probes, ~4 days at the default rate), 3 old files.
RUN_FILE_MAX_BYTES = 16 * 2**20
RUN_FILE_KEEP = 3

Bound = tuple[float | None, float | None]


@dataclass(frozen=True, slots=True)
class LengthHistogram:
    """TTFT histogram of one requested prompt length: cumulative bucket counts (one per
    ``TTFT_BUCKETS_S`` bound, then +Inf), sum in seconds, count."""

    tokens: int
    cumulative: tuple[int, ...]
    sum_s: float
    count: int


@dataclass(frozen=True, slots=True)
class Fit:
    """The window fit TTFT = a + b*n (seconds, tokens) with 95 % bounds; MFU when the
    peak and the parameter count are known.  An upper bound of None = unbounded."""

    n: int
    intercept_s: float
    intercept_ci: Bound
    slope_s_per_token: float
    throughput_tok_s: float | None
    throughput_ci: Bound
    mfu: float | None = None
    mfu_ci: Bound = (None, None)


@dataclass(frozen=True, slots=True)
class TargetSnapshot:
    """Everything ``/metrics`` shows for one target, read in one go.

    ``up``: None before the first probe or discovery attempt; False while the server is
    unreachable or the last probe failed.  ``ready``: the target's prober runs and has
    discovered its server (False while queued to start, connecting, or failed to start).  ``probes``: ((outcome, error_kind), count)
    pairs with every kind present (zeros included, so rates work from the start).
    ``parts_s``: median overhead / queue / prefill seconds over the window, where the
    server publishes them.  ``verdict``: analysis verdict level, or None before a fit.
    """

    target: str
    model: str
    server_kind: str
    api: str
    interval_s: float
    state: str = "connecting"
    detail: str = ""
    up: bool | None = None
    ready: bool = False
    last_probe_ts: float | None = None
    last_success_ts: float | None = None
    probes: tuple[tuple[tuple[str, str], int], ...] = ()
    cache_hit_probes: int = 0
    cached_tokens: int = 0
    prompt_tokens: int = 0
    histograms: tuple[LengthHistogram, ...] = ()
    fit: Fit | None = None
    verdict: str | None = None
    parts_s: tuple[tuple[str, float], ...] = ()
    metrics_problem: str | None = None
    run_file: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


#: Every verdict level ``analysis.analyze`` can return (the state set's states).
VERDICTS = ("healthy", "below", "short-prompts", "wrong", "impossible", "unknown-peak",
            "unknown-model", "no-slope", "insufficient", "failed")


def analysis_args(cfg: TargetConfig) -> argparse.Namespace:
    """The roofline/analysis settings of ``cfg`` in the shape ``analysis.analyze`` reads."""
    return argparse.Namespace(
        fit="robust", window=cfg.window, efficiency=cfg.efficiency, model=cfg.model,
        model_config=cfg.model_config, params=cfg.params, layers=cfg.layers, hidden=cfg.hidden,
        attn_width=cfg.attn_width, gpu=cfg.gpu, peak_tflops=cfg.peak_tflops,
        bandwidth_tbs=cfg.bandwidth_tbs, dtype=cfg.dtype)


def _bound(ci) -> Bound:
    if not ci:
        return (None, None)
    lo, hi = ci[0], ci[1] if len(ci) > 1 else None
    f = lambda v: float(v) if v is not None and math.isfinite(v) else None  # noqa: E731
    return (f(lo), f(hi))


def window_health(window: list[ProbeResult], info: ServerInfo | None, cfg: TargetConfig
                  ) -> tuple[Fit | None, str | None, tuple[tuple[str, float], ...]]:
    """(fit, verdict level, median TTFT parts) of the window's results: the same
    analysis ``sweep`` prints (``analysis.analyze``, robust fit) and the same breakdown
    as ``diagnose`` (``diagnose.breakdown``).  Never raises for bad data."""
    from prefilltui.model.analysis import analyze
    from prefilltui.model.diagnose import breakdown
    from prefilltui.model.running_fit import RunningFit

    rf = RunningFit(window=max(3, len(window)))
    for r in window:
        rf.add(r)
    a = analyze(window, info, analysis_args(cfg), running_fit=rf)
    f = a.get("fit") or {}
    fit = None
    if f.get("n"):
        roof = a.get("roofline") or {}
        fit = Fit(n=int(f["n"]), intercept_s=float(f["intercept_s"]),
                  intercept_ci=_bound(f.get("intercept_ci")),
                  slope_s_per_token=float(f["slope_s_per_token"]),
                  throughput_tok_s=f.get("prefill_tokens_per_s"),
                  throughput_ci=_bound(f.get("prefill_tokens_per_s_ci")),
                  mfu=roof.get("mfu"), mfu_ci=_bound(roof.get("mfu_ci")))
    verdict = (a.get("verdict") or {}).get("level")
    snap = rf.snapshot("all")
    b = breakdown(window, snap.fit if snap else None, last=len(window) or 1)
    med = b.get("median") or {}
    parts = tuple((k.removesuffix("_s"), float(med[k])) for k in ("overhead_s", "queue_s", "prefill_s")
                  if med.get(k) is not None)
    return fit, verdict, parts


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
        self.cfg = cfg
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
        self._totals = {"cache_hit_probes": 0, "cached_tokens": 0, "prompt_tokens": 0}
        self._health: tuple[Fit | None, str | None, tuple] = (None, None, ())
        self._last: dict[str, Any] = {"up": None, "probe": None, "success": None}
        self.metrics_hook = None
        self._life = threading.Lock()  # start() and stop() never interleave
        self._stopped = False
        self.snapshot = self._make_snapshot("queued", "waiting for its turn to start")

    # -- wiring
    def session_options(self) -> argparse.Namespace:
        """The options ``session.build_session`` builds this target's probing from: the
        probe client (URL, key variable, TLS, timeout), the ``/metrics`` hook, a
        size-rotated run file, and the pacing.  No local telemetry: the exporter rarely
        runs on the target's machine."""
        cfg = self.cfg
        return argparse.Namespace(
            api=cfg.api, model=cfg.model, api_key_env=cfg.api_key_env, timeout=cfg.timeout,
            insecure=cfg.insecure, seed=self.seed, lengths=list(cfg.lengths), warmup=1,
            no_telemetry=True, out=str(self.run_dir / f"{cfg.slug}.jsonl"),
            run_max_bytes=self.run_max_bytes, run_keep=self.run_keep,
            pause=0.0,  # no duty-cycle idle (the TUI's pacing): the interval is the pacing
            interval_s=cfg.interval, jitter=JITTER, keep_results=KEEP_RESULTS)

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
            self.runner = self.session.new_runner(on_result=self._on_result,
                                                  on_state=self._on_state)
            self.runner.start()
        return self

    def mark_failed(self, why: str) -> None:
        """The prober could not start (``why``: one line): shown as state "failed"."""
        self._last["up"] = False
        self.snapshot = self._make_snapshot("failed", why)

    def request_stop(self) -> None:
        """Ask the runner to stop (cancels the probe in flight); returns at once."""
        self._stopped = True
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
        was = self._last["up"]
        self._last["up"] = up
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
        self.snapshot = self._make_snapshot(state, detail)

    def _on_result(self, r: ProbeResult) -> None:
        self._info = self.runner.server_info if self.runner is not None else self._info
        now = r.started_at or time.time()
        self._last["probe"] = now
        self._set_up(bool(r.ok), f"{r.error_kind}: {r.error_message}")
        if r.ok:
            self._last["success"] = now
            self._counts[("ok", "")] += 1
        else:
            key = ("failed", r.error_kind or "protocol")
            self._counts[key] = self._counts.get(key, 0) + 1
        if r.ok:
            if r.cache_hit:
                self._totals["cache_hit_probes"] += 1
                self._totals["cached_tokens"] += int(r.cached_tokens or 0)
            self._totals["prompt_tokens"] += int(r.prompt_tokens or r.requested_tokens or 0)
            if not r.warmup and r.ttft_s is not None:
                self._observe(r.requested_tokens, r.ttft_s)
                self._window.append(r)
                try:
                    self._health = window_health(list(self._window), self._info, self.cfg)
                except Exception:  # a fit problem must never stop the probing
                    log.exception("window fit failed for %s", self.cfg.label)
        self.snapshot = self._make_snapshot(self.runner.state if self.runner else "probing",
                                            self.runner.state_detail if self.runner else "")

    def _observe(self, tokens: int, ttft_s: float) -> None:
        row = self._hist.get(tokens)
        if row is None:
            row = self._hist[tokens] = [0.0] * (len(TTFT_BUCKETS_S) + 2)
        for i, b in enumerate(TTFT_BUCKETS_S):
            if ttft_s <= b:
                row[i] += 1
                break
        else:
            row[len(TTFT_BUCKETS_S)] += 1
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
        fit, verdict, parts = self._health
        hook = self.metrics_hook
        return TargetSnapshot(
            target=self.cfg.label, model=self.cfg.model or (info.model if info else None) or "",
            server_kind=info.kind if info else "", api=self.cfg.api,
            interval_s=self.cfg.interval, state=state, detail=detail, up=self._last["up"],
            ready=self.runner is not None and self.runner.server_info is not None,
            last_probe_ts=self._last["probe"], last_success_ts=self._last["success"],
            probes=tuple(sorted(self._counts.items())), histograms=tuple(hists),
            fit=fit, verdict=verdict, parts_s=parts,
            metrics_problem=hook.problem if hook is not None else None,
            run_file=str(self.writer.path) if self.writer is not None else None,
            **self._totals)
