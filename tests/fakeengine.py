"""A fake inference engine for scripted incidents: a scheduler with slots, a queue,
continuous batching with a chunked-prefill budget and a prefix cache, and traffic that
prefilltui does not send (its own bounded background users).

``Engine`` is the pure model, stepped on whatever clock its driver gives it:

- admission: a request waits (``waiting``) until one of ``slots`` is free, first come
  first served; once admitted it is ``running`` (its queue time ends there, as vLLM's
  ``time_in_queue`` does);
- the prefix cache: a request naming a shared prefix (a system prompt) whose tokens
  are cached gets them for free (``cached_tokens``); a prefix is cached when a request
  carrying it finishes its prefill, least recently used evicted past ``cache_size``;
  ``cache_enabled = False`` is the collapse (every lookup misses);
- one engine step at a time: every decoding request gets one token; the prefilling
  requests, first come first served, get prompt tokens until the step holds
  ``budget`` tokens (decode tokens count); a step lasts ``step_s + per_token_s x
  prompt tokens + decode_s x decodes``.  A long prompt ahead therefore holds every
  prompt behind it for its whole prefill (head-of-line blocking);
- what the server publishes: the running/waiting gauges, prompt-token and prefix-cache
  query/hit counters, TTFT and queue-time histograms (``metrics_text``: vLLM's names),
  and one ``UserRequest`` per finished user request (what its ``llm_request`` span says:
  ``spans`` JSON for an OTLP receiver, with vLLM's attribute names).

``Simulation`` drives an ``Engine`` on a simulated clock (seconds from 0; shown as unix
seconds from ``T0``): Poisson users, a prober that sends one probe at a time at most
every ``interval_s`` (as the exporter paces them: no cache hits, its prompts are
fresh, through an optional gateway delay), and a monitor that judges the verdict
every ``verdict_every_s`` the way the exporter does (a 40-probe window fit -- OLS by
default, cheaper here than the exporter's robust fit; ``method="robust"`` for its --
offered to a ``HeldExpectation``; the users' window of the last ``users_window_s``; the probe in
flight's age and the waiting gauge as read now).  The clock is simulated, so minutes
of traffic take a fraction of a second of CPU and every run is the same (seeded);
nothing here is a measured figure of any real server.

``EngineServer`` serves the same ``Engine`` on a real loopback socket in real time
(``FakeServer``'s HTTP/1.1): streaming ``/v1/completions``, ``/v1/models``,
``/version`` and ``/metrics``, with its own bounded background users, and POSTs each
user request's span as OTLP/HTTP JSON to ``otlp_url`` when given.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable

from prefilltui.model.fit import fit_ols
from prefilltui.model.fit import RunningFit
from prefilltui.model.types import ProbeResult
from prefilltui.model.users import UserRequest, UsersEvidence, UsersWindow
from prefilltui.model.diagnosis import HeldExpectation, TtftVerdict, ttft_verdict
from tests.fakeserver import FakeServer, QueueReply, Reply, Request, sse_data

#: Unix seconds of the simulated clock's 0.
T0 = 1_700_000_000.0
#: Histogram bounds (s) for TTFT and queue time (a subset of vLLM 0.32's).
TTFT_BUCKETS = (0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0)


@dataclass
class Req:
    """One request in the engine (times on the engine's clock, s)."""

    rid: str
    kind: str  # "probe" or "user"
    arrival: float
    prompt: int
    max_tokens: int
    prefix: str | None = None
    prefix_tokens: int = 0
    admitted: float | None = None
    first_token: float | None = None
    done: float | None = None
    cached: int = 0
    left: int = 0
    emitted: int = 0
    on_token: Callable[["Req", float], None] | None = None


@dataclass
class Counters:
    prompt_tokens: int = 0
    cache_queries: int = 0
    cache_hits: int = 0
    ttft: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)


