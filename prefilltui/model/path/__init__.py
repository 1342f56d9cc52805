"""A target that is a path: a router in front of a prefill worker and a decode worker
(disaggregated serving).  What each worker's /metrics says about its hop (``names``,
``reading``), its role (``roles``), the KV cache's size per token against what the
transfers moved (``kv``), and the window summarised with its two fits (``summary``).
Pure: the scraping and the direct probes of the prefill worker are ``measure.path_hook``.
"""

from __future__ import annotations

from prefilltui.model.path.kv import (
    DTYPE_BYTES, FEWER, MORE, KvCheck, KvFigures, kv_bytes_per_token, kv_figures,
)
from prefilltui.model.path.names import PATH_NAMES, SGLANG_PATH, VLLM_PATH, PathNames
from prefilltui.model.path.reading import RESIDUAL_SLACK, WorkerReading, read_worker, split_hops
from prefilltui.model.path.roles import (
    Role, RoleSource, role_from_labels, role_from_server_info, role_notice,
)
from prefilltui.model.path.summary import (
    HOP_CAUSES, PathSummary, PrefillProbe, hop_cause, hop_medians, summarize_path,
)

__all__ = [
    "DTYPE_BYTES", "FEWER", "HOP_CAUSES", "KvCheck", "KvFigures", "MORE", "PATH_NAMES", "PathNames",
    "PathSummary", "PrefillProbe", "RESIDUAL_SLACK", "Role", "RoleSource", "SGLANG_PATH",
    "VLLM_PATH", "WorkerReading", "hop_cause", "hop_medians", "kv_bytes_per_token", "kv_figures",
    "read_worker", "role_from_labels", "role_from_server_info", "role_notice", "split_hops",
    "summarize_path",
]
