"""SIGHUP held from the first moment of the exporter's process.

The exporter reloads its targets on SIGHUP (``commands/exporter.py``), but installs that
handler only once its configuration is read and its port is open; a SIGHUP sent while
it starts (a service manager's ``reload`` right after ``start``) killed it with exit
129.  ``defer_sighup`` is called first thing in ``cli.main``: until the exporter takes
over, a SIGHUP is only counted in ``EARLY_SIGHUPS`` (the exporter then reloads once).
Stdlib only, so importing it costs nothing before the handler is in place.
"""

from __future__ import annotations

import signal

#: SIGHUPs received before the exporter installed its own handler.
EARLY_SIGHUPS: list[int] = []


def defer_sighup(argv: list[str]):
    """For ``prefilltui exporter ...``: count SIGHUP instead of dying of it.  Returns a
    function that puts the previous handler back (``cli.main`` calls it when the
    command returns, so a process calling ``main()`` keeps its own handler)."""
    if "exporter" not in argv or not hasattr(signal, "SIGHUP"):
        return lambda: None
    try:
        old = signal.signal(signal.SIGHUP, lambda *_: EARLY_SIGHUPS.append(1))
    except ValueError:  # not the main thread (a test calling main() from a thread)
        return lambda: None

    def restore() -> None:
        EARLY_SIGHUPS.clear()
        try:
            signal.signal(signal.SIGHUP, old)
        except (ValueError, TypeError):
            pass
    return restore


def take_early_sighups() -> bool:
    """Whether a SIGHUP came before the exporter's handler (and forget it)."""
    came = bool(EARLY_SIGHUPS)
    EARLY_SIGHUPS.clear()
    return came