class Engine:
    """The scheduler model (module docstring).  Not thread-safe: one driver."""

    def __init__(self, *, slots: int = 32, budget: int = 2048, step_s: float = 0.008,
                 per_token_s: float = 0.0002, decode_s: float = 0.0002,
                 cache_size: int = 16) -> None:
        self.slots, self.budget = slots, budget
        self.step_s, self.per_token_s, self.decode_s = step_s, per_token_s, decode_s
        self.cache_size = cache_size
        self.cache_enabled = True
        self._cache: OrderedDict[str, int] = OrderedDict()
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.counters = Counters()
        self.finished: list[Req] = []  # user requests done (their spans), drained by drivers
        self._step: list[tuple[Req, int]] = []
        self._decodes: list[Req] = []

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def submit(self, r: Req) -> None:
        self.waiting.append(r)

    def begin_step(self, now: float) -> float:
        """Admit what fits, compose one step; returns its duration (s)."""
        while self.waiting and len(self.running) < self.slots:
            r = self.waiting.popleft()
            r.admitted = now
            hit = (r.prefix is not None and self.cache_enabled and r.prefix in self._cache)
            if hit:
                self._cache.move_to_end(r.prefix)
            r.cached = min(r.prefix_tokens, r.prompt - 1) if hit else 0
            r.left = r.prompt - r.cached
            c = self.counters
            c.prompt_tokens += r.prompt
            c.cache_queries += r.prompt
            c.cache_hits += r.cached
            c.queue.append(now - r.arrival)
            self.running.append(r)
        self._decodes = [r for r in self.running if r.left == 0]
        room = max(0, self.budget - len(self._decodes))
        self._step = []
        for r in self.running:
            if r.left == 0:
                continue
            take = min(r.left, room)
            if take <= 0:
                break
            self._step.append((r, take))
            room -= take
        tokens = sum(t for _, t in self._step)
        return self.step_s + self.per_token_s * tokens + self.decode_s * len(self._decodes)

    def end_step(self, now: float) -> None:
        """The step ends at ``now``: its tokens are out."""
        for r in self._decodes:
            self._emit(r, now)
        for r, take in self._step:
            r.left -= take
            if r.left == 0:
                r.first_token = now
                self.counters.ttft.append(now - r.arrival)
                if r.prefix is not None and self.cache_enabled:
                    self._cache[r.prefix] = r.prefix_tokens
                    self._cache.move_to_end(r.prefix)
                    while len(self._cache) > self.cache_size:
                        self._cache.popitem(last=False)
                self._emit(r, now)
        self._step, self._decodes = [], []

    def _emit(self, r: Req, now: float) -> None:
        r.emitted += 1
        if r.on_token is not None:
            r.on_token(r, now)
        if r.emitted >= r.max_tokens:
            r.done = now
            self.running.remove(r)
            if r.kind == "user":
                self.finished.append(r)

    def metrics_text(self, model: str = "fake-engine", start_time_s: float | None = None) -> str:
        """vLLM-named /metrics: gauges, counters, TTFT and queue histograms, vLLM 0.32's
        ``vllm:cache_config_info`` (its prefix caching as set) and, given the server's
        start, the process collector's ``process_start_time_seconds``."""
        lab = f'model_name="{model}"'
        c = self.counters
        out = [] if start_time_s is None else [
            "# TYPE process_start_time_seconds gauge",
            f"process_start_time_seconds {start_time_s:.2f}"]
        out += ["# TYPE vllm:cache_config_info gauge",
                f'vllm:cache_config_info{{block_size="16",cache_dtype="auto",'
                f'enable_prefix_caching="{self.cache_enabled}",engine="0",'
                f'prefix_caching_hash_algo="sha256"}} 1.0']
        out += ["# TYPE vllm:num_requests_running gauge",
               f"vllm:num_requests_running{{{lab}}} {len(self.running)}",
               "# TYPE vllm:num_requests_waiting gauge",
               f"vllm:num_requests_waiting{{{lab}}} {len(self.waiting)}",
               "# TYPE vllm:prompt_tokens_total counter",
               f"vllm:prompt_tokens_total{{{lab}}} {c.prompt_tokens}",
               "# TYPE vllm:prefix_cache_queries_total counter",
               f"vllm:prefix_cache_queries_total{{{lab}}} {c.cache_queries}",
               "# TYPE vllm:prefix_cache_hits_total counter",
               f"vllm:prefix_cache_hits_total{{{lab}}} {c.cache_hits}"]
        for name, vals in (("vllm:time_to_first_token_seconds", c.ttft),
                           ("vllm:request_queue_time_seconds", c.queue)):
            out.append(f"# TYPE {name} histogram")
            for b in TTFT_BUCKETS:
                out.append(f'{name}_bucket{{le="{b}",{lab}}} {sum(1 for v in vals if v <= b)}')
            out += [f'{name}_bucket{{le="+Inf",{lab}}} {len(vals)}',
                    f"{name}_sum{{{lab}}} {sum(vals)}", f"{name}_count{{{lab}}} {len(vals)}"]
        return "\n".join(out) + "\n"


