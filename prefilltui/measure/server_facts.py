"""What SGLang and TGI state about their own setup over HTTP: ``sglang_facts``, ``tgi_facts``.

SGLang ``GET /server_info`` (``/get_server_info`` before it, kept as a deprecated alias)
answers ``{**dataclasses.asdict(server_args), **scheduler_info, "internal_states": [...],
"version": ...}`` (python/sglang/srt/entrypoints/http_server.py ``server_info``; the
fields are ``ServerArgs``'s in server_args.py): ``chunked_prefill_size`` is its prefill
chunk (-1: chunked prefill off), ``tp_size``/``dp_size``/``enable_dp_attention`` lay out
its ranks (how per-rank ``/metrics`` series combine, ``model.metrics.ranks``).

TGI ``GET /info`` (router/src/lib.rs ``Info``) gives ``max_batch_total_tokens``,
``max_waiting_tokens``, ``waiting_served_ratio`` and ``max_batch_size`` up to 2.1; the
v3 backend's ``support_chunking`` and ``prefix_caching`` are in its ``BackendInfo``
(backends/v3/src/lib.rs), read where a server's ``/info`` carries them.

Only scalars are kept (numbers, booleans, strings of at most ``MAX_FACT_CHARS``); a
value of the wrong type is dropped, never raised.  The parsing is pure; the two GETs
are in ``server.discover``.
"""

from __future__ import annotations

import math
from typing import Any

#: SGLang's configuration endpoints, newest first (the second is the deprecated alias).
SGLANG_SERVER_INFO = ("/server_info", "/get_server_info")

#: The ``/server_info`` fields kept (ServerArgs names, plus scheduler_info's
#: ``max_total_num_tokens`` and ``version``).
SGLANG_FACTS = ("chunked_prefill_size", "max_prefill_tokens", "max_running_requests",
                "max_total_num_tokens", "tp_size", "dp_size", "pp_size", "ep_size",
                "enable_dp_attention", "enable_metrics", "enable_metrics_for_all_schedulers",
                "disable_radix_cache", "page_size", "schedule_policy", "context_length",
                "version")
#: The TGI ``/info`` fields kept.
TGI_FACTS = ("max_batch_total_tokens", "max_waiting_tokens", "waiting_served_ratio",
             "max_batch_size", "max_batch_prefill_tokens", "max_concurrent_requests",
             "support_chunking", "prefix_caching", "version")
#: Longest string fact kept (characters): a version or a policy name.
MAX_FACT_CHARS = 200


def _scalar(v: Any) -> int | float | bool | str | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, str) and 0 < len(v) <= MAX_FACT_CHARS and v.isprintable():
        return v
    return None


def _pick(j: Any, keys: tuple[str, ...]) -> dict[str, int | float | bool | str]:
    if not isinstance(j, dict):
        return {}
    out = {}
    for k in keys:
        v = _scalar(j.get(k))
        if v is not None:
            out[k] = v
    return out


def sglang_facts(j: Any) -> tuple[int | None, dict[str, int | float | bool | str]]:
    """``(chunked_prefill_size, facts)`` from SGLang's ``/server_info`` JSON: the chunk
    in tokens when chunked prefill is on (a positive int; -1 or a missing field gives
    None), and the ``SGLANG_FACTS`` it states."""
    facts = _pick(j, SGLANG_FACTS)
    c = facts.get("chunked_prefill_size")
    chunk = c if isinstance(c, int) and not isinstance(c, bool) and c > 0 else None
    return chunk, facts


def tgi_facts(j: Any) -> dict[str, int | float | bool | str]:
    """The ``TGI_FACTS`` a TGI ``/info`` JSON states."""
    return _pick(j, TGI_FACTS)
