"""LoopThread: the one thread-with-its-own-loop the sweep runner, the background load,
the OTLP receiver and the exporter's HTTP server share: start / ready, poke / sleep,
cancel (also before the loop runs), the clean-up of what main left, a crash logged."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from prefilltui.measure.loop_thread import LoopThread


def test_poke_wakes_sleep_and_main_ends_the_thread():
    lt = LoopThread("t-poke")
    woke: list[float] = []

    async def main():
        t0 = time.monotonic()
        await lt.sleep(30)
        woke.append(time.monotonic() - t0)

    lt.start(main)
    assert lt.started and lt.alive
    with pytest.raises(RuntimeError):
        lt.start(main)
    deadline = time.monotonic() + 5
    while not woke and time.monotonic() < deadline:
        lt.poke()
        time.sleep(0.05)
    lt.join(5)
    assert woke and woke[0] < 5 and not lt.alive


def test_ready_then_cancel_runs_mains_finally_and_cancels_what_it_left():
    lt = LoopThread("t-serve")
    said: list[str] = []

    async def child():
        try:
            await asyncio.sleep(3600)
        finally:
            said.append("child cancelled")

    async def main():
        asyncio.get_running_loop().create_task(child())
        try:
            lt.ready()
            await asyncio.get_running_loop().create_future()
        finally:
            said.append("main's finally")

    t0 = time.monotonic()
    lt.start(main, ready_s=5)
    assert time.monotonic() - t0 < 4 and lt.alive
    lt.stop(5)
    assert not lt.alive and said == ["main's finally", "child cancelled"]


def test_cancel_before_the_loop_runs_is_not_lost():
    lt = LoopThread("t-early")
    ran: list[str] = []

    async def main():
        ran.append("started")
        await asyncio.sleep(3600)

    lt.cancel()  # before start: the loop does not exist yet
    lt.start(main)
    lt.join(5)
    assert not lt.alive and ran == []  # cancelled before its first step


def test_a_crash_is_logged_not_raised_and_start_does_not_wait_for_a_dead_main():
    lt = LoopThread("t-crash")
    said: list[str] = []

    class Keep(logging.Handler):  # on the module's own logger: whatever the app set above it
        def emit(self, record):
            said.append(record.getMessage() + str(record.exc_info[1] if record.exc_info else ""))

    async def main():
        raise ValueError("boom")

    log = logging.getLogger("prefilltui.measure.loop_thread")
    keep = Keep(logging.ERROR)
    log.addHandler(keep)
    t0 = time.monotonic()
    try:
        lt.start(main, ready_s=10)  # never said ready: the end releases the wait
        lt.join(5)
    finally:
        log.removeHandler(keep)
    assert time.monotonic() - t0 < 5 and not lt.alive
    assert said == ["t-crash crashedboom"], said
    lt.poke()  # after the end: nothing to wake, no error
    lt.cancel()


def test_join_from_its_own_thread_is_a_no_op():
    lt = LoopThread("t-self")
    done: list[bool] = []

    async def main():
        lt.join(5)  # would deadlock if it waited for itself
        done.append(True)

    lt.start(main)
    lt.join(5)
    assert done == [True]
