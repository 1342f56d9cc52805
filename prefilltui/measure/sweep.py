"""The sweep: probes at many prompt lengths, one in flight at a time, in its own
thread with its own asyncio loop so a busy UI never delays reading a first token.

``SweepRunner(lambda: ProbeClient(url), SweepConfig(make_lengths(4, 4096, 10)))``;
``start()`` returns at once; ``on_result(result)`` / ``on_state(state, detail)`` /
``on_plan(lengths, notes)`` are called from the runner's thread.  States: connecting,
probing, idle (the gap after a probe, see ``core.pacing``), burst, retrying, paused,
stopped, done, failed.

Lengths beyond the server's context are capped (``cap_for_context``) and merged;
``notes`` says which, to what and why, and ``on_plan`` reports the lengths that will
really run (after discovery, and again when a context-length error lowers the cap),
so nothing promises probes that will not run.  With ``until_ci_pct`` or a budget in
the config a ``ConfidenceTarget`` (core.until_ci) decides the lengths after the first
round and when to stop; ``progress`` says where it stands.

Over 400 lines on purpose: one class whose thread, event loop, pause/burst/range
controls and retry policy share the same state; the pieces that stand alone (lengths,
context cap, the confidence target) are functions or modules of their own.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Sequence

from prefilltui.model.limits import UNKNOWN_CONTEXT_MAX_TOKENS
from prefilltui.model.pacing import Pacing
from prefilltui.model.redact import display_url
from prefilltui.measure.server import ServerUnreachable
from prefilltui.model.types import ProbeResult, RunnerState, ServerInfo, session_facts

#: How many results a continuous SweepRunner keeps in memory.
RECENT_RESULTS = 1000

log = logging.getLogger(__name__)

#: Tokens kept free below the server's context limit: the one generated token, a
#: chat template, and the +-2 % length tolerance (applied on top, see ``_cap_for``).
CONTEXT_RESERVE = 8
#: Longest back-off after repeated 429/503 without Retry-After (seconds).
MAX_BACKOFF_S = 60.0
#: Shortest wait after a 429/503, whatever Retry-After says ("0", "-5" or garbage
#: would otherwise re-send at once, hammering a server that asked us to slow down).
MIN_RATE_LIMIT_WAIT_S = 1.0
#: A non-continuous sweep gives up on one probe after this many rate-limited
#: attempts in a row, or once its waits would pass MAX_RATE_LIMIT_WAIT_S; the
#: probe is then a failed ``rate_limited`` probe and the sweep moves on.
MAX_RATE_LIMITED_TRIES = 5
MAX_RATE_LIMIT_WAIT_S = 120.0
#: A non-continuous sweep gives up after this many failures in a row
#: (context-length caps and rate-limited attempts that are retried excluded).
MAX_CONSECUTIVE_FAILURES = 10


class ProbeHook(Protocol):
    """Runs around every probe, in the runner's loop (``MetricsHook``, a ``Sampler``);
    must not raise into the sweep."""

    async def before_probe(self, client) -> None: ...
    async def after_probe(self, result: ProbeResult) -> None: ...


@dataclass
class SweepConfig:
    lengths: list[int]
    repeats: int = 1
    warmup: int = 1
    pause_s: float = 0.0
    seed: int | None = None
    continuous: bool = False
    #: stop once the throughput 95 % interval's half-width is under this % (None: off)
    until_ci_pct: float | None = None
    #: stop after this many probes / seconds of probing (None: no limit)
    budget_probes: int | None = None
    budget_s: float | None = None
    #: spacing of probes and the size of a burst (core.pacing); None = a fixed
    #: ``pause_s`` gap after each probe and one-probe bursts (the headless pacing)
    pacing: Pacing | None = None

    #: A rate ceiling for long-running probers (the exporter): successive probe *starts*
    #: are at least ``interval_s`` apart, failures, rate-limit retries and reconnects
    #: included, plus a random ``0..jitter`` fraction of it, so the rate never exceeds
    #: 1/interval_s per runner and runners started together drift apart.  None: no
    #: ceiling (``pacing`` alone spaces the probes).
    interval_s: float | None = None
    jitter: float = 0.0
    #: How many results a continuous runner keeps in memory (None: RECENT_RESULTS).
    keep_results: int | None = None

    @property
    def effective_pacing(self) -> Pacing:
        return self.pacing if self.pacing is not None else Pacing(idle_floor_s=self.pause_s)


def rate_limit_wait(retry_after_s: float | None, backoff_s: float) -> float:
    """Seconds to wait after a 429/503: Retry-After when given, else ``backoff_s``,
    clamped to [MIN_RATE_LIMIT_WAIT_S, MAX_BACKOFF_S] (a negative, zero or absurd
    Retry-After never makes a busy loop or a day-long wait)."""
    wait = retry_after_s if retry_after_s is not None else backoff_s
    return min(MAX_BACKOFF_S, max(MIN_RATE_LIMIT_WAIT_S, wait))


def make_lengths(min_tokens: int, max_tokens: int, points: int) -> list[int]:
    """``points`` log-spaced integer lengths from min to max inclusive (sorted, unique).

    Raises:
        ValueError: when min < 1, max < min or points < 1.
    """
    if min_tokens < 1 or max_tokens < min_tokens or points < 1:
        raise ValueError(f"bad range {min_tokens}..{max_tokens} x {points}")
    if points == 1 or min_tokens == max_tokens:
        return [int(max_tokens)]
    lo, hi = math.log(min_tokens), math.log(max_tokens)
    vals = {int(round(math.exp(lo + (hi - lo) * i / (points - 1)))) for i in range(points)}
    return sorted(vals)


def cap_for_context(context_tokens: int | None) -> int | None:
    """Longest prompt to request under a context limit (None when unknown)."""
    if not context_tokens:
        return None
    return max(1, int((context_tokens - CONTEXT_RESERVE) / 1.02))


class SweepRunner:
    """Runs a sweep in a background thread.  See the module docstring."""

    def __init__(self, client_factory: Callable[[], object], config: SweepConfig, *,
                 on_result: Callable[[ProbeResult], None] | None = None,
                 on_state: Callable[[RunnerState, str], None] | None = None,
                 on_plan: Callable[[list[int], list[str]], None] | None = None,
                 runfile=None, hooks: Sequence[ProbeHook] = ()) -> None:
        if not config.lengths:
            raise ValueError("a sweep needs at least one length")
        self._factory = client_factory
        self.config = config
        self.on_result = on_result
        self.on_state = on_state
        self.on_plan = on_plan
        self.runfile = runfile
        self.hooks = list(hooks)
        #: Results in order.  A finite sweep keeps all of them (its summary needs
        #: them); a continuous one keeps the last RECENT_RESULTS, so memory stays flat
        #: however long it runs (every probe is in the run file).
        self.results: list[ProbeResult] | deque[ProbeResult] = (
            deque(maxlen=config.keep_results or RECENT_RESULTS) if config.continuous else [])
        #: The requests ``ProbeClient.calibrate`` sent to learn prompt lengths (no
        #: results: never fitted or counted; the run file keeps them as calibration lines).
        self.calibration: list[ProbeResult] = []
        self.rate_limited = 0
        #: Plan items (warm-ups included) finished: a rate-limited attempt that is
        #: retried is not one, so ``finished + 1`` numbers the probe in flight.
        self.finished = 0
        self.error: str | None = None
        self.state: RunnerState = "stopped"
        self.state_detail = ""
        self._lengths = sorted(set(int(x) for x in config.lengths))
        self._points = len(self._lengths)
        self._cap: int | None = None
        self._info: ServerInfo | None = None
        self._lock = threading.Lock()
        self._paused = False
        self._stop = False
        self._burst = False
        #: (probes, tokens each, seconds) of the last burst, None before the first
        self.last_burst: tuple[int, int, float] | None = None
        self._after_burst = ""  # "burst: 3 × 1,024 tokens, 2.1 s" until the next probe
        self._new_range = False
        self._rng = random.Random(config.seed)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._seq = 0
        self._client: object | None = None
        #: what the sweep says about its plan (lengths capped at the context, ...)
        self.notes: list[str] = []
        #: the context cap as a short phrase for a status line, or None
        self.cap_note: str | None = None
        self.target = None
        if (config.until_ci_pct is not None or config.budget_probes is not None
                or config.budget_s is not None):
            from prefilltui.model.until_ci import ConfidenceTarget

            self.target = ConfidenceTarget(config.until_ci_pct, budget_probes=config.budget_probes,
                                           budget_s=config.budget_s)
        #: the target's Progress as of the last probe: computed in the runner's thread,
        #: read by any (a frozen dataclass, replaced whole)
        self._progress = self.target.progress() if self.target is not None else None
        self._next_at = 0.0  # monotonic time before which no request starts (interval_s)

    # -- public controls (any thread)
    @property
    def server_info(self) -> ServerInfo | None:
        return self._info

    @property
    def notices(self) -> dict[str, str]:
        """What a reader must know about this session, once each: short label ->
        sentence (``ProbeClient.notices``: a field the server rejected, prompt
        lengths that are estimates).  Empty before the client exists."""
        return dict(getattr(self._client, "notices", None) or {})

    @property
    def lengths(self) -> list[int]:
        """The lengths now planned, after the context cap."""
        return self._capped(self._lengths)

    @property
    def progress(self):
        """``until_ci.Progress`` of the repeat-until-confident target, or None."""
        return self._progress

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("runner already started")
        self._set_state("connecting", "")
        self._thread = threading.Thread(target=self._run, name="prefilltui-sweep", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop (cancelling a probe in flight) and wait up to ``timeout`` s for the thread."""
        self._stop = True
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass
        self.join(timeout)

    @property
    def alive(self) -> bool:
        """True while the runner thread runs (started and not finished)."""
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the runner thread (a no-op when called from the runner's own thread)."""
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def pause(self) -> None:
        self._paused = True
        self._poke()

    def resume(self) -> None:
        self._paused = False
        self._poke()

    def burst(self) -> None:
        """Start a burst now, also while paused or idle (after a probe in flight):
        back-to-back probes at the longest allowed length (flagged ``burst``) for at
        least ``pacing.burst_min_s`` seconds (at least one probe), then the idle gap,
        or paused again when paused."""
        self._burst = True
        self._poke()

    def set_range(self, min_tokens: int, max_tokens: int) -> None:
        """New lengths (log-spaced, same number of points); takes effect next probe."""
        with self._lock:
            self._lengths = make_lengths(min_tokens, max_tokens, self._points)
            self._new_range = True
        self._poke()

    # -- internals
    def _poke(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:
                pass

    def _set_state(self, state: RunnerState, detail: str = "") -> None:
        self.state, self.state_detail = state, detail
        if self.on_state is not None:
            try:
                self.on_state(state, detail)
            except Exception:
                log.exception("on_state callback failed")

    def _capped(self, lengths: list[int]) -> list[int]:
        if self._cap is None:
            return list(lengths)
        return sorted({min(x, self._cap) for x in lengths})

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._main())
            loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            self._set_state("stopped", "")
        except Exception as e:  # the runner must never die silently
            log.exception("sweep runner crashed")
            self.error = f"internal error: {type(e).__name__}: {e}"
            self._set_state("failed", self.error)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _sleep(self, seconds: float) -> None:
        """Sleep, woken early by stop/pause/burst/set_range pokes."""
        assert self._wake is not None
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=max(0.0, seconds))
        except asyncio.TimeoutError:
            pass

    async def _pace(self) -> None:
        """With ``interval_s``: wait until the next slot, then book the one after it."""
        gap = self.config.interval_s
        if not gap:
            return
        loop = asyncio.get_running_loop()
        while not self._stop and loop.time() < self._next_at:
            await self._sleep(self._next_at - loop.time())
        self._next_at = loop.time() + gap * (1.0 + self.config.jitter * self._rng.random())

    def _plan(self) -> Iterator[tuple[int, bool]]:
        """(length, warmup) pairs; continuous mode cycles reshuffled rounds forever.
        With a throughput target, the first round is as usual, then the target picks
        each length (core.until_ci)."""
        for i in range(self.config.warmup):
            ls = self.lengths
            yield (ls[len(ls) // 2] if i % 2 == 0 else ls[0]), True
        first = True
        while True:
            if not first and self.target is not None and self.target.pct is not None:
                with self._lock:
                    self._new_range = False
                yield self.target.next_length(self.lengths), False
                continue
            first = False
            with self._lock:
                self._new_range = False
                round_ = [x for x in self.lengths for _ in range(self.config.repeats)]
            self._rng.shuffle(round_)
            for x in round_:
                if self._new_range:
                    break
                yield x, False
            if (not self.config.continuous and not self._new_range
                    and (self.target is None or self.target.pct is None)):
                return

    async def _main(self) -> None:
        client = self._client = self._factory()
        try:
            if not await self._connect(client):
                return
            await self._loop_probes(client)
        finally:
            try:
                await client.aclose()
            except Exception:
                pass

    async def _connect(self, client) -> bool:
        while not self._stop:
            await self._pace()
            if self._stop:
                break
            limit = getattr(client, "timeout", None)
            self._set_state("connecting", f"{display_url(client.root)}: discovering the server"
                            + (f" (up to {min(10.0, limit):g} s a request)" if limit else ""))
            try:
                info = await client.discover()
            except ServerUnreachable as e:
                self.error = str(e)
                if not self.config.continuous:
                    self._set_state("failed", str(e))
                    return False
                wait = max(2.0, self.config.interval_s or 0.0)  # _pace keeps the interval
                self._set_state("retrying", f"{e}; retrying in {wait:g} s")
                await self._sleep(2.0)
                continue
            self._info = info
            set_session = getattr(self.runfile, "set_session", None)
            if set_session is not None:  # so `report` reads the run as this sweep saw it
                set_session(server=session_facts(info))
            self._cap = cap_for_context(info.context_tokens)
            if self._cap is None and max(self._lengths) > UNKNOWN_CONTEXT_MAX_TOKENS:
                # a prompt is built before the server can refuse it: bound it
                self._cap = UNKNOWN_CONTEXT_MAX_TOKENS
                self._plan_changed("the server does not say its context; building a longer "
                                   "one costs seconds and hundreds of MiB", reserve=False)
            else:
                self._plan_changed(f"the server's context is {info.context_tokens} tokens"
                                   if info.context_tokens else "")
            await client.warm()
            calibrate = getattr(client, "calibrate", None)
            if calibrate is not None:
                # before the first probe, warm-up or not; its requests are no results,
                # but the run file keeps them (calibration lines): every request sent.
                # The state says each request, what it waits for and how long.
                for r in await calibrate(on_step=lambda d: self._set_state("connecting", d)
                                         ) or ():
                    self.calibration.append(r)
                    write = getattr(self.runfile, "append_calibration", None)
                    if write is not None:
                        try:
                            write(r)
                        except (OSError, ValueError) as e:
                            log.error("cannot write the run file: %s", e)
                    if not r.ok:  # said at once (a note), not a silent wait
                        self._add_note(
                            f"the calibration request ({r.requested_tokens} tokens) failed "
                            f"after {(r.total_s or 0):.1f} s ({r.error_kind}: "
                            f"{r.error_message}); prompt lengths start from the built-in "
                            "estimate")
            return True
        self._set_state("stopped", "")
        return False

    async def _loop_probes(self, client) -> None:
        fails = 0
        backoff = 1.0
        rl_tries, rl_waited = 0, 0.0  # rate-limited attempts of the pending probe
        plan = self._plan()
        pending: tuple[int, bool] | None = None
        pacing = self.config.effective_pacing
        while not self._stop:
            while self._paused and not self._stop and not self._burst:
                self._set_state("paused", self._after_burst)
                await self._sleep(3600)
            if self._stop:
                break
            if self._burst:
                self._burst = False
                busy = await self._run_burst(client, pacing)
                if not self._paused:
                    await self._idle(pacing.idle_after(busy), self._after_burst)
                continue
            self._after_burst = ""
            if pending is not None:
                (length, warm), pending = pending, None
            else:
                nxt = next(plan, None)
                if nxt is None:
                    break
                length, warm = nxt
            if self._cap is not None:
                length = min(length, self._cap)
            await self._pace()
            if self._stop:
                break
            result = await self._one(client, length, warm, False)
            kind = result.error_kind
            if kind == "rate_limited":
                self.rate_limited += 1
                rl_tries += 1
                wait = rate_limit_wait(result.retry_after_s, backoff)
                if self.config.continuous or (rl_tries < MAX_RATE_LIMITED_TRIES
                                              and rl_waited + wait <= MAX_RATE_LIMIT_WAIT_S):
                    rl_waited += wait
                    backoff = min(MAX_BACKOFF_S, backoff * 2)
                    self._set_state("retrying", f"rate limited (HTTP {result.http_status}); "
                                    f"waiting {wait:.1f} s [{self.rate_limited} so far]")
                    pending = (length, warm)
                    await self._sleep(wait)
                    continue
                self._set_state("retrying", f"rate limited (HTTP {result.http_status}) "
                                f"{rl_tries} times for one probe ({rl_waited:.0f} s waited): "
                                "giving up on it")
            rl_tries, rl_waited = 0, 0.0
            self.finished += 1
            if kind != "rate_limited":
                backoff = 1.0
            if kind == "context_length":
                n_ctx = result.notes.n_ctx
                new = cap_for_context(n_ctx) if n_ctx else int(length * 0.9)
                self._cap = min(self._cap or new, new, max(1, length - 1))
                self._set_state("probing", f"context limit: capping prompts at {self._cap} tokens")
                self._plan_changed(f"a {length}-token prompt was refused as too long"
                                   + (f" (context {n_ctx} tokens)" if n_ctx else ""))
            elif kind is not None:
                fails += 1
                if not self.config.continuous and fails >= MAX_CONSECUTIVE_FAILURES:
                    self.error = f"{fails} probes failed in a row (last: {kind}: {result.error_message})"
                    self._set_state("failed", self.error)
                    return
                if self.config.continuous:  # back off: never hammer a failing server
                    self._set_state("retrying", f"{kind}: {result.error_message}")
                    await self._sleep(min(MAX_BACKOFF_S, 2.0 * fails))
                    continue
            else:
                fails = 0
            if self.target is not None and not warm:
                prog = self._progress
                if prog is not None and prog.done:
                    self._set_state("done", prog.line())
                    return
            await self._idle(pacing.idle_after(result.ttft_s if result.ok else None))
        self._set_state("stopped" if self._stop else "done", "")

    async def _idle(self, seconds: float, note: str = "") -> None:
        """The gap after a probe (state "idle"): ends early on stop, pause or burst;
        a new range (set_range) does not shorten it."""
        if seconds <= 0 or self._stop:
            return
        assert self._loop is not None
        deadline = self._loop.time() + seconds
        self._set_state("idle", f"{seconds:.1f} s" + (f" after {note}" if note else ""))
        while not (self._stop or self._paused or self._burst):
            left = deadline - self._loop.time()
            if left <= 0:
                break
            await self._sleep(left)

    async def _run_burst(self, client, pacing: Pacing) -> float:
        """Back-to-back probes at the longest length until ``pacing.burst_min_s`` has
        passed from the first request's ``t_send`` to the last one's ``t_end`` (at least
        one probe; a failed probe or stop ends it).  Returns those seconds;
        ``last_burst`` = (probes, length, seconds)."""
        start = time.perf_counter()  # until the first request's t_send is known
        n, length, elapsed = 0, 0, 0.0
        while not self._stop:
            length = max(self.lengths)
            if self._cap is not None:
                length = min(length, self._cap)
            self._set_state("burst", f"#{n + 1} at {length:,} tokens, "
                            f"≥ {pacing.burst_min_s:.1f} s")
            result = await self._one(client, length, False, True)
            n += 1
            if n == 1 and result.t_send is not None:
                start = result.t_send
            # the server's busy time: first request sent .. last one ended
            elapsed = (result.t_end if result.t_end is not None else time.perf_counter()) - start
            if not result.ok or elapsed >= pacing.burst_min_s:
                break
        self.last_burst = (n, length, elapsed)
        text = f"{n} × {length:,} tokens, {elapsed:.1f} s"
        self._after_burst = f"burst: {text}"
        self._set_state("burst", f"done: {text}")
        return elapsed

    def _add_note(self, note: str) -> None:
        """One more note about the session, said at once (``on_plan``)."""
        if note not in self.notes:
            self.notes.append(note)
        self._report_plan()

    def _plan_changed(self, why: str, *, reserve: bool = True) -> None:
        """Say which requested lengths the context cap changes (notes, cap_note) and
        report the lengths that will run (``on_plan``); ``reserve``: the cap keeps
        CONTEXT_RESERVE and 2 % free (a context cap)."""
        cap = self._cap
        over = [x for x in self._lengths if cap is not None and x > cap]
        if over:
            planned = self.lengths
            merged = cap in self._lengths or len(over) > 1
            note = (f"{'lengths' if len(over) > 1 else 'length'} {', '.join(map(str, over))} "
                    f"{'are' if len(over) > 1 else 'is'} over the longest prompt "
                    + ("the server takes" if reserve else "built") + f" ({why}"
                    + (f"; {CONTEXT_RESERVE} tokens and 2 % kept free" if reserve else "")
                    + "): "
                    f"capped to {cap} tokens"
                    + (f", merged: {len(planned)} lengths run, not {len(self._lengths)}"
                       if merged else ""))
            if note not in self.notes:
                self.notes.append(note)
            self.cap_note = f"capped at {cap} tok ({'context' if reserve else 'context unknown'})"
        self._report_plan()

    def _report_plan(self) -> None:
        if self.on_plan is not None:
            try:
                self.on_plan(self.lengths, list(self.notes))
            except Exception:
                log.exception("on_plan callback failed")

    async def _one(self, client, length: int, warm: bool, burst: bool) -> ProbeResult:
        # the state first: the hooks' scrapes are part of this probe's time
        if not burst:  # a burst says its own state (_run_burst)
            self._set_state("probing", f"{length} tokens" + (" (warm-up)" if warm else ""))
        for h in self.hooks:
            try:
                await h.before_probe(client)
            except Exception:
                log.exception("probe hook before_probe failed")
        result = await client.probe(length, warmup=warm, burst=burst)
        for h in self.hooks:
            try:
                await h.after_probe(result)
            except Exception:
                log.exception("probe hook after_probe failed")
        return self._record(result)

    def _record(self, result: ProbeResult) -> ProbeResult:
        """Number ``result`` and hand it to the results, the target, the run file and
        ``on_result``."""
        self._seq += 1
        result.seq = self._seq
        self.results.append(result)
        if self.target is not None:
            self.target.add(result)
            self._progress = self.target.progress()
        if self.runfile is not None:
            try:
                self.runfile.append(result)
            except (OSError, ValueError) as e:
                log.error("cannot write the run file: %s", e)
        if self.on_result is not None:
            try:
                self.on_result(result)
            except Exception:
                log.exception("on_result callback failed")
        return result
