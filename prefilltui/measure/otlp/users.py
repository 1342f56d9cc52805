"""The users' requests of one target, as its server's spans tell them, and its probes'
own spans (``UsersTrace``); ``TraceRouter`` hands each span to its target.

Bounded: at most ``KEEP_REQUESTS`` users' requests, none older than ``KEEP_S``;
at most ``MAX_PENDING`` probes waiting for their span (each ``PENDING_S`` at most) and
``MAX_EARLY`` spans waiting for their probe.  Thread-safe: the receiver's thread adds
spans, the runner's thread registers probes, the UI reads windows.

A probe is known by its ``X-Request-Id`` (``ProbeNotes.request_id``,
``prefilltui-<session>-<n>``): vLLM makes the completion's id ``cmpl-<X-Request-Id>``
and the span's ``gen_ai.request.id`` that id + ``-0`` (one per prompt), so a span
whose id holds ``prefilltui-<hex>-<n>`` is a probe's (this session's, or another
prefilltui's: never a user's).  A span whose id holds ``prefilltui-load-<hex>-<n>`` is a
background load's request (``--load``): counted apart (``load_spans``), never a user's.
Every other request span is a user's.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict, deque
from dataclasses import replace
from typing import Callable, Iterable
from urllib.parse import urlsplit

from prefilltui.measure.otlp.spans import Batch
from prefilltui.measure.runfile import SPAN_RECORD
from prefilltui.model.fit import LinearFit
from prefilltui.model.probe_notes import ServerSpan
from prefilltui.model.types import ProbeResult
from prefilltui.model.users import (TraceStats, UserRequest, UsersWindow, apply_span, span_of,
                                    users_window)

#: The users' window (s): the figures of ``window()``; ``before()`` is the one before it.
WINDOW_S = 60.0
#: Users' requests kept: the two windows, and a count cap for a busy server.
KEEP_S = 2 * WINDOW_S + 30.0
KEEP_REQUESTS = 20_000
#: How long a probe waits for its span (vLLM exports within ~5 s), and how
#: many may wait; a span that came first waits as long for its probe.
PENDING_S = 30.0
MAX_PENDING = 512
MAX_EARLY = 512
#: Span latencies kept for the median (``TraceStats.latency_p50_s``).
KEEP_LATENCIES = 256
#: A probe's request id inside a span's ``gen_ai.request.id``.
PROBE_ID = re.compile(r"prefilltui-[0-9a-f]+-\d+")
#: A background load request's (``measure.load``: ``prefilltui-load-<hex>-<n>``).
LOAD_ID = re.compile(r"prefilltui-load-[0-9a-f]+-\d+")
#: Span identities remembered to drop a span sent again (``TraceRouter``): more than the
#: requests and early spans kept, so a retry within the users' windows is caught.
SEEN_SPANS = 2 * KEEP_REQUESTS + MAX_EARLY


class UsersTrace:
    """One target's users' requests and probe spans (see the module docstring).

    label: the target's label; names: resource attribute values that name this target
    (``TraceRouter``); runfile: where a probe's late span is appended as a
    ``{"record": "span"}`` line (``RunWriter.append_record``), None for none;
    on_span(result): called (receiver thread) when a probe got its span.
    """

    def __init__(self, label: str = "", names: Iterable[str] = (), *, runfile=None,
                 on_span: Callable[[ProbeResult], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.label = label
        self.names = frozenset(n for n in names if n)
        self.runfile = runfile
        self.on_span = on_span
        self._clock = clock
        self._lock = threading.Lock()
        self._users: deque[UserRequest] = deque(maxlen=KEEP_REQUESTS)
        self._pending: OrderedDict[str, tuple[ProbeResult, float]] = OrderedDict()
        self._early: OrderedDict[str, tuple[UserRequest, float]] = OrderedDict()
        self._latencies: deque[float] = deque(maxlen=KEEP_LATENCIES)
        self._n_users = self._matched = self._expired = self._foreign = 0
        #: spans of a background load's requests (prefilltui's own: not users)
        self.load_spans = 0
        #: bumped by every span that changes what a window or ``recent()`` shows (a
        #: user's, or a probe's own span matched): a reader redraws when it moved
        self.version = 0
        #: the probes' fit ``window()`` uses when not given one (the TUI's live fit)
        self.fit: Callable[[], LinearFit | None] = lambda: None
        #: where ``window()`` / ``before()`` read while no user span has come (the
        #: /metrics window, ``measure.users_metrics.UsersMetrics``), or None
        self.fallback = None

    # -- producers
    def add(self, u: UserRequest) -> None:
        """One request span (receiver thread): a probe's, or a user's."""
        if u.latency_s is not None:
            with self._lock:
                self._latencies.append(u.latency_s)
        if LOAD_ID.search(u.request_id):
            with self._lock:
                self.load_spans += 1
            return
        m = PROBE_ID.search(u.request_id)
        if m is None:
            if self.label and not u.target:
                u = replace(u, target=self.label)
            with self._lock:
                self._users.append(u)
                self._n_users += 1
                self.version += 1
                self._prune()
            return
        key = m.group(0)
        with self._lock:
            self._expire()
            got = self._pending.pop(key, None)
            if got is None:
                self._early[key] = (u, self._clock())
                while len(self._early) > MAX_EARLY:
                    self._early.popitem(last=False)
                    self._foreign += 1
                return
            self._matched += 1
            self.version += 1
        r = got[0]
        span = span_of(u)
        apply_span(r, span)
        self._record(r, span)

    def register_probe(self, r: ProbeResult) -> None:
        """A probe just finished (runner thread, before its run-file line is written):
        it takes its span now when the span came first, else waits for it."""
        rid = r.notes.request_id
        if not rid:
            return
        with self._lock:
            self._expire()
            early = self._early.pop(rid, None)
            if early is None:
                self._pending[rid] = (r, self._clock())
                while len(self._pending) > MAX_PENDING:
                    self._pending.popitem(last=False)
                    self._expired += 1
                return
            self._matched += 1
        apply_span(r, span_of(early[0]))  # written with the probe's own line

    def _record(self, r: ProbeResult, span: ServerSpan) -> None:
        if self.runfile is not None:
            try:
                self.runfile.append_record(SPAN_RECORD, {
                    "seq": r.seq, "request_id": r.notes.request_id, "span": span.to_json()})
            except (OSError, ValueError):
                pass  # the run file is closed or full: the live probe still has it
        if self.on_span is not None:
            try:
                self.on_span(r)
            except Exception:  # noqa: BLE001 - a consumer's bug never stops the receiver
                pass

    def _expire(self) -> None:
        """Drop probes and early spans older than PENDING_S (lock held)."""
        cut = self._clock() - PENDING_S
        while self._pending:
            _, (_, t) = next(iter(self._pending.items()))
            if t >= cut:
                break
            self._pending.popitem(last=False)
            self._expired += 1
        while self._early:
            _, (_, t) = next(iter(self._early.items()))
            if t >= cut:
                break
            self._early.popitem(last=False)
            self._foreign += 1

    def _prune(self) -> None:
        cut = self._clock() - KEEP_S  # by receipt: this machine's clock, whatever the server's
        while self._users and (self._users[0].received_s or self._users[0].finished_s) < cut:
            self._users.popleft()

    def wait_settled(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for every waiting probe's span (a headless sweep
        before it reports); returns how many still wait."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                self._expire()
                n = len(self._pending)
            if n == 0 or time.monotonic() >= deadline:
                return n
            time.sleep(0.1)

    # -- consumers
    def recent(self, since_s: float | None = None) -> tuple[UserRequest, ...]:
        """The users' requests kept (oldest first), those finished after ``since_s``
        when given."""
        with self._lock:
            self._prune()
            rs = tuple(self._users)
        return rs if since_s is None else tuple(u for u in rs if u.finished_s > since_s)

    def window(self, now_s: float | None = None, *, fit: LinearFit | None = None,
               window_s: float = WINDOW_S, running: float | None = None,
               waiting: float | None = None) -> UsersWindow:
        """The users' window ending at ``now_s`` (default: now), against ``fit`` (default:
        ``self.fit()``): ``model.users.users_window``; the fallback's (/metrics) while no
        user span has come.  When the spans count no cached tokens (vLLM 0.32's
        ``llm_request`` spans carry none) the prefix-cache hit rate is the fallback's
        over the same window (the server's prefix-cache counters, the probes' own
        tokens taken off): without it the users' cache could never be seen to stop
        hitting."""
        now = self._clock() if now_s is None else now_s
        if self._n_users == 0 and self.fallback is not None:
            return self.fallback.window(now, fit=fit, window_s=window_s, running=running,
                                        waiting=waiting)
        w = users_window(self.recent(), now_s=now, window_s=window_s,
                         fit=fit if fit is not None else self.fit(), running=running,
                         waiting=waiting)
        if w.prefix_cache_hit_rate is None and w.requests and self.fallback is not None:
            hit = self.fallback.window(now, window_s=window_s).prefix_cache_hit_rate
            if hit is not None:
                w = replace(w, prefix_cache_hit_rate=hit)
        return w

    def before(self, now_s: float | None = None, *, fit: LinearFit | None = None,
               window_s: float = WINDOW_S) -> UsersWindow | None:
        """The window just before ``window(now_s)`` (same length), to compare against;
        None when it holds no request."""
        now = self._clock() if now_s is None else now_s
        w = self.window(now - window_s, fit=fit, window_s=window_s)
        return w if w.requests else None

    def stats(self) -> TraceStats:
        with self._lock:
            self._expire()
            lat = sorted(self._latencies)
            return TraceStats(users=self._n_users, probes_matched=self._matched,
                              probes_expired=self._expired, foreign_probes=self._foreign,
                              probes_waiting=len(self._pending),
                              latency_p50_s=lat[len(lat) // 2] if lat else None)


class SpanHook:
    """The probe hook (``measure.sweep.config.ProbeHook``) that registers every probe
    with its target's ``UsersTrace`` before its run-file line is written."""

    def __init__(self, trace: UsersTrace) -> None:
        self.trace = trace

    async def before_probe(self, client) -> None:
        return None

    async def after_probe(self, result: ProbeResult) -> None:
        self.trace.register_probe(result)


