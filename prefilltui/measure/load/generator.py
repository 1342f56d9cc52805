"""Background load on the target, opt-in and bounded (``--load``; docs/load.md).

``LoadGenerator(spec, new_client)`` runs in its own thread with its own asyncio loop
(as the sweep runner does) and its own connection pool, so the probes' timing is not
shared with it.  ``decode:N`` keeps N streaming requests open (short prompts, long
outputs, ``ignore_eos`` where the server takes it), each restarted when it ends, and
stamps every token's arrival with ``time.perf_counter`` (the probes' clock);
``rate:R,tokens:L`` sends Poisson arrivals (exponential gaps, mean 1/R s).

It sends nothing until ``start()``, and stops for good, cancelling every request in
flight, on ``stop()``, on any fault (a failed or refused load request: one line in
``fault``), or at its bounds (``spec.max_requests`` requests or ``spec.max_s``
seconds, whichever first).  ``set_level`` changes the streams / rate live (the TUI's
``l``, ``sweep --load-levels``).  Every finished request is written to the run file
as a ``load`` line (``runfile.record_of_trace``).  ``requests_between`` says how many
of its requests the server counted in a span of time, so the users' window from
``/metrics`` takes them off the users' count; each is sent with an ``X-Request-Id``
of its own (``prefilltui-load-...``), so its span is never a user's either.

``LoadHook`` is the sweep's ProbeHook that tags each probe with the load it ran
under and measures its decode stall and excess (``model.load.stall``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Literal

from prefilltui.measure.load.request import LoadFault, send_load_request
from prefilltui.measure.loop_thread import LoopThread
from prefilltui.measure.runfile import LOAD_RECORD, record_of_trace
from prefilltui.measure.server import ServerUnreachable
from prefilltui.model.loadspec import LoadSpec
from prefilltui.model.prompts import PromptBuilder
from prefilltui.model.load import DecodeTrace, merge_arrivals

log = logging.getLogger(__name__)

#: The generator's state: off (not started), starting (discovery), running, idle
#: (level 0: started, nothing in flight), done (a bound reached), fault, stopped.
LoadState = Literal["off", "starting", "running", "idle", "done", "fault", "stopped"]
#: Finished requests kept in memory for the stall of later probes and the TUI (s).
HORIZON_S = 300.0
#: Most rate-load requests in flight; an arrival beyond it is skipped and counted.
MAX_IN_FLIGHT = 32
#: Tokens kept free below the context for a decode stream (chat template, margin).
CONTEXT_MARGIN = 16
#: Words per prompt token assumed when building load prompts (``model.prompts``'s
#: default ratio; load prompts need not be exact, their counts come back in usage).
WORDS_PER_TOKEN = 1.0
#: Most resends of one load request after a 400/422: more than any server needs
#: (5 optional fields and 3 token-cap fields, each left out or kept once).
MAX_RESENDS = 16


@dataclass
class _Live:
    """A request in flight (mutated by its task, read under the generator's lock)."""

    stream: int
    level: float
    t_send: float
    kind: str
    prompt_tokens: int | None
    arrivals: list[float] = field(default_factory=list)

    def trace(self, *, ended: bool, ok: bool = True, error: str | None = None) -> DecodeTrace:
        return DecodeTrace(stream=self.stream, kind=self.kind, level=self.level,  # type: ignore[arg-type]
                           t_send=self.t_send, arrivals=tuple(merge_arrivals(self.arrivals)),
                           prompt_tokens=self.prompt_tokens, ended=ended, ok=ok, error=error)


class LoadGenerator:
    """Background load (see the module docstring).  Thread-safe reads: ``state``,
    ``detail``, ``fault``, ``level``, ``level_since``, ``traces()``, ``requests``,
    ``tokens``."""

    def __init__(self, spec: LoadSpec, new_client: Callable[..., Any], *, runfile=None,
                 seed: int | None = None, horizon_s: float = HORIZON_S,
                 on_change: Callable[["LoadGenerator"], None] | None = None) -> None:
        self.spec = spec
        self.level = spec.level
        self._new_client = new_client
        self.runfile = runfile
        self.horizon_s = horizon_s
        self.on_change = on_change
        self.state: LoadState = "off"
        self.detail = ""
        self.fault: str | None = None
        self.requests = 0
        self._tokens_done = 0
        self.skipped = 0
        self.output_tokens = spec.output_tokens
        self._rng = random.Random(seed)
        self._builder = PromptBuilder(None if seed is None else seed + 7)
        self._lock = threading.Lock()
        self._live: dict[int, _Live] = {}
        self._done: deque[DecodeTrace] = deque()
        #: unix s of each finished request's first token, within the horizon
        self._firsts: deque[float] = deque()
        #: perf_counter of the last level change: gaps before it belong to another level
        self.level_since = time.perf_counter()
        self._next_id = 0
        #: the load's thread and its loop (``measure.loop_thread``)
        self._thread = LoopThread("prefilltui-load")
        self._stop = False
        self._t0 = 0.0
        self._client: Any = None

    # ------------------------------------------------------------ any thread
    def start(self) -> "LoadGenerator":
        """Start the thread (discovery, then the load); returns at once."""
        if self._thread.started:
            raise RuntimeError("load already started")
        self._set("starting", f"{self.spec.describe()}: connecting")
        self._thread.start(self._run)
        return self

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop for good: cancel every load request, write the cut streams, wait for
        the thread up to ``timeout`` s."""
        self._stop = True
        self._thread.poke()
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        """True while the load can send (started, no fault, no bound, not stopped)."""
        return self.state in ("starting", "running", "idle")

    @property
    def sending(self) -> bool:
        """True while requests are kept in flight (running at a level above 0)."""
        return self.state == "running" and self.level > 0

    def set_level(self, level: float) -> None:
        """Change the decode streams / rate (0 = nothing in flight) from any thread.

        Raises:
            ValueError: a level the spec's kind does not take (``LoadSpec.at``).
        """
        new = self.spec.at(level).level
        if new != self.level:
            self.level = new
            self.level_since = time.perf_counter()
        self._thread.poke()

    @property
    def tokens(self) -> int:
        """Tokens the load has received in all (requests in flight included)."""
        with self._lock:
            return self._tokens_done + sum(len(lv.arrivals) for lv in self._live.values())

    @property
    def in_flight(self) -> int:
        """Load requests in flight now."""
        with self._lock:
            return len(self._live)

    def current_spec(self) -> LoadSpec:
        """The spec at the level now running."""
        return replace(self.spec, level=self.level)

    def traces(self, since: float | None = None) -> list[DecodeTrace]:
        """Finished requests within the horizon (or ending after ``since``) and the
        ones in flight (``ended`` False), oldest first."""
        with self._lock:
            done = [t for t in self._done
                    if since is None or not t.arrivals or t.arrivals[-1] >= since]
            live = [lv.trace(ended=False) for lv in self._live.values()]
        return done + live

    def requests_between(self, t0_s: float, t1_s: float) -> int:
        """The load's requests whose first token came in (t0_s, t1_s] (unix s, within
        the horizon; those in flight too): what the server's TTFT histogram counted of
        the load then (a request refused, or cut before its first token, counts
        nowhere).  Any thread."""
        to_unix = time.time() - time.perf_counter()
        with self._lock:
            n = sum(1 for t in self._firsts if t0_s < t <= t1_s)
            return n + sum(1 for lv in self._live.values()
                           if lv.arrivals and t0_s < lv.arrivals[0] + to_unix <= t1_s)

    def steady(self, min_tokens: int = 4) -> bool:
        """True when the load is at its level: every decode stream has at least
        ``min_tokens`` tokens (a rate load: at once); also True when not sending."""
        if not self.sending:
            return True
        if self.spec.kind == "rate":
            return True
        with self._lock:
            live = [lv for lv in self._live.values()]
            n_ok = sum(1 for lv in live if len(lv.arrivals) >= min_tokens)
        return n_ok >= int(self.level)

    def streaming(self, min_tokens: int = 4) -> int:
        """Decode streams in flight with at least ``min_tokens`` tokens."""
        with self._lock:
            return sum(1 for lv in self._live.values() if len(lv.arrivals) >= min_tokens)

    def wait_streaming(self, timeout: float, min_tokens: int = 4) -> bool:
        """Block until at least one decode stream has ``min_tokens`` tokens (or not
        alive, or ``timeout`` s); returns whether one has."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.alive and not self.streaming(min_tokens):
            time.sleep(0.05)
        return self.alive and self.streaming(min_tokens) > 0

    def wait_steady(self, timeout: float, min_tokens: int = 4) -> bool:
        """Block until ``steady`` (or not alive, or ``timeout`` s); returns ``steady``."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.state not in ("starting",) and (self.steady(min_tokens) or not self.alive):
                break
            time.sleep(0.05)
        return self.steady(min_tokens) and self.alive

    def describe(self) -> str:
        """The status line's words: "load 2 decode streams", "load off (fault: ...)"."""
        spec = self.current_spec()
        if self.state == "fault":
            return f"load stopped: {self.fault}"
        if self.state == "done":
            return f"load done: {self.detail}"
        if self.state in ("off", "stopped"):
            return "load off"
        if not spec.active:
            return f"load paused ({self.spec.describe()} on l)"
        return f"load {spec.describe()}" + (" (starting)" if self.state == "starting" else "")

    # ------------------------------------------------------------ internals
    def _set(self, state: LoadState, detail: str = "") -> None:
        self.state, self.detail = state, detail
        if self.on_change is not None:
            try:
                self.on_change(self)
            except Exception:
                log.exception("load on_change callback failed")

    async def _run(self) -> None:
        """The load's thread: ``_main``, a crash said as a fault."""
        try:
            await self._main()
        except Exception as e:  # never die silently
            log.exception("load generator crashed")
            self.fault = f"internal error: {type(e).__name__}: {e}"
            self._set("fault", self.fault)

    async def _main(self) -> None:
        conns = max(4, self.spec.streams + 2, MAX_IN_FLIGHT + 2 if self.spec.kind == "rate" else 0)
        client = self._client = self._new_client(seed_offset=2, max_connections=conns)
        tasks: dict[int, asyncio.Task] = {}
        try:
            try:
                info = await client.discover()
            except ServerUnreachable as e:
                raise LoadFault(f"cannot reach the server: {e}") from None
            ctx = info.context_tokens
            if ctx:
                self.output_tokens = max(1, min(self.spec.output_tokens,
                                                ctx - self.spec.prompt_tokens - CONTEXT_MARGIN))
            self._t0 = time.monotonic()
            await self._drive(tasks)
        except LoadFault as e:
            self.fault = str(e)
        finally:
            for t in tasks.values():
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks.values(), return_exceptions=True)
            self._flush_live()
            try:
                await client.aclose()
            except Exception:
                pass
            if self.fault:
                self._set("fault", self.fault)
            elif self.state != "done":
                self._set("stopped", "")

    async def _drive(self, tasks: dict[int, asyncio.Task]) -> None:
        """Keep the level: decode streams started/cancelled to match it, or rate
        arrivals scheduled; check the bounds and faults."""
        next_arrival = time.monotonic()
        while not self._stop:
            elapsed = time.monotonic() - self._t0
            if self.requests >= self.spec.max_requests or elapsed >= self.spec.max_s:
                why = (f"{self.requests} requests" if self.requests >= self.spec.max_requests
                       else f"{elapsed:.0f} s")
                self._set("done", f"bound reached ({why})")
                return
            for sid, t in list(tasks.items()):
                if t.done():
                    tasks.pop(sid)
                    exc = t.exception() if not t.cancelled() else None
                    if isinstance(exc, LoadFault):
                        raise exc
                    if exc is not None:
                        raise LoadFault(f"load request failed: {type(exc).__name__}: {exc}")
            level = self.level
            state: LoadState = "running" if level > 0 else "idle"
            if state != self.state:
                self._set(state, self.current_spec().describe())
            wait = 0.5
            if self.spec.kind == "decode":
                want = int(level)
                for slot in range(want):
                    if slot not in tasks:
                        tasks[slot] = asyncio.ensure_future(self._stream_slot(slot))
                for slot in [s for s in tasks if s >= want]:
                    tasks.pop(slot).cancel()
            else:
                now = time.monotonic()
                if level <= 0:
                    next_arrival = now
                else:
                    while now >= next_arrival and not self._stop:
                        if sum(1 for t in tasks.values() if not t.done()) >= MAX_IN_FLIGHT:
                            self.skipped += 1
                        else:
                            rid = self._new_id()
                            tasks[rid] = asyncio.ensure_future(self._one(rid, rid, level))
                        next_arrival += self._rng.expovariate(level)
                    wait = max(0.0, next_arrival - now)
            await self._thread.sleep(min(wait, 0.5))

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def _stream_slot(self, slot: int) -> None:
        """One decode stream: a request after another while the slot is wanted."""
        while not self._stop and slot < int(self.level):
            if self.requests >= self.spec.max_requests:
                return
            await self._one(self._new_id(), slot, self.level)

    async def _one(self, rid: int, stream: int, level: float) -> None:
        """Send one load request and record its token arrivals.  Its body is the probe
        client's (``RequestBody.build``); a 400/422 naming a field of it is read as the
        probes read it (``named_field``), and the request resent without the field
        (kept when the same answer comes without it), for the session's every client.

        Raises:
            LoadFault: the request failed (status, network, protocol, timeout), or was
                refused for no field of its body.
        """
        spec = self.spec
        out = self.output_tokens if spec.kind == "decode" else spec.output_tokens
        prompt = " ".join(self._builder.words(max(1, round(spec.prompt_tokens * WORDS_PER_TOKEN))))
        part = self._client.body  # the probe client's RequestBody
        self.requests += 1
        left_out = None  # (refusal, field, label, replaced) of the last field left out
        for _attempt in range(MAX_RESENDS + 1):
            live = _Live(stream, level, time.perf_counter(), spec.kind, spec.prompt_tokens)
            with self._lock:
                self._live[rid] = live
            body = part.build(prompt, out)
            try:
                refused = await send_load_request(self._client, body, live, self._lock)
            except asyncio.CancelledError:
                self._finish(rid, live, ended=False)
                raise
            except LoadFault as e:
                self._finish(rid, live, ended=True, ok=False, error=str(e))
                raise
            if refused is None:
                self._finish(rid, live, ended=True)
                return
            with self._lock:
                self._live.pop(rid, None)
            if left_out is not None and refused == left_out[0]:
                part.keep(*left_out[1:])  # the same answer without it: quoted, not the cause
            field = part.named_field(refused.text, body)
            if field is not None:
                label, replaced = part.reject(field, refused.text)
                left_out = (refused, field, label, replaced)
            elif part.build(prompt, out) == body:
                error = refused.fault()
                self._finish(rid, live, ended=True, ok=False, error=str(error))
                raise error
            else:
                left_out = None  # another request learned a field meanwhile: resend
        raise LoadFault("the server rejected the load request's fields")

    def _finish(self, rid: int, live: _Live, *, ended: bool, ok: bool = True,
                error: str | None = None) -> None:
        tr = live.trace(ended=ended, ok=ok, error=error)
        now = time.perf_counter()
        unix = time.time()
        with self._lock:
            self._live.pop(rid, None)
            self._done.append(tr)
            while self._done and (not self._done[0].arrivals
                                  or self._done[0].arrivals[-1] < now - self.horizon_s):
                self._done.popleft()
            if live.arrivals:
                self._firsts.append(unix - (now - live.arrivals[0]))
            while self._firsts and self._firsts[0] < unix - self.horizon_s:
                self._firsts.popleft()
            self._tokens_done += len(tr.arrivals)
        if self.runfile is not None and (tr.arrivals or not ok):
            try:
                self.runfile.append_record(LOAD_RECORD, record_of_trace(tr))
            except (OSError, ValueError) as e:
                log.error("cannot write a load record to the run file: %s", e)

    def _flush_live(self) -> None:
        with self._lock:
            items = list(self._live.items())
        for rid, live in items:
            self._finish(rid, live, ended=False)
