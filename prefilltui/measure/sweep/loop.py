"""The sweep's probing loop, in the runner's thread and asyncio loop: discovery (retried
when continuous), calibration, then probe after probe with its retry policy
(rate limits, context-length caps, consecutive failures), bursts and idle gaps, and
the hand-off of each result (results, confidence target, run file, ``on_result``).

``ProbeLoop`` is the part of ``SweepRunner`` that runs in its thread; the controls
other threads call and the plan of lengths are in ``sweep``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from prefilltui.measure.server import ServerUnreachable
from prefilltui.measure.sweep.config import (DISCOVERY_RETRY_MAX_S, MAX_BACKOFF_S,
                                             MAX_CONSECUTIVE_FAILURES,
                                             MAX_RATE_LIMIT_WAIT_S, MAX_RATE_LIMITED_TRIES,
                                             SweepConfig, cap_for_context, rate_limit_wait)
from prefilltui.model.limits import UNKNOWN_CONTEXT_MAX_TOKENS
from prefilltui.model.pacing import Pacing
from prefilltui.model.redact import display_url
from prefilltui.model.types import ProbeResult, ServerInfo, session_facts

#: the runner's logger (``sweep``'s name: one logger for the whole runner)
log = logging.getLogger("prefilltui.measure.sweep")


class ProbeLoop:
    """Mixin of ``SweepRunner``: the loop in its thread.  Needs the runner's config,
    callbacks, hooks, run file, results and counters (``SweepRunner.__init__``), its
    controls' flags (``_stop``, ``_paused``, ``_burst``), ``_set_state``, ``_sleep``,
    ``_pace``, ``_plan``, ``_plan_changed``, ``_limit`` and ``lengths``."""

    config: SweepConfig
    on_result: Callable[[ProbeResult], None] | None
    runfile: Any
    hooks: list
    results: Any
    calibration: list[ProbeResult]
    target: Any
    _info: ServerInfo | None
    _cap: int | None
    _limit: int | None  # SweepRunner._limit: the lower of the context and time caps
    _lengths: list[int]

    async def _connect(self, client) -> bool:
        """Discover the server (retried when continuous), warm up and calibrate.

        Discovery is not a probe: it takes no slot of the ``interval_s`` ceiling, so the
        first probe follows it at once (a target is probed when it starts, then at its
        interval) and a server that does not answer yet is asked again every
        ``interval_s`` clamped to [2 s, ``DISCOVERY_RETRY_MAX_S``]."""
        while not self._stop:
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
                wait = min(max(2.0, self.config.interval_s or 0.0), DISCOVERY_RETRY_MAX_S)
                self._set_state("retrying", f"{e}; retrying in {wait:g} s")
                await self._sleep_for(wait)
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
            if self._limit is not None:
                length = min(length, self._limit)
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

    async def _sleep_for(self, seconds: float) -> None:
        """Sleep ``seconds`` whatever pokes come (a pause or a burst before the server is
        found changes nothing), ending early only on stop."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not self._stop and loop.time() < deadline:
            await self._sleep(deadline - loop.time())

    async def _idle(self, seconds: float, note: str = "") -> None:
        """The gap after a probe (state "idle"): ends early on stop, pause or burst;
        a new range (set_range) does not shorten it."""
        if seconds <= 0 or self._stop:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        self._set_state("idle", f"{seconds:.1f} s" + (f" after {note}" if note else ""))
        while not (self._stop or self._paused or self._burst):
            left = deadline - loop.time()
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
            length = max(self.lengths)  # under the caps
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