def user_request(r: Req, t0: float = T0) -> UserRequest:
    """What the server's span says about a finished request (no prompt text)."""
    return UserRequest(arrival_s=t0 + r.arrival, prompt_tokens=r.prompt,
                       ttft_s=r.first_token - r.arrival, queue_s=r.admitted - r.arrival,
                       prefill_s=r.first_token - r.admitted,
                       e2e_s=(r.done - r.arrival) if r.done is not None else None,
                       cached_tokens=r.cached, request_id=f"{r.rid}-0")


def otlp_span_json(u: UserRequest, service: str = "fake-engine") -> dict:
    """One ``llm_request`` span as an OTLP/HTTP JSON ``ExportTraceServiceRequest``,
    with vLLM 0.32's attribute names (vllm/tracing.py SpanAttributes)."""
    def num(k, v):
        return {"key": k, "value": {"doubleValue": float(v)}}

    start = int(u.arrival_s * 1e9)
    end = int((u.arrival_s + (u.e2e_s or u.ttft_s or 0.0)) * 1e9)
    attrs = [{"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": str(u.prompt_tokens)}},
             num("gen_ai.latency.time_to_first_token", u.ttft_s),
             num("gen_ai.latency.time_in_queue", u.queue_s),
             num("gen_ai.latency.time_in_model_prefill", u.prefill_s),
             num("gen_ai.latency.e2e", u.e2e_s or 0.0),
             {"key": "gen_ai.request.id", "value": {"stringValue": u.request_id}}]
    span = {"traceId": f"{abs(hash(u.request_id)):032x}"[-32:],
            "spanId": f"{abs(hash(u.request_id + 's')):016x}"[-16:], "name": "llm_request",
            "kind": 2, "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
            "attributes": attrs}
    return {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": service}}]},
        "scopeSpans": [{"scope": {"name": "vllm"}, "spans": [span]}]}]}


def _q(vals: list[float], q: float) -> float | None:
    if not vals:
        return None
    s = sorted(vals)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def users_window(reqs: list[UserRequest], now_s: float, window_s: float, *,
                 running: float | None = None, waiting: float | None = None) -> UsersWindow:
    """The users' window from their spans (the summary the receiver gives; computed
    here from the spans so the test needs nothing of it): those that arrived in the
    last ``window_s`` before ``now_s`` (unix s)."""
    got = [u for u in reqs if now_s - window_s <= u.arrival_s <= now_s]
    ttft = [u.ttft_s for u in got]
    toks = [float(u.prompt_tokens) for u in got]
    q = sum(u.queue_s for u in got)
    t = sum(u.ttft_s for u in got)
    prompt = sum(u.prompt_tokens for u in got)
    cached = sum(u.cached_tokens or 0 for u in got)
    return UsersWindow(source="traces", window_s=window_s, requests=len(got),
                       ttft_p50_s=_q(ttft, 0.5), ttft_p90_s=_q(ttft, 0.9),
                       ttft_p99_s=_q(ttft, 0.99), prompt_tokens_p50=_q(toks, 0.5),
                       prompt_tokens_p90=_q(toks, 0.9), queue_share=(q / t) if t else None,
                       prefix_cache_hit_rate=(cached / prompt) if prompt else None,
                       running=running, waiting=waiting)


@dataclass
class Traffic:
    """The users' traffic: Poisson ``rate`` per s, prompts uniform in ``prompt`` tokens,
    a shared prefix of ``prefix_tokens`` (one of ``prefixes``), ``max_tokens`` decoded;
    ``long_stream``: a closed-loop user sending ``long_tokens`` prompts back to back
    with ``long_think_s`` between them (0 tokens: none)."""

    rate: float = 1.0
    prompt: tuple[int, int] = (600, 1200)
    prefixes: int = 3
    prefix_tokens: int = 500
    max_tokens: tuple[int, int] = (8, 24)
    long_tokens: int = 0
    long_think_s: float = 0.3


