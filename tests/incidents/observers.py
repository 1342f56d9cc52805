"""The product's own observers, driven on the simulated clock.

Each observer is wired as the product wires it (``session.build_session``,
``attach_users``), from the product's own parts, so the parsing is tested too:

- the probe hooks in the session's order: ``MetricsHook`` (its ``MetricsReader``
  scrapes the engine's /metrics text through an ``httpx.MockTransport``; the scrape's
  page is handed to ``UsersMetrics.feed``), ``UsersMetrics`` (notes the probe), and
  with traces ``SpanHook`` (registers the probe with its ``UsersTrace``);
- with traces, spans reach ``UsersTrace`` as the receiver hands them on: an OTLP
  protobuf body -> ``codec.decode_request`` -> ``spans.read_batch`` ->
  ``TraceRouter.deliver``; the trace falls back to the /metrics window while no user
  span came, as ``attach_users`` sets it;
- ``ExporterObserver``: a ``TargetProber`` (its ``_begin_probe`` / ``_on_result`` as
  the runner calls them, its ``snapshot`` as a scrape reads it, so the verdict is
  judged again with the probe in flight);
- ``TuiObserver``: a ``TargetFeed`` (``add`` / ``set_state`` as the app calls them;
  judged as the dashboard's redraw does: ``feed.summary()`` then
  ``load_control.load_lines``, whose verdict is the one shown).

The product reads the wall clock in a few places (``time.time`` for unix stamps, the
probe in flight's age, the held users' reference's age); ``sim_time`` points the
``time`` module's clocks at the simulated clock while the product's synchronous code
runs, and the clocks that take one (``UsersTrace``, ``UsersMetrics``, ``TargetFeed``)
are given it.  The async scrape runs on real clocks (asyncio's timers need them).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from prefilltui.exporter.config import TargetConfig
from prefilltui.exporter.target import TargetProber
from prefilltui.measure.metrics_hook import MetricsHook, MetricsReader
from prefilltui.measure.otlp import SpanHook, TraceRouter, UsersTrace
from prefilltui.measure.otlp import codec
from prefilltui.measure.otlp.spans import read_batch
from prefilltui.measure.server_watch import ServerWatch
from prefilltui.measure.users_metrics import UsersMetrics
from prefilltui.model.diagnosis import TtftVerdict
from prefilltui.model.types import ProbeResult, ServerInfo
from tests.incidents.engine import Finished

#: Where the simulated clock's zero is in unix seconds.
EPOCH_S = 1.8e9


class SimClock:
    """The simulated clock: ``now`` seconds since the run began; ``unix()``."""

    def __init__(self) -> None:
        self.now = 0.0

    def unix(self) -> float:
        return EPOCH_S + self.now


@contextlib.contextmanager
def sim_time(clock: SimClock):
    """``time.time`` / ``monotonic`` / ``perf_counter`` read the simulated clock inside,
    in this thread only: any other thread (another test's server, an event loop) keeps
    the real clocks, so none of its timers is set on the simulated one."""
    saved = (time.time, time.monotonic, time.perf_counter)
    me = threading.get_ident()

    def shim(real):
        def now() -> float:
            return clock.unix() if threading.get_ident() == me else real()
        return now

    time.time, time.monotonic, time.perf_counter = (shim(f) for f in saved)
    try:
        yield
    finally:
        time.time, time.monotonic, time.perf_counter = saved


def span_body(finished: list[Finished], clock: SimClock) -> bytes:
    """One OTLP/HTTP protobuf export of vLLM 0.32 ``llm_request`` spans (its attribute
    names; no cached-token count, as 0.32's span has none)."""

    def kv(k, v):
        if isinstance(v, str):
            return KeyValue(key=k, value=AnyValue(string_value=v))
        if isinstance(v, int):
            return KeyValue(key=k, value=AnyValue(int_value=v))
        return KeyValue(key=k, value=AnyValue(double_value=float(v)))

    spans = []
    for f in finished:
        attrs = [kv("gen_ai.request.id", f.rid), kv("gen_ai.response.model", "sim-model"),
                 kv("gen_ai.request.max_tokens", f.max_tokens),
                 kv("gen_ai.usage.prompt_tokens", f.prompt_tokens),
                 kv("gen_ai.usage.completion_tokens", f.completion_tokens),
                 kv("gen_ai.latency.time_in_queue", f.queue_s),
                 kv("gen_ai.latency.time_to_first_token", f.ttft_s),
                 kv("gen_ai.latency.e2e", f.e2e_s),
                 kv("gen_ai.latency.time_in_scheduler", f.queue_s),
                 kv("gen_ai.latency.time_in_model_forward", f.prefill_s + f.decode_s),
                 kv("gen_ai.latency.time_in_model_execute", f.prefill_s + f.decode_s),
                 kv("gen_ai.latency.time_in_model_prefill", f.prefill_s),
                 kv("gen_ai.latency.time_in_model_decode", f.decode_s)]
        digest = hashlib.blake2b(f.rid.encode(), digest_size=24).digest()
        spans.append(Span(trace_id=digest[:16], span_id=digest[16:],
                          name="llm_request", kind=Span.SPAN_KIND_SERVER,
                          start_time_unix_nano=int((EPOCH_S + f.arrival) * 1e9),
                          end_time_unix_nano=int((EPOCH_S + f.end) * 1e9), attributes=attrs))
    res = ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])
    res.resource.attributes.append(KeyValue(key="service.name",
                                            value=AnyValue(string_value="vllm")))
    return ExportTraceServiceRequest(resource_spans=[res]).SerializeToString()


