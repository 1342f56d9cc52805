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
so nothing promises probes that will not run.  With ``time_cap_s`` (a default sweep)
the first round sends a length only once the probes so far expect it within that many
seconds, and caps the lengths left over where one probe would take about that long
(``time_cap``), said the same way.  With ``until_ci_pct`` or a budget in
the config a ``ConfidenceTarget`` (core.until_ci) decides the lengths after the first
round and when to stop; ``progress`` says where it stands.

The runner is two parts: this module holds its state, the controls any thread calls
(start, stop, pause, burst, set_range) and the plan of lengths; ``sweep_loop`` holds
the loop in its thread (discovery, probes, retry policy, bursts, the hand-off of
results); ``sweep_config`` the config, lengths, context cap and retry numbers.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections import deque
from typing import Callable, Iterator, Sequence

from prefilltui.measure.loop_thread import LoopThread
from prefilltui.measure.sweep.config import (CONTEXT_RESERVE, ProbeHook, SweepConfig,
                                             TimeCap, expected_ttft, make_lengths,
                                             time_cap)
from prefilltui.measure.sweep.loop import ProbeLoop
from prefilltui.model.types import ProbeResult, RunnerState, ServerInfo

#: How many results a continuous SweepRunner keeps in memory.
RECENT_RESULTS = 1000

log = logging.getLogger(__name__)