def target_names(label: str, base_url: str) -> tuple[str, ...]:
    """The resource attribute values that name a target: its label, its URL's
    ``host:port`` and host (a server's ``OTEL_SERVICE_NAME`` /
    ``OTEL_RESOURCE_ATTRIBUTES=service.instance.id=HOST:PORT``)."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = None
    return tuple(n for n in (label, f"{host}:{port}" if host and port else "") if n)


class TraceRouter:
    """Hands each request span to its target's ``UsersTrace``: with one target, every
    span; with several, the target one of whose ``names`` a resource attribute of the
    span's resource equals (``spans.RESOURCE_KEYS``).  Spans of no target are counted
    (``unknown``) and dropped.  A span already delivered (the same trace and span id:
    OTLP exporters send a batch again when its answer was lost or late) is counted
    (``duplicates``) and dropped, so a retry never doubles the users."""

    def __init__(self) -> None:
        self._traces: list[UsersTrace] = []
        self._lock = threading.Lock()
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self.unknown = 0
        self.other = 0
        self.rejected = 0
        self.duplicates = 0

    def add(self, trace: UsersTrace) -> UsersTrace:
        with self._lock:
            self._traces.append(trace)
        return trace

    def remove(self, trace: UsersTrace) -> None:
        with self._lock:
            if trace in self._traces:
                self._traces.remove(trace)

    @property
    def traces(self) -> tuple[UsersTrace, ...]:
        return tuple(self._traces)

    def deliver(self, batch: Batch) -> None:
        with self._lock:
            traces = list(self._traces)
            self.other += batch.other
            self.rejected += batch.rejected
        for f in batch.found:
            if f.key:
                with self._lock:
                    if f.key in self._seen:
                        self.duplicates += 1
                        continue
                    self._seen[f.key] = None
                    while len(self._seen) > SEEN_SPANS:
                        self._seen.popitem(last=False)
            if not traces:
                with self._lock:
                    self.unknown += 1
                continue
            if len(traces) == 1:
                traces[0].add(f.request)
                continue
            values = {v for _, v in f.resource}
            hit = next((t for t in traces if t.names & values), None)
            if hit is None:
                with self._lock:
                    self.unknown += 1
                continue
            hit.add(f.request)
