"""The causes of a high TTFT, one rule each (a module per cause, each
``judge(ctx: Context) -> Evidence | None``: ``base``), and their registry.

``RULES`` is the order they are asked in (a rule sees the findings of those before it:
head-of-line is not named when queueing found a line, the users' queueing not when the
probes' queueing held, prompts_longer's words say whether slow prefill held too).
``CAUSES`` / ``WORDS``: every verdict and its headline words.  Adding a cause: its
module (``judge`` and its ``RULE``, its thresholds beside it), and here its entry in
``RULES``, its name at the end of ``Cause`` / ``CAUSES`` (the exporter's state set
keeps this order) and its words in ``WORDS``.  The thresholds the rest of the verdict
reads are named here too (the held users' reference, the judge).
"""

from __future__ import annotations

from typing import Literal

from prefilltui.model.diagnosis.causes import (
    cache_hit_drop, head_of_line, overhead, prefix_cache, prompts_longer, queueing,
    server_changed, slow_prefill,
)
from prefilltui.model.diagnosis.causes import decode_admission, kv_transfer, router
from prefilltui.model.diagnosis.causes.base import (
    MIN_PROBES, MIN_QUEUE_S, SHARE, Context, Evidence, Rule,
)
from prefilltui.model.diagnosis.causes.cache_hit_drop import HIT_DROP
from prefilltui.model.diagnosis.causes.head_of_line import BLOCKED, LINE, blocked, counted_ahead
from prefilltui.model.diagnosis.causes.overhead import MIN_OVERHEAD_S
from prefilltui.model.diagnosis.causes.prompts_longer import LONGER
from prefilltui.model.diagnosis.causes.server_changed import RECENT_S as CHANGE_RECENT_S
from prefilltui.model.diagnosis.causes.server_changed import cache_turned_off
from prefilltui.model.diagnosis.causes.slow_prefill import SLOW

Cause = Literal["queueing", "head_of_line", "slow_prefill", "prefix_cache", "overhead",
                "none", "not_enough_data", "prompts_longer", "cache_hit_drop", "server_changed",
                "kv_transfer", "decode_admission", "router"]
#: Every verdict, in the order the exporter's state set lists them (new ones at the end).
CAUSES: tuple[Cause, ...] = ("queueing", "head_of_line", "slow_prefill", "prefix_cache",
                             "overhead", "none", "not_enough_data", "prompts_longer",
                             "cache_hit_drop", "server_changed", "kv_transfer",
                             "decode_admission", "router")
#: Words for each cause (the headline's first words).
WORDS = {"queueing": "queueing", "head_of_line": "head-of-line blocking",
         "slow_prefill": "slow prefill", "prefix_cache": "prefix cache not used",
         "overhead": "overhead (network/TLS/gateway)", "none": "nothing stands out",
         "not_enough_data": "not enough data", "prompts_longer": "users' prompts got longer",
         "cache_hit_drop": "prefix cache stopped hitting", "server_changed": "the server changed",
         "kv_transfer": "KV transfer (prefill -> decode)",
         "decode_admission": "decode worker admission", "router": "router"}

#: The rules in the order they are asked (and, among equal seconds, listed).
RULES: tuple[Rule, ...] = (
    queueing.RULE, head_of_line.RULE, slow_prefill.RULE, prefix_cache.RULE, overhead.RULE,
    queueing.USERS_RULE, cache_hit_drop.RULE, prompts_longer.RULE, server_changed.RULE,
    # a disaggregated path's hops (probes with ``hops``; nothing for a single server)
    kv_transfer.RULE, decode_admission.RULE, router.RULE,
)

__all__ = ["BLOCKED", "CAUSES", "CHANGE_RECENT_S", "Cause", "Context", "Evidence", "HIT_DROP", "LINE", "LONGER",
           "MIN_OVERHEAD_S", "MIN_PROBES", "MIN_QUEUE_S", "RULES", "Rule", "SHARE", "SLOW",
           "WORDS", "blocked", "cache_turned_off", "counted_ahead"]
