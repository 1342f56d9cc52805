"""What background load did to the target (``--load``, ``--load-levels``), the pure part.

``stall`` (decode stall and excess per probe, from token arrival times), ``levels`` (one
row per load level and the knee where queueing takes over), ``summary`` (``LoadSummary``,
the load part of a run's summary).  The load's record and parser are ``model/loadspec``;
the load itself runs in ``measure/load``.  Pure: no I/O.  Seconds in data.

The rest of prefilltui imports this package, never its modules (an import-linter
contract); its modules import each other directly.
"""

from __future__ import annotations

from prefilltui.model.load.levels import LevelTable, level_of, levels_in, share
from prefilltui.model.load.stall import (
    DecodeTrace, StallSummary, ahead_tokens, apply_stall, baseline_gap, gap_series, itl_quantiles,
    merge_arrivals, probe_window, waiting_for, window_stall,
)
from prefilltui.model.load.summary import (
    LoadFacts, LoadSummary, facts_of_run, load_summary, main_results,
)

__all__ = [
    "DecodeTrace", "LevelTable", "LoadFacts", "LoadSummary", "StallSummary", "ahead_tokens",
    "apply_stall", "baseline_gap", "facts_of_run", "gap_series", "itl_quantiles", "level_of",
    "levels_in", "load_summary", "main_results", "merge_arrivals", "probe_window", "share",
    "waiting_for", "window_stall",
]
