"""The incidents, each with its truth, and the driver that runs one on the simulated clock.

An incident starts at ``ONSET_S`` = 150 s, after a healthy warm-up long enough for
the exporter at 5 s (~27 probes, every default length four or five times) and the TUI to hold
an expectation and the users' reference to have two full 60-s windows; the first
``SCORED_S`` = 60 s after onset are scored.  The control runs ``CONTROL_S`` = 600 s
with nothing injected.

A ``World`` is one engine (or a redeploy's replicas), the users' traffic, one probe
schedule (the exporter's at ``interval_s``, or the TUI's duty cycle) and the observers
that share those probes (the exporter with spans and from /metrics only, or the TUI
likewise): each observer gets its own ``ProbeResult`` of every probe, as its own
session would.  The spans are exported as vLLM's ``BatchSpanProcessor`` does by
default, every ``SPAN_EXPORT_S`` = 5 s.

Truth is taken from the engine itself (its requests' own records), never from what
an observer read.
"""

from __future__ import annotations

import heapq
import random
import statistics
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from prefilltui.model.types import ProbeResult
from tests.incidents.engine import EngineConfig, Prompt, Replicas, SimEngine
from tests.incidents.observers import (EPOCH_S, ExporterObserver, SimClock, TuiObserver,
                                       span_body)
from tests.incidents.traffic import (Flood, batch_client, exporter_gaps, rounds, users)

ONSET_S = 150.0
SCORED_S = 60.0
CONTROL_S = 600.0
SPAN_EXPORT_S = 5.0
#: The client's side of a probe (s): a scrape before it is sent (the metrics hook),
#: the network each way on a LAN, the client's own reading of the first SSE event.
SCRAPE_S = 0.002
NET_S = 0.0005
CLIENT_S = 0.001
#: The TUI's pacing: duty 50 % (idle >= the probe's TTFT), at least 2 s between probes
#: (``pacing.idle_floor_s`` with NVML's longest window, a GPU server).
TUI_IDLE_FLOOR_S = 2.0
TUI_LENGTHS = (4, 9, 19, 40, 87, 188, 406, 878, 1896, 4096)  # make_lengths(4, 4096, 10)
#: How often each observer is judged (s): a Prometheus scrape of the exporter every
#: second; the TUI's data redraw (at most every 2 s).
JUDGE_S = {"exporter": 1.0, "tui": 2.0}


@dataclass
class Incident:
    """One incident: its name, the cause that is right, when it starts, what it does
    to the world (``apply``) and how its truth is taken (``truth``: from the world
    after the run, a dict of figures)."""

    name: str
    cause: str
    what: str
    onset_s: float = ONSET_S
    duration_s: float = ONSET_S + SCORED_S
    engine: EngineConfig = field(default_factory=EngineConfig)
    apply: Callable[["World"], None] = lambda w: None
    grow: float = 1.0  # the users' prompt length factor from onset
    truth: Callable[["World"], dict] = lambda w: {}