@dataclass
class Verdict:
    t: float  # simulated seconds
    verdict: TtftVerdict


class Simulation:
    """An engine, its users, a prober and a monitor on a simulated clock (module
    docstring).  ``incident(sim)`` is called once at ``onset_s``: it changes the engine,
    the traffic or the gateway.  Bounded: ``run`` stops at ``end_s``; users are Poisson
    at the traffic's rate (the prober's probes are one at a time)."""

    def __init__(self, *, seed: int = 1, interval_s: float = 3.0, lengths=(128, 512, 1024, 2048),
                 traffic: Traffic | None = None, engine: Engine | None = None,
                 net_s: float = 0.002, verdict_every_s: float = 1.0, window: int = 40,
                 users_window_s: float = 30.0, method: str = "ols") -> None:
        self.rnd = random.Random(seed)
        self.method = method  # the window fit's (the exporter's is robust: slower here)
        self.engine = engine or Engine()
        self.traffic = traffic or Traffic()
        self.interval_s, self.lengths = interval_s, tuple(lengths)
        self.net_s, self.gateway_s = net_s, 0.0
        self.verdict_every_s = verdict_every_s
        self.users_window_s = users_window_s
        self.fit = RunningFit(window=window)
        self.window: deque[ProbeResult] = deque(maxlen=window)
        self.hold = HeldExpectation()
        self.spans: list[UserRequest] = []
        self.verdicts: list[Verdict] = []
        self.t = 0.0
        self._seq = 0
        self._probes = 0
        self._fitted, self._fit = -1, None
        self._probe: Req | None = None
        self._pending: Req | None = None
        self._probe_sent = 0.0
        self._probe_gauges = (0, 0)
        self._last_send = -math.inf
        self._next_user = self._draw_gap()
        self._next_long: float | None = 0.0 if self.traffic.long_tokens else None
        self._next_verdict = verdict_every_s

    # -- traffic
    def _draw_gap(self) -> float:
        return self.rnd.expovariate(self.traffic.rate) if self.traffic.rate > 0 else math.inf

    def _user(self, t: float, prompt: int | None = None, long: bool = False) -> None:
        tr = self.traffic
        self._seq += 1
        n = prompt or self.rnd.randint(*tr.prompt)
        pre = f"sys{self.rnd.randrange(tr.prefixes)}" if tr.prefixes and not long else None
        r = Req(f"user-{self._seq}", "user", t, n, self.rnd.randint(*tr.max_tokens), pre,
                min(tr.prefix_tokens, n - 1) if pre else 0)
        if long:
            r.on_token = self._long_token
        self.engine.submit(r)

    def _long_token(self, r: Req, now: float) -> None:
        if r.emitted >= r.max_tokens:  # done: the next long prompt after the think time
            self._next_long = now + self.traffic.long_think_s

    def _send_probe(self, t: float) -> None:
        self._probes += 1
        n = self.lengths[self._probes % len(self.lengths)]
        self._probe_sent, self._last_send = t, t
        self._probe_gauges = (len(self.engine.running), len(self.engine.waiting))
        r = Req(f"cmpl-probe{self._probes}", "probe", t + self.net_s / 2 + self.gateway_s, n, 1)
        r.on_token = self._probe_token
        self._probe = r
        self._pending = r  # reaches the server after the network and the gateway

    def _probe_token(self, r: Req, now: float) -> None:
        client_ttft = (now + self.net_s / 2 + self.gateway_s) - self._probe_sent
        server = now - r.arrival
        run0, wait0 = self._probe_gauges
        p = ProbeResult(seq=self._probes, requested_tokens=r.prompt, prompt_tokens=r.prompt,
                        ok=True, ttft_s=client_ttft, started_at=T0 + self._probe_sent,
                        queue_s=r.admitted - r.arrival, server_prefill_s=now - r.admitted,
                        server_ttft_s=server, overhead_s=client_ttft - server,
                        queue_source="metrics", cached_tokens=0,
                        server_running=float(max(run0, len(self.engine.running))),
                        server_waiting=float(max(wait0, len(self.engine.waiting))))
        self._probe = None
        self.window.append(p)
        if self.method != "ols":
            self.fit.add(p)

    # -- the monitor
    def _judge(self, t: float) -> None:
        if self.method == "ols":  # the window's plain fit, refitted per new probe
            if self._fitted != self._probes and len(self.window) >= 3:
                self._fitted = self._probes
                self._fit = fit_ols([r.tokens for r in self.window],
                                    [r.ttft_s for r in self.window])
            fit = self._fit
        else:
            snap = self.fit.snapshot("all", self.method)
            fit = snap.fit if snap is not None else None
        self.hold.offer(fit, self.window)
        eng = self.engine
        now_unix = T0 + t
        users = users_window(self.spans, now_unix, self.users_window_s,
                             running=len(eng.running), waiting=len(eng.waiting))
        # the spans over the probes' window (head-of-line reads their prefill intervals)
        since = min([r.started_at for r in self.window] + [now_unix - self.users_window_s])
        recent = [u for u in self.spans if u.arrival_s >= since - 10.0]
        in_flight = (t - self._probe_sent) if self._probe is not None else None
        evidence = UsersEvidence(users_now=users, users_before=self.hold.users_before,
                                 user_requests=tuple(recent))
        v = ttft_verdict(list(self.window), self.hold.expectation(), users_evidence=evidence,
                         in_flight_age_s=in_flight, waiting_now=float(len(eng.waiting)))
        self.hold.observe(v, users, now_unix)
        self.verdicts.append(Verdict(t, v))

    # -- the clock
    def run(self, end_s: float, *, onset_s: float | None = None,
            incident: Callable[["Simulation"], None] | None = None) -> "Simulation":
        eng = self.engine
        fired = incident is None
        while self.t < end_s:
            t = self.t
            if not fired and t >= onset_s:
                incident(self)
                fired = True
            while self._next_user <= t:
                self._user(self._next_user)
                self._next_user += self._draw_gap()
            if self._next_long is not None and self._next_long <= t:
                self._next_long = None  # set again when this one is done
                self._user(t, self.traffic.long_tokens, long=True)
            if self._probe is None and t >= self._last_send + self.interval_s:
                self._send_probe(t)
            if self._pending is not None and self._pending.arrival <= t:
                eng.submit(self._pending)
                self._pending = None
            while self._next_verdict <= t:
                self._judge(self._next_verdict)
                self._next_verdict += self.verdict_every_s
            if eng.busy:
                dur = eng.begin_step(t)
                self.t = t + dur
                eng.end_step(self.t)
                for r in eng.finished:
                    self.spans.append(user_request(r))
                eng.finished.clear()
                del self.spans[:-5000]  # bounded, as the receiver's window is
            else:
                nxt = [self._next_user, self._next_verdict, self._last_send + self.interval_s]
                if self._pending is not None:
                    nxt.append(self._pending.arrival)
                if self._next_long is not None:
                    nxt.append(self._next_long)
                if onset_s is not None and not fired:
                    nxt.append(onset_s)
                self.t = max(t + 1e-6, min(nxt))
        return self


