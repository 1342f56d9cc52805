"""A vLLM-like serving engine on a simulated clock: ``SimEngine``.

What it models (all of it a design of this test bed, none of it a measurement of a
real server):

- continuous batching: ``max_num_seqs`` slots, an FCFS waiting queue, one engine step
  at a time; each step decodes one token for every running request that finished its
  prefill and prefills waiting / partly prefilled prompts up to ``token_budget``
  tokens.  With ``chunked_prefill`` a prompt is split over steps; without it a prompt
  is taken whole or not at all, and a waiting prompt longer than the budget left in
  the step holds everyone behind it until the next step (vLLM's FCFS ``break``);
- the step time: ``step_fixed_s`` + prefill tokens x ``prefill_s_per_token`` x
  ``prefill_slowdown`` + decodes x ``decode_s_per_seq``, times (1 + a seeded normal
  jitter of ``jitter`` s.d., clipped at +-3 s.d.);
- the first token of a request is produced by the step that finishes its prefill (so a
  ``max_tokens=1`` probe finishes there); TTFT = that step's end - arrival; queue time
  = first scheduled - arrival; prefill time = first token - first scheduled (vLLM's
  ``time_in_queue`` / ``time_in_model_prefill`` split);
- a prefix cache of ``block_size``-token blocks, ``kv_blocks`` in all, LRU over the
  blocks no running request holds; a request's prompt blocks are looked up when it is
  first scheduled (contiguous from the start, at most ``(n - 1) // block_size`` blocks,
  as vLLM leaves the last token to compute) and cached once its prefill is done;
  queries and hits counted in tokens (``vllm:prefix_cache_queries`` / ``_hits``); with
  the cache off nothing is looked up or counted (vLLM 0.32 counts no queries then);
- what it publishes: ``metrics_text()`` in vLLM 0.32's names and ``finished`` request
  records (``Finished``) the OTLP side turns into ``llm_request`` spans.

What it does not model: preemption and swapping (a request that finds no KV blocks
waits), speculative decoding, the front end's tokenisation and detokenisation time
(the client adds its own few ms), multi-GPU, LoRA, priorities, a request that fails.
The prompt's content is reduced to which blocks it shares: ``Prompt(shared_id,
shared_len, uid, n)`` -- the first ``shared_len`` tokens are a prefix shared by every
prompt with that ``shared_id``, the rest is the request's own.

Seconds everywhere; ``now`` is the simulated clock (seconds since the run began).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import OrderedDict, deque
from dataclasses import dataclass, field

#: vLLM's bucket bounds, as vllm/v1/metrics/loggers.py builds them (from its source as
#: remembered for this test bed, not checked against 0.32's file): TTFT, the request
#: latency family (queue, prefill, e2e) and the 1-2-5 prompt-length buckets up to the
#: context.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                   50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


def one_two_five(limit: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``limit`` (vLLM's ``build_1_2_5_buckets``)."""
    out, exp = [], 0
    while True:
        for m in (1, 2, 5):
            v = m * 10 ** exp
            if v > limit:
                return tuple(float(x) for x in out)
            out.append(v)
        exp += 1


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt reduced to what the prefix cache sees: ``n`` tokens, the first
    ``shared_len`` of them a prefix shared by every prompt of ``shared_id`` ("" for
    none), the rest this prompt's own (``uid``)."""

    n: int
    uid: str
    shared_id: str = ""
    shared_len: int = 0

    def block_key(self, i: int, block: int) -> tuple:
        if self.shared_id and (i + 1) * block <= self.shared_len:
            return (self.shared_id, i)
        return (self.uid, i)


@dataclass(slots=True, eq=False)
class Request:
    """One request inside the engine (times on the simulated clock, s)."""

    rid: str
    prompt: Prompt
    max_tokens: int
    arrival: float
    who: str = "user"  # "user", "probe", or an incident client's name
    scheduled: float | None = None
    first_token: float | None = None
    finished: float | None = None
    computed: int = 0  # prompt tokens computed or taken from the cache
    cached: int = 0  # prompt tokens served from the prefix cache
    generated: int = 0
    blocks: int = 0  # KV blocks held
    looked: bool = False  # its prefix was looked up (counted once)

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prompt.n


@dataclass(frozen=True, slots=True)
class Finished:
    """A finished request as the engine's span tells it (vLLM ``llm_request``)."""

    rid: str
    who: str
    arrival: float
    end: float
    prompt_tokens: int
    completion_tokens: int
    max_tokens: int
    ttft_s: float
    queue_s: float
    prefill_s: float
    decode_s: float
    e2e_s: float
    cached_tokens: int  # kept for the truth; vLLM 0.32's span does not carry it


