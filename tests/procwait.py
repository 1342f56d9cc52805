"""Waiting for a process to end, shared by the life-cycle tests (unit and integration)."""

from __future__ import annotations

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