class World:
    """One run (see the module docstring): ``run()`` returns the observers, judged."""

    def __init__(self, incident: Incident, observer: str, *, interval_s: float = 2.0,
                 seed: int = 40, run_dir: Path | None = None) -> None:
        self.incident = incident
        self.observer = observer
        self.interval_s = interval_s
        self.seed = seed
        self.clock = SimClock()
        self.replicas = Replicas(SimEngine(incident.engine, seed=seed, epoch_s=EPOCH_S))
        self.gateway_s = 0.0
        self._tmp = None
        if run_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="incidents-")
            run_dir = Path(self._tmp.name)
        page = lambda: self.replicas.live.metrics_text()  # noqa: E731
        if observer == "exporter":
            self.observers = [ExporterObserver(s, self.clock, page, interval_s=interval_s,
                                               run_dir=run_dir) for s in ("traces", "metrics")]
            self.lengths = self.observers[0].lengths
        else:
            self.observers = [TuiObserver(s, self.clock, page) for s in ("traces", "metrics")]
            self.lengths = TUI_LENGTHS
        self._events: list[tuple[float, int, str, object]] = []
        self._n = 0
        self._order = rounds(seed, self.lengths)
        self._gaps = exporter_gaps(seed, interval_s)
        self._seq = 0
        self._session = f"{random.Random(seed).getrandbits(32):08x}"
        self._flight = None  # (request, t_send, length, warmup, request id)
        self._last_start = -1e9
        self.probes: list[dict] = []  # the truth of every probe
        self.waiting: list[tuple[float, int]] = []  # (t, the engine's waiting) per judgement

    # -- events
    def at(self, t: float, kind: str, data: object = None) -> None:
        self._n += 1
        heapq.heappush(self._events, (t, self._n, kind, data))

    def run(self) -> list:
        inc = self.incident
        grow = (lambda t: inc.grow if t >= inc.onset_s else 1.0)
        for a in users(self.seed, inc.duration_s, grow=grow):
            self.at(a.t, "arrive", a)
        self.at(0.5, "probe")
        self.at(inc.onset_s, "onset")
        self.at(SPAN_EXPORT_S, "spans")
        self.at(1.0, "judge")
        try:
            while self._events:
                t, _, kind, data = heapq.heappop(self._events)
                if t > inc.duration_s:
                    break
                woke = self.replicas.run_until(t)
                if woke is not None and self._flight is not None:
                    self._seen(woke)
                    heapq.heappush(self._events, (t, _, kind, data))
                    continue
                self.clock.now = t
                getattr(self, "_" + kind)(data)
        finally:
            for o in self.observers:
                o.close()
            if self._tmp is not None:
                self._tmp.cleanup()
        return self.observers

    def _arrive(self, a) -> None:
        self.replicas.live.submit(a.rid, a.prompt, a.max_tokens, self.clock.now + self.gateway_s
                                  + NET_S, a.who)

    def _onset(self, _) -> None:
        self.incident.apply(self)

    def _spans(self, _) -> None:
        done = self.replicas.take_finished()
        if done:
            body = span_body(done, self.clock)
            for o in self.observers:
                o.spans(body)
        self.at(self.clock.now + SPAN_EXPORT_S, "spans")

    def _judge(self, _) -> None:
        self.waiting.append((self.clock.now, self.replicas.live._waiting_gauge))
        for o in self.observers:
            o.judge()
        self.at(self.clock.now + JUDGE_S[self.observer], "judge")

    # -- the probes
    def _probe(self, _) -> None:
        t = self.clock.now
        warm = self._seq == 0
        n = min(self.lengths) if warm else next(self._order)
        self._seq += 1
        rid = f"prefilltui-{self._session}-{self._seq}"
        for o in self.observers:
            o.probe_started()
        t_send = t + SCRAPE_S
        e = self.replicas.live
        req = e.submit(f"cmpl-{rid}-0", Prompt(n, f"probe-{self._session}-{self._seq}"), 1,
                       t_send + NET_S + self.gateway_s, "probe")
        e.watched.add(req)
        self._flight = (req, t_send, n, warm, rid)
        self._last_start = t

    def _seen(self, woke: float) -> None:
        """The probe's first token left the engine at ``woke``: the client reads it."""
        req, t_send, n, warm, rid = self._flight
        if req.first_token is None:
            return
        t_end = req.first_token + NET_S + CLIENT_S
        self.at(t_end, "probe_end", None)

    def _probe_end(self, _) -> None:
        req, t_send, n, warm, rid = self._flight
        self._flight = None
        t_end = self.clock.now
        ttft = t_end - t_send
        self.probes.append({"t": t_send, "n": n, "ttft_s": ttft, "queue_s": req.scheduled - req.arrival,
                            "prefill_s": req.first_token - req.scheduled, "warmup": warm})
        for o in self.observers:
            r = ProbeResult(seq=self._seq, started_at=EPOCH_S + t_send, requested_tokens=n,
                            prompt_tokens=n, prompt_tokens_source="usage", ttft_s=ttft,
                            ttfb_s=ttft, total_s=ttft + NET_S, ok=True, warmup=warm,
                            api="completions", model="sim-model", t_send=EPOCH_S + t_send,
                            t_end=EPOCH_S + t_end)
            r.notes.request_id = rid
            o.probe_done(r)
        if self.observer == "exporter":
            nxt = max(t_end, self._last_start + next(self._gaps))
        else:
            nxt = t_end + max(TUI_IDLE_FLOOR_S, ttft)
        self.at(nxt, "probe")

    # -- helpers for the incidents' truth
    def finished(self, who: str, lo: float, hi: float) -> list:
        """The engine's records of ``who``'s requests that finished in [lo, hi)."""
        out = []
        for e in self.replicas.engines():
            out += [f for f in e.all_finished if f.who == who and lo <= f.end < hi]
        return out

    def others(self, lo: float, hi: float) -> list:
        """Every request but the probes that finished in [lo, hi): what the users'
        window holds (the users and an incident's own clients)."""
        out = []
        for e in self.replicas.engines():
            out += [f for f in e.all_finished if f.who != "probe" and lo <= f.end < hi]
        return out


