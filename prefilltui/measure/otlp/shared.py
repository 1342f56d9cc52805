"""One receiver per listen address per process: the sessions of a fleet (or of the
exporter's targets) that name the same ``--otlp-listen`` share it, each with its own
``UsersTrace`` on the receiver's router; the last to let go stops it."""

from __future__ import annotations

import threading

from prefilltui.measure.httpserver import parse_listen
from prefilltui.measure.otlp.receiver import OtlpReceiver

_lock = threading.Lock()
_open: dict[tuple[str, int], tuple[OtlpReceiver, int]] = {}


def acquire(listen: str) -> OtlpReceiver:
    """The started receiver on ``listen`` (``HOST:PORT``), made on first use.

    Raises:
        ValueError: not HOST:PORT; OSError: the address cannot be bound.
    """
    key = parse_listen(listen)
    with _lock:
        got = _open.get(key)
        if got is None or (key[1] == 0):
            rx = OtlpReceiver(*key).start()
            _open[(key[0], rx.port) if key[1] == 0 else key] = (rx, 1)
            return rx
        rx, n = got
        _open[key] = (rx, n + 1)
        return rx


def release(rx: OtlpReceiver) -> None:
    """One user fewer of ``rx``; stopped when none is left."""
    with _lock:
        for key, (r, n) in list(_open.items()):
            if r is rx:
                if n > 1:
                    _open[key] = (r, n - 1)
                    return
                del _open[key]
                break
    rx.stop()