@dataclass
class Judgement:
    """One verdict read by an observer at simulated time ``t`` (s)."""

    t: float
    cause: str
    headline: str
    evidence: tuple
    whose: str

    @classmethod
    def of(cls, t: float, v: TtftVerdict | None) -> "Judgement":
        if v is None:
            return cls(t, "not_enough_data", "", (), "")
        return cls(t, v.cause, v.headline, tuple(v.evidence), v.whose)


class _Base:
    """What both observers share: the hooks, the users' sources, the span path."""

    kind = ""

    def __init__(self, source: str, clock: SimClock, page) -> None:
        self.source = source
        self.clock = clock
        self.loop = asyncio.new_event_loop()
        # a stream, not a read body: the reader streams it (``bounded.read_capped``)
        transport = httpx.MockTransport(lambda req: httpx.Response(
            200, headers={"content-type": "text/plain; version=0.0.4"},
            stream=httpx.ByteStream(page().encode())))
        reader = MetricsReader("http://sim:8000", "vllm",
                               client=httpx.AsyncClient(transport=transport))
        self.hook = MetricsHook(reader)
        # what the server says about itself, from the same scrapes (as build_session
        # wires it; its metadata reads need a server to ask, and there is none here)
        self.watch = ServerWatch(clock=clock.unix)
        self.hook.on_sample = self.watch.feed_sample
        self.users_metrics = UsersMetrics(clock=clock.unix)
        self.hook.on_text = self.users_metrics.feed
        self.trace: UsersTrace | None = None
        self.router: TraceRouter | None = None
        hooks = [self.hook, self.users_metrics]
        if source == "traces":
            self.trace = UsersTrace("sim", ("sim", "sim:8000"), clock=clock.unix)
            self.trace.fallback = self.users_metrics
            self.router = TraceRouter()
            self.router.add(self.trace)
            hooks.append(SpanHook(self.trace))
        self.hooks = hooks
        self.users = self.trace if self.trace is not None else self.users_metrics
        self.info = ServerInfo(base_url="http://sim:8000/v1", kind="vllm", model="sim-model",
                               context_tokens=32768, metrics_url="http://sim:8000/metrics")
        self.judgements: list[Judgement] = []

    @property
    def name(self) -> str:
        return f"{self.kind}/{self.source}"

    def before_probe(self) -> None:
        self.loop.run_until_complete(self.hook.before_probe(None))

    def after_probe(self, r: ProbeResult) -> None:
        for h in self.hooks:
            self.loop.run_until_complete(h.after_probe(r))

    def spans(self, body: bytes) -> None:
        if self.router is None:
            return
        req = codec.decode_request(body, "application/x-protobuf", None)
        with sim_time(self.clock):
            self.router.deliver(read_batch(req, received_s=self.clock.unix()))

    def close(self) -> None:
        self.loop.run_until_complete(self.hook.aclose())
        self.loop.run_until_complete(self.hook.reader._client.aclose())
        self.loop.close()


