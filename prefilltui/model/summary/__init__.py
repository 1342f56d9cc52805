"""A run, summarised: ``RunSummary`` at the end of a run or of a run file, ``LiveSummary``
probe by probe.

``run`` (the ``RunSummary`` record and its parts; ``to_json`` is docs/schema.md),
``analysis`` (``analyze(results, server_info, options)``: the one place a fit is judged),
``live`` (the same summary kept up to date in O(1) per probe).  Pure: no I/O.

The rest of prefilltui imports this package, never its modules (an import-linter
contract); its modules import each other directly.
"""

from __future__ import annotations

from prefilltui.model.summary.analysis import QUADRATIC_SOURCE_WORDS, analyze, plain_summary
from prefilltui.model.summary.live import LiveSummary
from prefilltui.model.summary.run import LiveFacts, ProbeCounts, RunSummary, VERDICTS

__all__ = [
    "LiveFacts", "LiveSummary", "ProbeCounts", "QUADRATIC_SOURCE_WORDS", "RunSummary", "VERDICTS",
    "analyze", "plain_summary",
]
