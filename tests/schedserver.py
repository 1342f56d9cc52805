"""A fake OpenAI-compatible server whose requests go through a simulated continuous-
batching scheduler with a chunk budget, on a real loopback socket (``FakeServer``'s
HTTP/1.1 handling).

One engine step at a time, as vLLM and llama.cpp run them: every decoding request
gets one token; the prefilling requests, first come first served, get prompt tokens
until the step holds ``budget`` tokens in all (the decode tokens count: a prompt of
``budget - decodes + 1`` tokens takes two chunks); ``budget=None`` prefills a whole
prompt in one step (no chunking).  A step lasts ``step_s + per_token_s x (prompt
tokens in it)``; its tokens are sent when it ends.  So, with D decode streams, the
stall and excess a P-token probe causes are known exactly::

    stall  = per_token_s x min(P, budget - D)       (budget None: per_token_s x P)
    excess = per_token_s x P

Prompt tokens are counted as whitespace-separated words (``/tokenize`` answers the
same count).  ``/metrics`` publishes vLLM's running/waiting gauges and the
inter-token-latency histogram of the simulated gaps (``vllm:inter_token_latency_
seconds``), so the server-side ITL can be read beside the client's gaps.

    with SchedServer(budget=256, step_s=0.02, per_token_s=0.001) as srv:
        srv.base_url
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from tests.fakeserver import FakeServer, QueueReply, Reply, Request, sse_data

#: The ITL histogram's bucket bounds (s), as vLLM 0.32.0 publishes them.
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)


@dataclass
class _Req:
    prompt_tokens: int
    max_tokens: int
    queue: asyncio.Queue
    t_arrived: float
    left: int = 0  # prompt tokens still to prefill
    emitted: int = 0
    last_token_at: float | None = None
    chunks: int = 0
    scheduled_at: float | None = None

    def __post_init__(self) -> None:
        self.left = self.prompt_tokens


@dataclass
class StepLog:
    """One engine step: when it ended, its decode tokens and prompt tokens."""

    t_end: float
    decodes: int
    prompt_tokens: int


@dataclass
class SchedStats:
    steps: list[StepLog] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    #: per request at its first token: (queue, prefill, ttft) seconds, as vLLM counts them
    phases: list[tuple[float, float, float]] = field(default_factory=list)
    #: per request at its first token: (prompt tokens, chunks its prefill took)
    prefills: list[tuple[int, int]] = field(default_factory=list)


class SchedServer(FakeServer):
    """See the module docstring.  ``kind``: "vllm" (``/version``, ``vllm:`` metrics)
    or "llama.cpp" (``/props`` with n_batch = budget)."""

    def __init__(self, *, budget: int | None = 256, step_s: float = 0.02,
                 per_token_s: float = 0.001, kind: str = "vllm", context: int = 8192,
                 model: str = "sched-model") -> None:
        super().__init__({})
        self.budget = budget
        self.step_s = step_s
        self.per_token_s = per_token_s
        self.kind = kind
        self.context = context
        self.model = model
        self.stats = SchedStats()
        self._reqs: list[_Req] = []
        self._kick: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self.script.update(self._routes())

    # ----------------------------------------------------------------- routes
    def _routes(self) -> dict:
        entry = {"id": self.model, "object": "model", "max_model_len": self.context}
        routes = {
            "GET /v1/models": Reply.json({"object": "list", "data": [entry]}),
            "GET /metrics": lambda req: Reply.text(self._metrics()),
            "POST /tokenize": lambda req: Reply.json(
                {"count": len(str(req.json.get("prompt", "")).split()),
                 "tokens": [], "max_model_len": self.context}),
            "POST /v1/completions": self._completion,
        }
        if self.kind == "vllm":
            routes["GET /version"] = Reply.json({"version": "0.32.0-sched"})
        else:
            routes["GET /props"] = Reply.json({"default_generation_settings": {"n_ctx": self.context},
                                               "total_slots": 2, "n_batch": self.budget})
        return routes

    def _metrics(self) -> str:
        running = sum(1 for r in self._reqs if r.left == 0)
        waiting = sum(1 for r in self._reqs if r.left > 0)
        if self.kind != "vllm":
            return (f"llamacpp:requests_processing {running}\n"
                    f"llamacpp:requests_deferred {waiting}\n")
        itl = list(self.stats.itl)
        lines = ["# TYPE vllm:num_requests_running gauge",
                 f'vllm:num_requests_running{{model_name="{self.model}"}} {running}',
                 "# TYPE vllm:num_requests_waiting gauge",
                 f'vllm:num_requests_waiting{{model_name="{self.model}"}} {waiting}',
                 "# TYPE vllm:inter_token_latency_seconds histogram"]
        for b in ITL_BUCKETS:
            n = sum(1 for g in itl if g <= b)
            lines.append(f'vllm:inter_token_latency_seconds_bucket{{le="{b}",model_name="{self.model}"}} {n}')
        lines.append(f'vllm:inter_token_latency_seconds_bucket{{le="+Inf",model_name="{self.model}"}} {len(itl)}')
        lines.append(f'vllm:inter_token_latency_seconds_sum{{model_name="{self.model}"}} {sum(itl)}')
        lines.append(f'vllm:inter_token_latency_seconds_count{{model_name="{self.model}"}} {len(itl)}')
        ph = list(self.stats.phases)
        for i, name in enumerate(("request_queue_time", "request_prefill_time", "time_to_first_token")):
            full = f"vllm:{name}_seconds"
            lines += [f"# TYPE {full} histogram",
                      f'{full}_bucket{{le="+Inf",model_name="{self.model}"}} {len(ph)}',
                      f'{full}_sum{{model_name="{self.model}"}} {sum(p[i] for p in ph)}',
                      f'{full}_count{{model_name="{self.model}"}} {len(ph)}']
        return "\n".join(lines) + "\n"

    def _completion(self, req: Request) -> Reply:
        body = req.json or {}
        n = max(1, len(str(body.get("prompt", "")).split()))
        if n + 1 > self.context:
            return Reply.json({"error": {"message": f"maximum context length is {self.context}"}},
                              status=400)
        q: asyncio.Queue = asyncio.Queue()
        r = _Req(n, int(body.get("max_tokens") or 16), q, time.perf_counter())
        self._reqs.append(r)
        if self._task is None:
            self._kick = asyncio.Event()
            self._task = asyncio.ensure_future(self._engine())
        self._kick.set()
        return QueueReply(200, {"Content-Type": "text/event-stream"}, queue=q, chunks=[])

    # ----------------------------------------------------------------- engine
    async def _engine(self) -> None:
        while True:
            if not self._reqs:
                self._kick.clear()
                await self._kick.wait()
                continue
            decodes = [r for r in self._reqs if r.left == 0]
            room = None if self.budget is None else max(0, self.budget - len(decodes))
            chunk: list[tuple[_Req, int]] = []
            for r in self._reqs:
                if r.left == 0:
                    continue
                take = r.left if room is None else min(r.left, room)
                if take <= 0:
                    break
                chunk.append((r, take))
                if room is not None:
                    room -= take
            tokens = sum(t for _, t in chunk)
            t_start = time.perf_counter()
            for r, _ in chunk:
                if r.scheduled_at is None:
                    r.scheduled_at = t_start
            await asyncio.sleep(self.step_s + self.per_token_s * tokens)
            now = time.perf_counter()
            self.stats.steps.append(StepLog(now, len(decodes), tokens))
            for r in decodes:
                self._emit(r, now)
            for r, take in chunk:
                r.left -= take
                r.chunks += 1
                if r.left == 0:
                    self._emit(r, now)  # the first token ends its prefill's last chunk

    def _emit(self, r: _Req, now: float) -> None:
        if r.last_token_at is not None:
            self.stats.itl.append(now - r.last_token_at)
        else:
            sched = r.scheduled_at if r.scheduled_at is not None else r.t_arrived
            self.stats.phases.append((sched - r.t_arrived, now - sched, now - r.t_arrived))
            self.stats.prefills.append((r.prompt_tokens, r.chunks))
        r.last_token_at = now
        r.emitted += 1
        done = r.emitted >= r.max_tokens
        r.queue.put_nowait(sse_data({"choices": [{"index": 0, "text": " w",
                                                  "finish_reason": "length" if done else None}]}))
        if done:
            r.queue.put_nowait(sse_data({"choices": [], "usage": {
                "prompt_tokens": r.prompt_tokens, "completion_tokens": r.emitted,
                "total_tokens": r.prompt_tokens + r.emitted}}))
            r.queue.put_nowait(b"data: [DONE]\n\n")
            r.queue.put_nowait(None)
            if r in self._reqs:
                self._reqs.remove(r)

    def _drop(self, q: asyncio.Queue) -> None:
        """A client went away: its request leaves the engine."""
        self._reqs = [x for x in self._reqs if x.queue is not q]


def expected(budget: int | None, decodes: int, prompt_tokens: int, per_token_s: float
             ) -> tuple[float, float]:
    """(stall, excess) the scheduler gives a ``prompt_tokens`` probe beside ``decodes``
    decode streams (module docstring)."""
    chunk = prompt_tokens if budget is None else min(prompt_tokens, budget - decodes)
    return per_token_s * chunk, per_token_s * prompt_tokens
