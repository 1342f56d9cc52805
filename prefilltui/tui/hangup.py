"""Ending the live app when its terminal hangs up without a SIGHUP.

An SSH session that drops sends SIGHUP to the terminal's foreground processes, and
the app ends.  Some hang-ups come without the signal: ``kubectl exec -it`` and
``docker exec -it`` leave the process running when the client goes (the other end of
its pseudo-terminal closes, no signal comes), and so does a process in a session of
its own (``setsid``).  Textual's input thread then spins on the hung-up terminal
(every read returns at once: a whole core, 99.6 % measured here) and its output
thread dies on the first failed write, after which the app blocks for good once 30
writes are queued: a process burning a core of a GPU box until someone finds it.

``HangupWatch`` is one daemon thread blocked in ``poll`` on the terminal's file
descriptors with no events asked for (a hang-up is always reported): no wake-up while
the terminal is there.  On a hang-up it asks the app to end (``on_hangup``, the exit
code 129 as the signal would give) and, should the app not be gone ``GRACE_S`` later
(blocked on its dead output), ends the process as SIGHUP does.  The run file loses
nothing either way: each probe's line is flushed when written.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from typing import Callable, Sequence

#: Seconds the app has to end by itself after a hang-up (stop its threads, close the
#: run file) before the process ends as SIGHUP would.
GRACE_S = 10.0
#: The events that mean the terminal is gone (reported whatever events were asked);
#: POLLNVAL (the descriptor was closed here) is not one: the watch just ends.
GONE = select.POLLHUP | select.POLLERR


def terminals(fds: Sequence[int] = (0, 1, 2)) -> tuple[int, ...]:
    """Those of ``fds`` that are terminals now (a hung-up terminal no longer says it
    is one, so this is asked before).  Never raises."""
    out = []
    for fd in fds:
        try:
            if os.isatty(fd):
                out.append(fd)
        except (OSError, ValueError):
            continue
    return tuple(out)


def hung_up(fds: Sequence[int], timeout_s: float | None = 0.0) -> bool:
    """Whether any of the terminals ``fds`` hung up, waiting up to ``timeout_s``
    seconds (None: until one does or a descriptor is closed here).  False for no
    ``fds`` and for closed ones; never raises."""
    if not fds:
        return False
    try:
        poller = select.poll()  # AttributeError where there is none (Windows)
        for fd in fds:
            poller.register(fd, 0)  # no events asked: only a hang-up or error wakes it
        events = poller.poll(None if timeout_s is None else int(timeout_s * 1000))
    except (OSError, ValueError, AttributeError):
        return False
    return any(ev & GONE for _, ev in events)


class HangupWatch:
    """One daemon thread that waits for the terminals ``fds`` to hang up, then calls
    ``on_hangup()`` (from that thread: it must only hand the exit to the app's loop)
    and, if the process still runs ``grace_s`` later, ends it as SIGHUP does (the
    signal; ``os._exit(129)`` where SIGHUP is ignored)."""

    def __init__(self, fds: Sequence[int], on_hangup: Callable[[], None], *,
                 grace_s: float = GRACE_S, end: Callable[[], None] | None = None) -> None:
        self.fds = tuple(fds)
        self.on_hangup = on_hangup
        self.grace_s = grace_s
        #: what ends the process after the grace (tests pass their own)
        self.end = end or end_as_sighup
        self.thread: threading.Thread | None = None

    def start(self) -> "HangupWatch":
        """Start the thread (nothing to watch: no thread).  Returns self."""
        if self.fds and self.thread is None:
            self.thread = threading.Thread(target=self._run, name="prefilltui-hangup",
                                           daemon=True)
            self.thread.start()
        return self

    def _run(self) -> None:
        if not hung_up(self.fds, None):
            return  # the check cannot run here: leave it to SIGHUP
        try:
            self.on_hangup()
        finally:
            threading.Event().wait(self.grace_s)
            self.end()


def end_as_sighup() -> None:
    """End this process as a terminal's SIGHUP does (``os._exit(129)`` should the
    signal be ignored, as under ``nohup``)."""
    os.kill(os.getpid(), signal.SIGHUP)
    threading.Event().wait(1.0)
    os._exit(128 + signal.SIGHUP)
