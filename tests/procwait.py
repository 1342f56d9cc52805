"""Waiting for a process to end, shared by the life-cycle tests, the benches and the
component tests (unit and integration)."""

from __future__ import annotations

import signal
import subprocess
import time

import psutil


def gone(pid: int, within: float = 20.0) -> bool:
    """True once ``pid`` no longer exists (or is a zombie nobody reaped yet),
    polling every 50 ms for at most ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def stop(p: subprocess.Popen, timeout: float = 20.0, sig: int = signal.SIGTERM) -> None:
    """Ask ``p`` to end with ``sig``; killed (and reaped) when it has not ended within
    ``timeout`` seconds.  A process that already ended is left as it is."""
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