@dataclass
class EngineConfig:
    """The engine's knobs (see the module docstring); defaults: a mid-sized model on
    one GPU as this test bed imagines it (10k prompt tokens/s, 15 ms a step)."""

    max_num_seqs: int = 32
    token_budget: int = 16384
    chunked_prefill: bool = True
    chunk_budget: int = 2048  # the step's token budget when chunked prefill is on
    step_fixed_s: float = 0.015
    prefill_s_per_token: float = 1e-4
    decode_s_per_seq: float = 5e-5
    jitter: float = 0.03
    block_size: int = 16
    kv_blocks: int = 16384
    prefix_caching: bool = True
    max_model_len: int = 32768

    @property
    def budget(self) -> int:
        return self.chunk_budget if self.chunked_prefill else self.token_budget


class _Hist:
    """A cumulative Prometheus histogram: counts per bound, +Inf, sum."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, v: float) -> None:
        for i, b in enumerate(self.bounds):
            if v <= b:
                self.counts[i] += 1
                break
        else:
            self.counts[-1] += 1
        self.sum += v

    def lines(self, name: str, labels: str) -> list[str]:
        out, acc = [], 0
        for b, c in zip(self.bounds + (math.inf,), self.counts):
            acc += c
            le = "+Inf" if math.isinf(b) else repr(float(b))
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {float(acc)}')
        out.append(f"{name}_count{{{labels}}} {float(acc)}")
        out.append(f"{name}_sum{{{labels}}} {self.sum!r}")
        return out


class SimEngine:
    """The engine (module docstring).  ``submit`` a request at its arrival time,
    ``run_until(t)`` to let the engine work up to ``t``; ``metrics_text()`` and
    ``take_finished()`` are what it publishes.  ``start_s``: the process start, in the
    simulated clock (``process_start_time_seconds`` adds ``epoch_s``)."""

    def __init__(self, cfg: EngineConfig, *, seed: int = 0, start_s: float = 0.0,
                 epoch_s: float = 1.8e9, model: str = "sim-model") -> None:
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.now = start_s
        self.start_s = start_s
        self.epoch_s = epoch_s
        self.model = model
        self._pending: list[tuple[float, int, Request]] = []  # arrivals not yet seen
        self._n = 0
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._step: tuple[float, list[tuple[Request, int]], list[Request]] | None = None
        self._waiting_gauge = 0
        self._running_gauge = 0
        #: LRU of cached blocks no request holds: key -> None (oldest first)
        self._lru: OrderedDict[tuple, None] = OrderedDict()
        self._held: dict[tuple, int] = {}  # cached block key -> requests holding it
        self._used = 0  # blocks held by running requests
        self.finished: list[Finished] = []
        self.all_finished: list[Finished] = []
        #: a multiplier on the per-token prefill cost (an incident's slower prefill)
        self.prefill_slowdown = 1.0
        # counters and histograms (reset with the process)
        self.prompt_tokens_total = 0.0
        self.generation_tokens_total = 0.0
        self.cache_queries = 0.0
        self.cache_hits = 0.0
        self.tokens_cache_hit = 0.0
        self.tokens_compute = 0.0
        self.success = 0.0
        self.h_ttft = _Hist(TTFT_BUCKETS)
        self.h_queue = _Hist(LATENCY_BUCKETS)
        self.h_prefill = _Hist(LATENCY_BUCKETS)
        self.h_e2e = _Hist(LATENCY_BUCKETS)
        self.h_prompt = _Hist(one_two_five(cfg.max_model_len))
        self.steps = 0
        self.busy_s = 0.0
        #: requests whose first token ends ``run_until`` early (the probe in flight)
        self.watched: set[Request] = set()
        #: called as on_finish(engine, finished) (a closed-loop client resubmits)
        self.on_finish = None

    # -- requests in
    def submit(self, rid: str, prompt: Prompt, max_tokens: int, arrival: float,
               who: str = "user") -> Request:
        """A request that reaches the engine at ``arrival`` (>= ``now`` is not
        required: one that arrived during a step is seen at the next)."""
        r = Request(rid, prompt, max(1, int(max_tokens)), arrival, who)
        self._n += 1
        heapq.heappush(self._pending, (arrival, self._n, r))
        return r

    # -- the clock
    def run_until(self, t: float) -> float | None:
        """Work until ``t``: every step that ends by ``t`` is done; a step that began
        before ``t`` and ends after it stays in flight (its results come at its end).
        Returns early, with the time, after a step that gave a ``watched`` request its
        first token (the driver then lets the client see it); else None."""
        while True:
            if self._step is not None:
                end = self._step[0]
                if end > t:
                    return None
                if self._finish_step():
                    return self.now
                continue
            self._admit_arrivals()
            if self.running or self.waiting:
                self._start_step()
                continue
            if self._pending and self._pending[0][0] <= t:
                self.now = max(self.now, self._pending[0][0])
                continue
            self.now = max(self.now, t)
            return None

    def _admit_arrivals(self) -> None:
        while self._pending and self._pending[0][0] <= self.now:
            self.waiting.append(heapq.heappop(self._pending)[2])

    # -- the prefix cache
    def _lookup(self, r: Request) -> int:
        """Cached prompt tokens for ``r`` (contiguous blocks from the start), counted."""
        cfg = self.cfg
        if not cfg.prefix_caching:
            return 0
        n, b = r.prompt.n, cfg.block_size
        hit = 0
        for i in range((n - 1) // b):
            key = r.prompt.block_key(i, b)
            if key in self._lru or key in self._held:
                hit += 1
            else:
                break
        self.cache_queries += n
        self.cache_hits += hit * b
        return hit * b

    def _blocks_free(self) -> int:
        return self.cfg.kv_blocks - self._used

    def _take_blocks(self, r: Request) -> bool:
        need = math.ceil((r.prompt.n + r.max_tokens) / self.cfg.block_size)
        if need > self._blocks_free():
            return False
        self._used += need
        r.blocks = need
        # cached blocks no request holds are evicted when the free pool needs them
        over = len(self._lru) + self._used - self.cfg.kv_blocks
        while over > 0 and self._lru:
            self._lru.popitem(last=False)
            over -= 1
        return True

    def _hold_prefix(self, r: Request, upto_tokens: int) -> None:
        """The prompt's full blocks up to ``upto_tokens`` are now cached and held."""
        if not self.cfg.prefix_caching:
            return
        b = self.cfg.block_size
        for i in range(upto_tokens // b):
            key = r.prompt.block_key(i, b)
            if key in self._held:
                self._held[key] += 1
            else:
                self._lru.pop(key, None)
                self._held[key] = 1

    def _release(self, r: Request) -> None:
        self._used -= r.blocks
        r.blocks = 0
        if not self.cfg.prefix_caching:
            return
        b = self.cfg.block_size
        for i in range(r.prompt.n // b):
            key = r.prompt.block_key(i, b)
            c = self._held.get(key)
            if c is None:
                continue
            if c <= 1:
                del self._held[key]
                self._lru[key] = None
                self._lru.move_to_end(key)
            else:
                self._held[key] = c - 1

    # -- one step
    def _start_step(self) -> None:
        cfg = self.cfg
        budget = cfg.budget
        plan: list[tuple[Request, int]] = []  # (request, prefill tokens this step)
        decodes: list[Request] = []
        for r in self.running:
            if r.prefilling:
                continue
            if budget <= 0:
                break
            decodes.append(r)
            budget -= 1
        for r in self.running:
            if not r.prefilling or budget <= 0:
                continue
            k = min(r.prompt.n - r.computed, budget)
            plan.append((r, k))
            budget -= k
        while self.waiting and len(self.running) < cfg.max_num_seqs and budget > 0:
            r = self.waiting[0]
            if not r.looked:
                r.cached, r.looked = self._lookup(r), True
            cached = r.cached
            need = r.prompt.n - cached
            if not cfg.chunked_prefill and need > budget:
                break
            if not self._take_blocks(r):
                break
            self.waiting.popleft()
            r.scheduled = self.now
            r.cached = r.computed = cached
            self._hold_prefix(r, cached)
            self.running.append(r)
            k = min(need, budget)
            plan.append((r, k))
            budget -= k
        prefill_tokens = sum(k for _, k in plan)
        dur = (cfg.step_fixed_s + prefill_tokens * cfg.prefill_s_per_token * self.prefill_slowdown
               + len(decodes) * cfg.decode_s_per_seq)
        z = max(-3.0, min(3.0, self.rng.gauss(0.0, 1.0)))
        dur *= max(0.05, 1.0 + cfg.jitter * z)
        self._running_gauge = len(self.running)
        self._waiting_gauge = len(self.waiting)
        self._step = (self.now + dur, plan, decodes)
        self.steps += 1
        self.busy_s += dur

    def _finish_step(self) -> bool:
        """Apply the step in flight; True when a watched request got its first token."""
        end, plan, decodes = self._step
        woke = False
        self._step = None
        self.now = end
        done: list[Request] = []
        for r in decodes:
            r.generated += 1
            self.generation_tokens_total += 1
            if r.generated >= r.max_tokens:
                done.append(r)
        for r, k in plan:
            before = r.computed
            r.computed += k
            if self.cfg.prefix_caching:
                self._hold_prefix_range(r, before, r.computed)
            if not r.prefilling:
                r.first_token = end
                r.generated = 1
                self.generation_tokens_total += 1
                n = r.prompt.n
                self.prompt_tokens_total += n
                self.tokens_cache_hit += r.cached
                self.tokens_compute += n - r.cached
                self.h_ttft.observe(end - r.arrival)
                woke = woke or r in self.watched
                if r.generated >= r.max_tokens:
                    done.append(r)
        for r in done:
            self._finish(r, end)
        return woke

    def _hold_prefix_range(self, r: Request, a: int, b_tok: int) -> None:
        b = self.cfg.block_size
        for i in range(a // b, b_tok // b):
            if i * b < r.cached:
                continue
            key = r.prompt.block_key(i, b)
            if key in self._held:
                self._held[key] += 1
            else:
                self._lru.pop(key, None)
                self._held[key] = 1

    def _finish(self, r: Request, end: float) -> None:
        r.finished = end
        self.running.remove(r)
        self._release(r)
        q = r.scheduled - r.arrival
        p = r.first_token - r.scheduled
        e2e = end - r.arrival
        self.h_queue.observe(q)
        self.h_prefill.observe(p)
        self.h_e2e.observe(e2e)
        self.h_prompt.observe(r.prompt.n)
        self.success += 1
        f = Finished(rid=r.rid, who=r.who, arrival=r.arrival, end=end,
                     prompt_tokens=r.prompt.n, completion_tokens=r.generated,
                     max_tokens=r.max_tokens, ttft_s=r.first_token - r.arrival, queue_s=q,
                     prefill_s=p, decode_s=end - r.first_token, e2e_s=e2e,
                     cached_tokens=r.cached)
        self.finished.append(f)
        self.all_finished.append(f)
        self.watched.discard(r)
        if self.on_finish is not None:
            self.on_finish(self, f)

    def take_finished(self) -> list[Finished]:
        """The requests finished since the last call (for the span exporter)."""
        out, self.finished = self.finished, []
        return out

    # -- what it publishes
    def metrics_text(self) -> str:
        """The /metrics page now, in vLLM 0.32's names (``vllm:`` series with
        ``model_name`` and ``engine`` labels, ``process_start_time_seconds``)."""
        lab = f'engine="0",model_name="{self.model}"'
        out = [
            "# TYPE process_start_time_seconds gauge",
            f"process_start_time_seconds {self.epoch_s + self.start_s!r}",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="{self.cfg.block_size}",'
            f'enable_prefix_caching="{self.cfg.prefix_caching}",engine="0",'
            f'gpu_memory_utilization="0.9",num_gpu_blocks="{self.cfg.kv_blocks}"}} 1.0',
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lab}}} {float(self._running_gauge)}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{lab}}} {float(self._waiting_gauge)}",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{lab}}} {self._used / self.cfg.kv_blocks!r}",
        ]
        for name, v in (("vllm:prompt_tokens_total", self.prompt_tokens_total),
                        ("vllm:generation_tokens_total", self.generation_tokens_total),
                        ("vllm:prefix_cache_queries_total", self.cache_queries),
                        ("vllm:prefix_cache_hits_total", self.cache_hits)):
            out.append(f"# TYPE {name.removesuffix('_total')} counter")
            out.append(f"{name}{{{lab}}} {float(v)}")
        out.append("# TYPE vllm:prompt_tokens_by_source counter")
        for src, v in (("local_compute", self.tokens_compute),
                       ("local_cache_hit", self.tokens_cache_hit)):
            out.append(f'vllm:prompt_tokens_by_source_total{{{lab},source="{src}"}} {float(v)}')
        out.append("# TYPE vllm:request_success counter")
        out.append(f'vllm:request_success_total{{{lab},finished_reason="length"}} '
                   f"{float(self.success)}")
        for name, h in (("vllm:time_to_first_token_seconds", self.h_ttft),
                        ("vllm:request_queue_time_seconds", self.h_queue),
                        ("vllm:request_prefill_time_seconds", self.h_prefill),
                        ("vllm:e2e_request_latency_seconds", self.h_e2e),
                        ("vllm:request_prompt_tokens", self.h_prompt)):
            out.append(f"# TYPE {name} histogram")
            out += h.lines(name, lab)
        return "\n".join(out) + "\n"


@dataclass
class Replicas:
    """A redeploy behind one address: ``live`` takes new requests; the engines it
    replaced drain what they hold (their spans still come).  The /metrics page is the
    live engine's (a restart: counters from 0, a new ``process_start_time_seconds``)."""

    live: SimEngine
    draining: list[SimEngine] = field(default_factory=list)

    def engines(self) -> list[SimEngine]:
        return [self.live] + self.draining

    def redeploy(self, new: SimEngine) -> None:
        self.draining.append(self.live)
        self.live = new

    def run_until(self, t: float) -> float | None:
        """Every engine until ``t``; the earliest early return (``SimEngine.run_until``)."""
        woke = [w for w in (e.run_until(t) for e in self.engines()) if w is not None]
        return min(woke) if woke else None

    def take_finished(self) -> list[Finished]:
        out: list[Finished] = []
        for e in self.engines():
            out += e.take_finished()
        return out
