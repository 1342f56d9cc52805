"""The app's heap after start-up: collected once, then kept out of the collector.

A running dashboard holds ~110,000 long-lived Python objects (Textual's DOM and styles,
numpy, plotext, httpx, the themes), almost all made while it starts.  CPython's cyclic
collector walks all of them on every full (generation-2) collection, which comes back
every ~40 s at one probe a second as the app's young objects survive: ~170 ms of the UI
thread each time (a frame skipped) and ~0.5 % of a core on average, measured with
``gc.callbacks`` on the 2-core development machine (docs/performance.md).  Once the first
screens are up, ``freeze_startup_heap`` collects once and moves every surviving object to
the permanent generation (``gc.freeze``, the CPython documentation's own remedy for a
long-lived heap made at start-up): later collections walk only what the app made since,
which the collector still frees as before.  What start-up left unreachable is freed by
the one collection first, so freezing keeps nothing that was garbage.

Only for an app on a real terminal: a test process runs many apps one after another and
must not keep each one's heap for good.
"""

from __future__ import annotations

import gc

__all__ = ["FREEZE_AFTER_S", "freeze_startup_heap"]

#: Seconds after the app mounts: the first screen, the first probe's redraw and the
#: lazy imports (plotext, the fits, the probe client) are done by then (first frame
#: 0.7-1.3 s on the 2-core machine, tests/bench/bench_tui.py).
FREEZE_AFTER_S = 5.0


def freeze_startup_heap() -> int:
    """Collect once, then freeze every object alive (``gc.collect`` + ``gc.freeze``).

    Returns the number of objects now in the permanent generation
    (``gc.get_freeze_count``).  Idempotent in effect: a second call freezes what was
    made since.  Never raises.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
