"""Targets judged and the fleet at a glance: the overview's rows, health, advice, status.

``rows`` (``FleetRow`` per target, their order, the fleet's own probing load),
``health`` (the exporter's alert rules judged on one snapshot), ``advisor`` (which
server knob to turn, from what was measured), ``status`` (``FleetStatus``, the snapshot
``prefilltui status --format json`` prints).  Pure: no I/O.

The rest of prefilltui imports this package, never its modules (an import-linter
contract); its modules import each other directly.
"""

from __future__ import annotations

from prefilltui.model.fleet.advisor import Advice, CacheFinding, ITL_GOAL_S, advise, target_inputs
from prefilltui.model.fleet.health import (
    HANG_AFTER_S, HANG_SLOWEST_FACTOR, hang_threshold_s, roofline_expected,
)
from prefilltui.model.fleet.rows import (
    FleetLoad, FleetRow, RecentProbes, SORT_KEYS, fleet_interval, fleet_load, fleet_row, rank,
    sort_rows,
)
from prefilltui.model.fleet.status import FleetStatus, TargetStatus

__all__ = [
    "Advice", "CacheFinding", "FleetLoad", "FleetRow", "FleetStatus", "HANG_AFTER_S",
    "HANG_SLOWEST_FACTOR", "ITL_GOAL_S", "RecentProbes", "SORT_KEYS", "TargetStatus", "advise",
    "fleet_interval", "fleet_load", "fleet_row", "hang_threshold_s", "rank", "roofline_expected",
    "sort_rows", "target_inputs",
]
