"""The sweep: probes at many prompt lengths, one in flight, in its own thread and loop.

``runner`` (``SweepRunner``: the thread, its state, start/stop/pause), ``loop``
(``ProbeLoop``: discovery, calibration, probe after probe with the retry policy),
``config`` (``SweepConfig``, ``ProbeHook``, the lengths, the context and time caps).

The rest of prefilltui imports this package, never its modules (an import-linter
contract); its modules import each other directly.
"""

from __future__ import annotations

from prefilltui.measure.sweep.config import (TIME_CAP_S, ProbeHook, SweepConfig, cap_for_context,
                                             make_lengths)
from prefilltui.measure.sweep.runner import SweepRunner

__all__ = [
    "ProbeHook", "SweepConfig", "SweepRunner", "TIME_CAP_S", "cap_for_context", "make_lengths",
]