class ExporterObserver(_Base):
    """The exporter's ``TargetProber`` for one target at ``interval_s``."""

    kind = "exporter"

    def __init__(self, source: str, clock: SimClock, page, *, interval_s: float,
                 run_dir: Path) -> None:
        super().__init__(source, clock, page)
        self.cfg = TargetConfig(url="http://sim:8000", name="sim", interval_s=interval_s)
        self.prober = TargetProber(self.cfg, run_dir=run_dir, seed=1)
        self.prober.session = SimpleNamespace(users=self.users, trace=self.trace, load=None,
                                              metrics=self.hook, server_watch=self.watch)
        self.prober.metrics_hook = self.hook
        self.prober.runner = SimpleNamespace(server_info=self.info, state="probing",
                                             state_detail="")

    @property
    def lengths(self) -> tuple[int, ...]:
        return self.cfg.lengths

    def probe_started(self) -> None:
        with sim_time(self.clock):
            self.prober._begin_probe()
        self.before_probe()

    def probe_done(self, r: ProbeResult) -> None:
        self.after_probe(r)
        with sim_time(self.clock):
            self.prober._on_result(r)

    def judge(self) -> Judgement:
        with sim_time(self.clock):
            snap = self.prober.snapshot
        v = snap.summary.ttft_verdict if snap.summary is not None else None
        j = Judgement.of(self.clock.now, v)
        self.judgements.append(j)
        return j


class TuiObserver(_Base):
    """The TUI's ``TargetFeed`` and the dashboard's verdict."""

    kind = "tui"

    def __init__(self, source: str, clock: SimClock, page) -> None:
        super().__init__(source, clock, page)
        from prefilltui.tui.feed import FeedConfig, TargetFeed

        cfg = FeedConfig(label="sim", runner_factory=lambda on_result, on_state: None,
                         users=self.users, metrics=lambda: self.hook.last_sample,
                         url="http://sim:8000",
                         server_changes=lambda: self.watch.recent(clock.unix()))
        self.feed = TargetFeed(cfg, clock=clock.unix)
        self.feed.runner = SimpleNamespace(server_info=self.info, notices={})

    def probe_started(self) -> None:
        with sim_time(self.clock):
            self.feed.set_state("probing", "")
        self.before_probe()

    def probe_done(self, r: ProbeResult) -> None:
        self.after_probe(r)
        with sim_time(self.clock):
            self.feed.add(r)
            self.feed.set_state("idle", "")

    def judge(self) -> Judgement:
        from prefilltui.tui import load_view
        from prefilltui.tui.load_control import load_lines
        from prefilltui.tui.redraw import _Judged

        seen: list[TtftVerdict] = []
        real = load_view.ttft_verdict

        def spy(*a, **k):
            v = real(*a, **k)
            seen.append(v)
            return v

        load_view.ttft_verdict = spy
        try:
            with sim_time(self.clock):
                summary = self.feed.summary()
                roof = summary.roofline
                load_lines(self.feed, _Judged(roof.mfu if roof else None,
                                              summary.verdict.level))
        finally:
            load_view.ttft_verdict = real
        j = Judgement.of(self.clock.now, seen[-1] if seen else None)
        self.judgements.append(j)
        return j
