"""The exporter's targets as one set: started in the background, replaced on reload.

``Fleet(make_prober)`` holds one ``TargetProber`` per target label.  ``apply(configs)``
makes the set match ``configs``: a target whose configuration is unchanged keeps
probing (its window, histograms and counters stay), a changed one is restarted, a
removed one stopped, a new one queued.  Queued probers are started one by one by a
background thread, so ``/metrics`` is served from the first moment (every target is
listed at once; ``prefilltui_target_ready`` says which have not started and
discovered their server yet).  ``probers()`` is safe from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from prefilltui.exporter.config import TargetConfig
from prefilltui.exporter.target import TargetProber

log = logging.getLogger("prefilltui.exporter")

#: Seconds a removed or restarted target's probe in flight may take to stop.
STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Change:
    """What one ``apply`` did: target labels added, removed, restarted (changed), kept."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    restarted: tuple[str, ...] = ()
    kept: int = 0

    def line(self) -> str:
        parts = [f"{len(self.added)} added", f"{len(self.removed)} removed",
                 f"{len(self.restarted)} changed (restarted)", f"{self.kept} unchanged"]
        return ", ".join(parts)


class Fleet:
    """The targets (see the module docstring).  ``make_prober(cfg)`` builds a prober
    (not started); ``start_one(prober)`` starts it (default ``prober.start()``), and
    a failure there is logged and shown on the target's page (state "failed"), never
    stopping the others."""

    def __init__(self, make_prober: Callable[[TargetConfig], TargetProber]) -> None:
        self._make = make_prober
        self._lock = threading.Lock()
        self._by_label: dict[str, TargetProber] = {}
        self._queue: list[TargetProber] = []
        self._wake = threading.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._starter, name="prefilltui-starter",
                                        daemon=True)
        self._started_thread = False

    # -- reading (any thread)
    def probers(self) -> list[TargetProber]:
        with self._lock:
            return list(self._by_label.values())

    def __iter__(self):
        return iter(self.probers())

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_label)

    @property
    def pending(self) -> int:
        """Targets queued and not started yet."""
        with self._lock:
            return len(self._queue)

    # -- changing
    def apply(self, configs: list[TargetConfig]) -> Change:
        """Make the running set match ``configs`` (labels unique: ``config.unique``)."""
        added, removed, restarted, stops = [], [], [], []
        kept = 0
        with self._lock:
            wanted = {c.label: c for c in configs}
            for label in list(self._by_label):
                if label not in wanted:
                    stops.append(self._by_label.pop(label))
                    removed.append(label)
            for cfg in configs:
                old = self._by_label.get(cfg.label)
                if old is not None and old.cfg == cfg:
                    kept += 1
                    continue
                if old is not None:
                    stops.append(old)
                    restarted.append(cfg.label)
                else:
                    added.append(cfg.label)
                new = self._make(cfg)
                self._by_label[cfg.label] = new
                self._queue.append(new)
            self._queue = [p for p in self._queue if p not in stops]
            # keep the configured order for pages and /metrics
            order = {c.label: i for i, c in enumerate(configs)}
            self._by_label = dict(sorted(self._by_label.items(), key=lambda kv: order[kv[0]]))
        for p in stops:
            p.request_stop()
        for p in stops:
            p.stop(timeout=STOP_TIMEOUT_S)
        self._wake.set()
        if not self._started_thread:
            self._started_thread = True
            self._thread.start()
        return Change(tuple(added), tuple(removed), tuple(restarted), kept)

    def _starter(self) -> None:
        while not self._closing:
            with self._lock:
                p = self._queue.pop(0) if self._queue else None
            if p is None:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            try:
                p.start()
            except Exception as e:  # noqa: BLE001 - one target never stops the others
                log.error("target %s cannot start: %s", p.cfg.label, e)
                p.mark_failed(str(e))

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop every target (probes in flight cancelled), flush the run files."""
        self._closing = True
        self._wake.set()
        probers = self.probers()
        for p in probers:
            p.request_stop()
        deadline = time.monotonic() + timeout
        for p in probers:
            p.stop(timeout=max(0.1, deadline - time.monotonic()))


#: Most targets one exporter process probes (each is a thread with its own event loop;
#: measured per target, see docs/exporter.md).  More: run several exporters (``--shard``).
#: 1,000 measured plus 20 % for a hash shard's imbalance: 3,000 targets over 3 shards put
#: 1,041 in the largest (tests/bench/bench_shards.py, docs/kubernetes.md).
MAX_TARGETS = 1200
#: Open files one target may hold: its event loop (3: epoll and a self-pipe), its run
#: file (1), and up to 4 connections while discovery asks several things at once (1
#: kept afterwards).  Measured steady state: ~5 (docs/exporter.md).
FDS_PER_TARGET = 8
#: Open files beside the targets: HTTP connections (``http.MAX_CONNECTIONS``), the
#: listening socket, the render threads, stdio, Python's own.
FDS_BASE = 64


#: Memory the exporter holds, measured (tests/bench/bench_exporter_load.py --only fleet:
#: 500 targets, 129-139 MiB RSS after 60 s): the process, and each target in steady state.
#: deploy/prefilltui-exporter.service's MemoryMax is sized from these.
RSS_BASE_MIB = 65
RSS_PER_TARGET_MIB = 0.28
#: Most a target's reads hold at once while it sends oversized answers (the model-list
#: and tokenize caps of ``measure.bounded``).
RSS_HOSTILE_TARGET_MIB = 16

#: Fewest HTTP connections the exporter runs with (a Prometheus or two, a browser).
MIN_HTTP_CONNECTIONS = 16


def check_capacity(targets: int) -> int:
    """Refuse more than MAX_TARGETS targets, make sure the process may open the files
    they need, and return how many HTTP connections it can hold besides.

    A short soft RLIMIT_NOFILE is raised to the hard limit (as the Go runtime does for
    Prometheus and its exporters).  The HTTP side gets ``http.MAX_CONNECTIONS``, or
    what is left under the limit after the targets' worst case (``FDS_PER_TARGET``
    each) and ``FDS_BASE``: the targets' probes never run out of files because of
    scrapers (the old server, at 256 files, failed the healthy target's probes).

    Raises:
        ValueError: over MAX_TARGETS, or not even MIN_HTTP_CONNECTIONS left under the
            hard limit (the message gives the figures and where to raise the limit).
    """
    from prefilltui.exporter.http import MAX_CONNECTIONS

    if targets > MAX_TARGETS:
        raise ValueError(f"{targets} targets: one exporter probes at most {MAX_TARGETS} "
                         "(a thread and ~5 open files each); split them over several")
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return MAX_CONNECTIONS
    for_targets = FDS_BASE + FDS_PER_TARGET * targets
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    inf = resource.RLIM_INFINITY
    if soft != inf and soft < for_targets + MAX_CONNECTIONS and soft != hard:
        soft = hard if hard != inf else for_targets + MAX_CONNECTIONS
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    room = MAX_CONNECTIONS if soft == inf else min(MAX_CONNECTIONS, soft - for_targets)
    if room < MIN_HTTP_CONNECTIONS:
        raise ValueError(
            f"{targets} targets may need {for_targets + MIN_HTTP_CONNECTIONS} open files "
            f"({FDS_PER_TARGET} per target, {FDS_BASE} for the process, at least "
            f"{MIN_HTTP_CONNECTIONS} HTTP connections); the limit is {soft}: raise "
            "LimitNOFILE= in the systemd unit (or ulimit -n)")
    return room