class EngineServer(FakeServer):
    """The ``Engine`` on a real loopback socket in real time (module docstring).

    ``users``: a ``Traffic`` for the server's own background users (None: none;
    ``max_users`` bounds how many it ever sends); ``otlp_url``: where each finished
    user request's span is POSTed as OTLP/HTTP JSON (loopback only); ``spans``: the
    ``UserRequest`` of every finished user request, for the test to read.  Prompt
    tokens are counted as whitespace-separated words.
    """

    def __init__(self, engine: Engine | None = None, *, users: Traffic | None = None,
                 max_users: int = 200, otlp_url: str | None = None, seed: int = 1,
                 model: str = "fake-engine", context: int = 16384, port: int = 0) -> None:
        super().__init__({}, port=port)
        self.engine = engine or Engine()
        self.users, self.max_users, self.otlp_url = users, max_users, otlp_url
        self.model, self.context = model, context
        self.rnd = random.Random(seed)
        self.spans: list[UserRequest] = []
        self.otlp_posts = 0
        self._t0 = time.time()
        self._perf0 = time.perf_counter()
        self._kick: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._user_task: asyncio.Task | None = None
        self._sent_users = 0
        self._seq = 0
        entry = {"id": model, "object": "model", "max_model_len": context}
        self.script.update({
            "GET /v1/models": Reply.json({"object": "list", "data": [entry]}),
            "GET /version": Reply.json({"version": "0.32.0-fake-engine"}),
            "GET /metrics": lambda req: Reply.text(self.engine.metrics_text(self.model,
                                                                             self._t0)),
            "POST /tokenize": lambda req: Reply.json(
                {"count": len(str(req.json.get("prompt", "")).split()), "tokens": [],
                 "max_model_len": context}),
            "POST /v1/completions": self._completion,
        })

    def _now(self) -> float:
        return time.perf_counter() - self._perf0

    def _ensure(self) -> None:
        if self._task is None:
            self._kick = asyncio.Event()
            self._task = asyncio.ensure_future(self._engine_loop())
            if self.users is not None:
                self._user_task = asyncio.ensure_future(self._users())
        self._kick.set()

    def _completion(self, req: Request) -> Reply:
        body = req.json or {}
        n = max(1, len(str(body.get("prompt", "")).split()))
        if n + 1 > self.context:
            return Reply.json({"error": {"message": f"maximum context length is {self.context}"}},
                              status=400)
        q: asyncio.Queue = asyncio.Queue()
        self._seq += 1
        r = Req(f"cmpl-{self._seq}", "probe", self._now(), n, int(body.get("max_tokens") or 16))

        def token(r: Req, now: float) -> None:
            done = r.emitted >= r.max_tokens
            q.put_nowait(sse_data({"id": r.rid, "choices": [{"index": 0, "text": " w",
                                   "finish_reason": "length" if done else None}]}))
            if done:
                q.put_nowait(sse_data({"id": r.rid, "choices": [], "usage": {
                    "prompt_tokens": r.prompt, "completion_tokens": r.emitted,
                    "total_tokens": r.prompt + r.emitted}}))
                q.put_nowait(b"data: [DONE]\n\n")
                q.put_nowait(None)

        r.on_token = token
        self.engine.submit(r)
        self._ensure()
        return QueueReply(200, {"Content-Type": "text/event-stream"}, queue=q, chunks=[])

    async def _users(self) -> None:
        tr = self.users
        while self._sent_users < self.max_users and tr.rate > 0:
            await asyncio.sleep(self.rnd.expovariate(tr.rate))
            self._sent_users += 1
            self._seq += 1
            n = self.rnd.randint(*tr.prompt)
            pre = f"sys{self.rnd.randrange(tr.prefixes)}" if tr.prefixes else None
            self.engine.submit(Req(f"user-{self._seq}", "user", self._now(), n,
                                   self.rnd.randint(*tr.max_tokens), pre,
                                   min(tr.prefix_tokens, n - 1) if pre else 0))
            self._kick.set()

    async def _engine_loop(self) -> None:
        eng = self.engine
        while True:
            if not eng.busy:
                self._kick.clear()
                await self._kick.wait()
                continue
            start = self._now()
            dur = eng.begin_step(start)
            await asyncio.sleep(dur)
            eng.end_step(self._now())
            for r in eng.finished:
                u = user_request(r, self._t0)
                self.spans.append(u)
                if self.otlp_url:
                    asyncio.ensure_future(self._post(otlp_span_json(u)))
            eng.finished.clear()
            del self.spans[:-5000]

    async def _post(self, body: dict) -> None:
        """POST one OTLP/HTTP JSON body to ``otlp_url`` (loopback; errors ignored)."""
        from urllib.parse import urlsplit

        u = urlsplit(self.otlp_url)
        if u.hostname not in ("127.0.0.1", "localhost", "::1"):
            return
        data = json.dumps(body).encode()
        try:
            reader, writer = await asyncio.open_connection(u.hostname, u.port or 80)
            head = (f"POST {u.path or '/v1/traces'} HTTP/1.1\r\nHost: {u.hostname}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                    "Connection: close\r\n\r\n").encode()
            writer.write(head + data)
            await writer.drain()
            await asyncio.wait_for(reader.read(), 5)
            writer.close()
            self.otlp_posts += 1
        except (OSError, asyncio.TimeoutError):
            pass
