"""Background load on the target, opt-in and bounded (``--load``; docs/load.md).

``generator`` (``LoadGenerator``: its own thread, loop and connection pool), ``request``
(one load request streamed token by token), ``hook`` (the sweep's ``ProbeHook``: tag
each probe with its load and measure the decode stall).  The maths is ``model/load``.

The rest of prefilltui imports this package, never its modules (an import-linter
contract); its modules import each other directly.
"""

from __future__ import annotations

from prefilltui.measure.load.generator import LoadGenerator
from prefilltui.measure.load.hook import LoadHook

__all__ = [
    "LoadGenerator", "LoadHook",
]
