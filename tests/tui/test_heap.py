"""The start-up heap frozen once the app is up (``tui.heap``: fewer objects for each collection to walk)."""

from __future__ import annotations

import gc
import weakref

from prefilltui.tui import heap


class _Cycle:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_freeze_collects_first_then_keeps_the_rest_out_of_the_collector():
    was_enabled = gc.isenabled()
    gc.disable()  # no automatic collection between the steps below
    kept = _Cycle()
    garbage = weakref.ref(_Cycle())
    assert garbage() is not None  # a cycle: still alive until a collection
    try:
        frozen = heap.freeze_startup_heap()
        assert frozen == gc.get_freeze_count() > 0
        assert garbage() is None  # start-up garbage freed first, not frozen for good
        # what survives is out of the collector's generations (gc.get_objects lists
        # only those): a full collection no longer walks it
        assert not any(o is kept for o in gc.get_objects())
        # what the app makes afterwards is collected as before
        later = _Cycle()
        assert any(o is later for o in gc.get_objects())
        gone = weakref.ref(later)
        del later
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()  # the test process runs many apps: give the heap back
        if was_enabled:
            gc.enable()
    assert gc.get_freeze_count() == 0 and any(o is kept for o in gc.get_objects())