class SweepRunner(ProbeLoop):
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
        self._cap: int | None = None  # the context's (discovery, context-length errors)
        #: the time cap (``time_cap_s``: the first round's ``time_cap``), None before it
        #: or once ``set_range`` gave lengths of the user's choosing
        self._time_cap: int | None = None
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
        #: the runner's thread and its loop (``measure.loop_thread``)
        self._thread = LoopThread("prefilltui-sweep")
        self._seq = 0
        self._client: object | None = None
        #: what the sweep says about its plan (lengths capped at the context, ...)
        self.notes: list[str] = []
        self.target = None
        if (config.until_ci_pct is not None or config.budget_probes is not None
                or config.budget_s is not None):
            from prefilltui.model.fit import ConfidenceTarget

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
    def cap_note(self) -> str | None:
        """The cap that shortens the planned lengths, in a status line's words: "time
        cap" (``time_cap_s``), "context cap" (the server's context, or the longest
        prompt built when it is unknown), None when no length is over a cap."""
        limit = self._limit
        if limit is None or not any(x > limit for x in self._lengths):
            return None
        return "time cap" if limit == self._time_cap else "context cap"

    @property
    def progress(self):
        """``until_ci.Progress`` of the repeat-until-confident target, or None."""
        return self._progress

    def start(self) -> None:
        if self._thread.started:
            raise RuntimeError("runner already started")
        self._set_state("connecting", "")
        self._thread.start(self._run)

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop (cancelling a probe in flight) and wait up to ``timeout`` s for the thread."""
        self._stop = True
        self._thread.stop(timeout)

    @property
    def alive(self) -> bool:
        """True while the runner thread runs (started and not finished)."""
        return self._thread.alive

    def join(self, timeout: float | None = None) -> None:
        """Wait for the runner thread (a no-op when called from the runner's own thread)."""
        self._thread.join(timeout)

    def pause(self) -> None:
        self._paused = True
        self._thread.poke()

    def resume(self) -> None:
        self._paused = False
        self._thread.poke()

    def burst(self) -> None:
        """Start a burst now, also while paused or idle (after a probe in flight):
        back-to-back probes at the longest allowed length (flagged ``burst``) for at
        least ``pacing.burst_min_s`` seconds (at least one probe), then the idle gap,
        or paused again when paused."""
        self._burst = True
        self._thread.poke()

    def set_range(self, min_tokens: int, max_tokens: int) -> None:
        """New lengths (log-spaced, same number of points); takes effect next probe.
        They are the user's choice: the time cap no longer holds (the context's does),
        and no later round is timed."""
        with self._lock:
            self._lengths = make_lengths(min_tokens, max_tokens, self._points)
            self._new_range = True
            self._time_cap = None
        self._thread.poke()

    # -- internals

    def _set_state(self, state: RunnerState, detail: str = "") -> None:
        self.state, self.state_detail = state, detail
        if self.on_state is not None:
            try:
                self.on_state(state, detail)
            except Exception:
                log.exception("on_state callback failed")

    @property
    def _limit(self) -> int | None:
        """The longest prompt sent: the lower of the context and time caps (None: none)."""
        caps = [c for c in (self._cap, self._time_cap) if c is not None]
        return min(caps) if caps else None

    def _capped(self, lengths: list[int]) -> list[int]:
        limit = self._limit
        if limit is None:
            return list(lengths)
        return sorted({min(x, limit) for x in lengths})

    async def _run(self) -> None:
        """The runner's thread: ``_main``, its end said (stopped when cancelled)."""
        try:
            await self._main()
        except asyncio.CancelledError:
            self._set_state("stopped", "")
            raise
        except Exception as e:  # the runner must never die silently
            log.exception("sweep runner crashed")
            self.error = f"internal error: {type(e).__name__}: {e}"
            self._set_state("failed", self.error)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, woken early by stop/pause/burst/set_range pokes."""
        await self._thread.sleep(seconds)

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
            timed = first and self.config.time_cap_s is not None
            first = False
            with self._lock:
                self._new_range = False
                round_ = [x for x in self.lengths for _ in range(self.config.repeats)]
            self._rng.shuffle(round_)
            for x in (self._timed_round(round_) if timed else round_):
                if self._new_range:
                    break
                yield x, False
            if (not self.config.continuous and not self._new_range
                    and (self.target is None or self.target.pct is None)):
                return

    def _timed_round(self, round_: list[int]) -> Iterator[int]:
        """The first round under ``time_cap_s``: in the shuffled order, the next length
        is the first the probes so far expect within the cap (``expected_ttft``; the
        shortest before any probe counts).  When every length left is expected over
        it, those over the cap the probes give (``time_cap``: never below a length that
        ran within it) are merged into one length at the cap, run ``repeats`` times
        unless already probed, and those under it run; the note says which, to what and
        from which probes, once (``_time_capped``)."""
        budget = self.config.time_cap_s
        assert budget is not None
        left = list(round_)
        done: set[int] = set()
        while left:
            pts = self._timing_points()
            if not pts:
                pick: int | None = min(left)
            else:
                pick = next((x for x in left if (expected_ttft(pts, x) or 0.0) <= budget), None)
            if pick is None:
                cap = time_cap(pts, budget)
                over = sorted({x for x in left if cap is not None and x > cap.tokens})
                if (cap is None or not over
                        or (self._cap is not None and cap.tokens >= self._cap)):
                    # the fixed cost alone is over (capping saves nothing), nothing left
                    # is over the cap, or the context cap is lower already
                    yield from left
                    return
                with self._lock:
                    if self._new_range:  # the user's range came first: theirs holds
                        return
                    self._time_cap = cap.tokens
                under = [x for x in left if x <= cap.tokens]
                self._time_capped(cap, over, budget, ran=set(done) | set(under),
                                  requested=len(set(round_)))
                yield from under
                if cap.tokens not in done:
                    yield from [cap.tokens] * self.config.repeats
                return
            left.remove(pick)
            done.add(pick)
            yield pick

    def _time_capped(self, cap: TimeCap, over: list[int], budget: float, *, ran: set[int],
                     requested: int) -> None:
        """Say the time cap (notes) and report the lengths that will run:
        ``over`` the lengths left in the first round that it caps, as requested (after
        the context cap), never one already probed; ``ran`` the other lengths of the
        round; ``requested`` how many lengths it had.  The note gives the probes the cap
        comes from (``TimeCap``), so its numbers give the cap."""
        (n_w, t_w), above = cap.below, cap.above
        why = f"{n_w:,} tokens took {t_w:.2f} s"
        if above is not None:
            why += f", {above[0]:,} tokens took {above[1]:.2f} s: {budget:g} s on the line between"
        elif cap.growth > 1.0:
            why += f", TTFT growing as n^{cap.growth:.2f}"
        run = len(ran | {cap.tokens})
        merged = len(over) > 1 or cap.tokens in ran
        note = (f"{'lengths' if len(over) > 1 else 'length'} {', '.join(map(str, over))} "
                f"{'are' if len(over) > 1 else 'is'} over the longest prompt expected within "
                f"{budget:g} s a probe ({why}; --lengths runs every length given): capped to "
                f"{cap.tokens} tokens"
                + (f", merged: {run} lengths run, not {requested}" if merged else ""))
        if note not in self.notes:
            self.notes.append(note)
        self._report_plan()

    def _timing_points(self) -> list[tuple[int, float]]:
        """(requested tokens, TTFT s) of this runner's probes that time prefill: ok, no
        warm-up (its lazy start-up), no cache hit, no burst."""
        return [(r.requested_tokens, r.ttft_s) for r in self.results
                if r.level_eligible and not r.burst and r.ttft_s is not None]

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

    def _add_note(self, note: str) -> None:
        """One more note about the session, said at once (``on_plan``)."""
        if note not in self.notes:
            self.notes.append(note)
        self._report_plan()

    def _plan_changed(self, why: str, *, reserve: bool = True) -> None:
        """Say which requested lengths the context cap changes (notes) and
        report the lengths that will run (``on_plan``); ``reserve``: the cap keeps
        CONTEXT_RESERVE and 2 % free (the server's context; False: the context is unknown
        and the cap is the longest prompt built).  The time cap says itself
        (``_time_capped``)."""
        cap = self._cap
        over = [x for x in self._lengths if cap is not None and x > cap]
        if over:
            planned = self.lengths
            merged = cap in self._lengths or len(over) > 1
            limit = "the server takes" if reserve else "built"
            note = (f"{'lengths' if len(over) > 1 else 'length'} {', '.join(map(str, over))} "
                    f"{'are' if len(over) > 1 else 'is'} over the longest prompt {limit} ({why}"
                    + (f"; {CONTEXT_RESERVE} tokens and 2 % kept free" if reserve else "")
                    + "): "
                    f"capped to {cap} tokens"
                    + (f", merged: {len(planned)} lengths run, not {len(self._lengths)}"
                       if merged else ""))
            if note not in self.notes:
                self.notes.append(note)
        self._report_plan()

    def _report_plan(self) -> None:
        if self.on_plan is not None:
            try:
                self.on_plan(self.lengths, list(self.notes))
            except Exception:
                log.exception("on_plan callback failed")
