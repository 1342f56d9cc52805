"""TTFT objectives: the objective and its presets, the longest prompt that meets it,
attainment and the error budget, the burn rate.

``objective`` (``Objective``, ``parse_objective``: ``ttft=2s@p99``), ``presets``
(MLPerf Inference's TTFT limits, resolved by the server's model), ``prompt_limit``
(n_max from the fitted line and its interval), ``attainment`` (the share within the
objective, exact or from histogram buckets, with its interval; the budget left),
``burn`` (the multiwindow, multi-burn-rate judgement), ``status`` (one objective
now, from every source: ``SloStatus``), ``rate_search`` (the highest offered rate that
holds it: bisection over measured steps), ``fleet`` (each replica worst first, the
fleet's attainment from merged counts).  Pure: no I/O.  Seconds.

The rest of prefilltui imports this package, never its modules (an import-linter
contract); its modules import each other directly.
"""

from __future__ import annotations

from prefilltui.model.slo.attainment import (
    Attainment, AttainmentSource, attainment_from_buckets, attainment_of, wilson,
)
from prefilltui.model.slo.burn import (
    BURN_RULES, BurnRule, BurnSeverity, BurnState, WindowBurn, burn_state,
)
from prefilltui.model.slo.fleet import (
    fleet_from_buckets, merged_attainment, merged_buckets, replicas_worst_first,
)
from prefilltui.model.slo.objective import (
    PRESET_NAMES, Objective, SloItem, SloPreset, parse_objective,
)
from prefilltui.model.slo.presets import MLPERF_TTFT, MlperfLimit, preset_objective, resolve
from prefilltui.model.slo.prompt_limit import N_SEARCH_MAX, PromptLimit, longest_prompt, z_of
from prefilltui.model.slo.rate_search import (
    RateSearch, RateStep, next_rate, saturated, search_result, step_of,
)
from prefilltui.model.slo.status import SloStatus, slo_status

__all__ = [
    "Attainment", "AttainmentSource", "BURN_RULES", "BurnRule", "BurnSeverity", "BurnState",
    "MLPERF_TTFT", "MlperfLimit", "N_SEARCH_MAX", "Objective", "PRESET_NAMES", "PromptLimit", "RateSearch", "RateStep",
    "SloItem", "SloPreset", "SloStatus", "WindowBurn", "attainment_from_buckets", "attainment_of",
    "burn_state", "fleet_from_buckets", "longest_prompt", "merged_attainment",
    "merged_buckets", "next_rate", "parse_objective", "preset_objective", "replicas_worst_first", "resolve",
    "saturated", "search_result", "slo_status", "step_of", "wilson", "z_of",
]