# -- the incidents
def _slow(k: float) -> Incident:
    def apply(w: World) -> None:
        w.replicas.live.prefill_slowdown = k

    return Incident(f"slow prefill x{k:g}", "slow_prefill",
                    f"the per-token prefill cost x{k:g} from onset", apply=apply,
                    truth=lambda w: {"ratio": k})


def _hol() -> Incident:
    def apply(w: World) -> None:
        for a in batch_client(w.clock.now, w.incident.duration_s):
            w.at(a.t, "arrive", a)

    return Incident("head-of-line", "head_of_line",
                    "a batch client sends a fresh 8,000-token prompt every 2.5 s; chunked "
                    "prefill off; slots free", engine=EngineConfig(chunked_prefill=False),
                    apply=apply, truth=lambda w: {"tokens": 8000})


def _queueing() -> Incident:
    def apply(w: World) -> None:
        Flood(seed=w.seed).start(w.replicas.live, w.clock.now)

    def truth(w: World) -> dict:
        lo = w.incident.onset_s
        qs = [p["queue_s"] for p in w.probes if p["t"] >= lo]
        uq = w.others(lo, w.incident.duration_s)
        waiting = [n for t, n in w.waiting if t >= lo]
        return {"probe_queue_s": statistics.median(qs) if qs else None,
                "waiting": statistics.median(waiting) if waiting else None,
                "users_queue_share": (sum(f.queue_s for f in uq) / sum(f.ttft_s for f in uq)
                                      if uq else None)}

    return Incident("queueing", "queueing",
                    "a client keeps 48 long-output requests (750-1,500 tokens) in flight; "
                    "32 slots", apply=apply, truth=truth)


def _redeploy() -> Incident:
    def apply(w: World) -> None:
        cfg = replace(w.incident.engine, prefix_caching=False)
        w.replicas.redeploy(SimEngine(cfg, seed=w.seed + 1, start_s=w.clock.now,
                                      epoch_s=EPOCH_S))

    def truth(w: World) -> dict:
        lo = w.incident.onset_s
        before = w.finished("user", lo - 60.0, lo)
        q = sum(f.prompt_tokens for f in before)
        return {"hit_before": sum(f.cached_tokens for f in before) / q if q else None,
                "hit_after": 0.0}

    return Incident("cache collapse (redeploy)", "cache_hit_drop",
                    "a redeploy: process restarted (counters from 0, a new "
                    "process_start_time), enable_prefix_caching True -> False",
                    apply=apply, truth=truth)


def _longer(k: float = 1.6) -> Incident:
    def truth(w: World) -> dict:
        lo = w.incident.onset_s
        b = [f.prompt_tokens for f in w.finished("user", lo - 60.0, lo)]
        a = [f.prompt_tokens for f in w.finished("user", lo, w.incident.duration_s)]
        mb, ma = statistics.median(b), statistics.median(a)
        cost = w.incident.engine.prefill_s_per_token
        return {"median_before": mb, "median_after": ma, "added_s": (ma - mb) * cost}

    return Incident(f"users' prompts x{k:g}", "prompts_longer",
                    f"every users' prompt x{k:g} from onset (the added tokens their own)",
                    grow=k, truth=truth)


def _gateway(delay_s: float = 0.300) -> Incident:
    def apply(w: World) -> None:
        w.gateway_s = delay_s

    return Incident("gateway +300 ms", "overhead",
                    "a gateway adds 300 ms on the path to the server (probes and users)",
                    apply=apply, truth=lambda w: {"overhead_s": delay_s})


def _control() -> Incident:
    return Incident("control (10 min)", "none", "nothing injected", onset_s=0.0,
                    duration_s=CONTROL_S)


INCIDENTS: dict[str, Callable[[], Incident]] = {
    "slow_prefill_1.5": lambda: _slow(1.5),
    "slow_prefill_2": lambda: _slow(2.0),
    "head_of_line": _hol,
    "queueing": _queueing,
    "cache_collapse": _redeploy,
    "prompts_longer": _longer,
    "gateway": _gateway,
    "control": _control,
}
