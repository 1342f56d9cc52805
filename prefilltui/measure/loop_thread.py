"""A daemon thread that runs one coroutine in an asyncio loop of its own.

The sweep runner, the background load, the OTLP receiver and the exporter's HTTP
server each own one, so a busy caller (the UI, a scrape) never delays their reads:
``LoopThread(name).start(main)`` returns at once and ``main()`` runs to its end in the
thread; with ``ready_s`` it first waits (that long at most) for ``main`` to say
``ready()`` (a server listening).  From any thread: ``poke()`` wakes ``sleep()``, ``cancel()`` cancels ``main``
(also when asked before the loop runs), ``join()`` waits (a no-op in the thread
itself), ``stop()`` does both.  When ``main`` ends, however it ends, the tasks it left are cancelled and
given ``CLEANUP_S`` to finish, async generators are shut down and the loop is closed.
``main`` handles its own errors; one that escapes it is logged, never raised.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable, Coroutine

log = logging.getLogger(__name__)

#: Seconds the tasks ``main`` left are given to finish once cancelled.
CLEANUP_S = 1.0


class LoopThread:
    """One daemon thread named ``name`` and its asyncio loop (module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._cancelled = False
        self._ready = threading.Event()

    def start(self, main: Callable[[], Coroutine[Any, Any, None]], *,
              ready_s: float | None = None) -> None:
        """Run ``main()`` in the thread; returns at once, or with ``ready_s`` once
        ``main`` said ``ready()``, ended, or ``ready_s`` seconds passed.

        Raises:
            RuntimeError: already started.
        """
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self._thread = threading.Thread(target=self._run, args=(main,), name=self.name,
                                        daemon=True)
        self._thread.start()
        if ready_s is not None:
            self._ready.wait(ready_s)

    def ready(self) -> None:
        """Said by ``main`` when it is ready (``start(..., ready_s=...)`` returns)."""
        self._ready.set()

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def alive(self) -> bool:
        """True while the thread runs (started and ``main`` not finished)."""
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` s for the thread (a no-op from the thread itself)."""
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def poke(self) -> None:
        """Wake ``sleep()`` now (any thread; nothing before the loop runs)."""
        self._soon(lambda: self._wake.set() if self._wake is not None else None)

    def cancel(self) -> None:
        """Cancel ``main`` (any thread): at once when it runs, at its start when not yet."""
        self._cancelled = True
        self._soon(lambda: self._task.cancel() if self._task is not None else None)

    def stop(self, timeout: float | None = None) -> None:
        """``cancel()``, then ``join(timeout)``."""
        self.cancel()
        self.join(timeout)

    async def sleep(self, seconds: float) -> None:
        """Sleep up to ``seconds`` in the thread's loop, woken early by ``poke()``."""
        assert self._wake is not None
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=max(0.0, seconds))
        except asyncio.TimeoutError:
            pass

    def _soon(self, fn: Callable[[], None]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(fn)
            except RuntimeError:  # closed meanwhile
                pass

    def _run(self, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._wake = asyncio.Event()
            self._task = loop.create_task(main())
            if self._cancelled:  # cancel() came before the loop existed
                self._task.cancel()
            loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass  # cancel(): main has had its say
        except Exception:  # main's own errors are its own; this is the last net
            log.exception("%s crashed", self.name)
        finally:
            self._ready.set()  # ended: nobody waits for it
            try:
                left = asyncio.all_tasks(loop)
                for t in left:
                    t.cancel()
                if left:
                    loop.run_until_complete(asyncio.wait(left, timeout=CLEANUP_S))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
