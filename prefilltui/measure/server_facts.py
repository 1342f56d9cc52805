"""What servers state about their own setup over HTTP: ``sglang_facts``, ``tgi_facts``,
``llama_cpp_facts``, and ``stated_facts`` (every kind's, re-read to see a server change).

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
are in ``server.discover``; ``measure.server_watch`` re-reads ``STATED_PATHS``.
"""

from __future__ import annotations

from typing import Any

from prefilltui.model.server_change import MAX_FACT_CHARS, fact  # noqa: F401  (the facts' cap, read here)

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
#: Longest string fact kept (characters), and the scalar check: the model's, one home.
_scalar = fact


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


# -- what a server states about itself, re-read to see it change -----------------------

#: The metadata endpoints read for each kind's stated identity and setup (GET, JSON):
#: every kind's ``/v1/models`` (its model ids, vLLM's ``max_model_len``), plus vLLM
#: ``/version``, llama.cpp ``/props`` (tools/server/server.cpp ``handle_props``:
#: ``default_generation_settings``, ``total_slots``, ``model_path``, ``build_info``),
#: SGLang ``/server_info`` and TGI ``/info`` (above).
STATED_PATHS: dict[str, tuple[str, ...]] = {
    "vllm": ("/v1/models", "/version"),
    "llama.cpp": ("/v1/models", "/props"),
    "sglang": ("/v1/models", SGLANG_SERVER_INFO[0]),
    "tgi": ("/info",),
    "ollama": ("/v1/models", "/api/version"),
}
STATED_DEFAULT = ("/v1/models",)
#: The llama.cpp ``/props`` fields kept (top level, then ``default_generation_settings``).
LLAMA_CPP_FACTS = ("total_slots", "model_path", "build_info", "n_ctx")
LLAMA_CPP_SETTINGS = ("n_ctx", "n_batch", "n_ubatch", "cache_prompt", "n_keep", "n_discard")


def llama_cpp_facts(j: Any) -> dict[str, int | float | bool | str]:
    """The ``LLAMA_CPP_FACTS`` of a llama.cpp ``/props`` JSON, then those of its
    ``default_generation_settings`` (and its ``params``, where a release nests them)."""
    facts = _pick(j, LLAMA_CPP_FACTS)
    dgs = j.get("default_generation_settings") if isinstance(j, dict) else None
    if isinstance(dgs, dict):
        params = dgs.get("params") if isinstance(dgs.get("params"), dict) else {}
        for k, v in {**_pick(params, LLAMA_CPP_SETTINGS), **_pick(dgs, LLAMA_CPP_SETTINGS)
                     }.items():
            facts.setdefault(k, v)
    return facts


def models_facts(j: Any) -> dict[str, int | float | bool | str]:
    """``model`` (the base models' ids, sorted, joined by ", ") and the first one's
    ``max_model_len`` / ``context_length`` from a ``/v1/models`` JSON.  An entry with a
    ``parent`` (a vLLM LoRA adapter, loaded and unloaded at run time) is no base model:
    left out, so loading one is not another server."""
    data = j.get("data") if isinstance(j, dict) else None
    if not isinstance(data, list):
        return {}
    entries = [m for m in data if isinstance(m, dict) and not m.get("parent")]
    ids = sorted(str(m["id"]) for m in entries if isinstance(m.get("id"), (str, int))
                 and not isinstance(m.get("id"), bool))
    facts: dict[str, int | float | bool | str] = {}
    model = _scalar(", ".join(ids)) if ids else None
    if model is not None:
        facts["model"] = model
    if entries:
        facts.update(_pick(entries[0], ("max_model_len", "context_length")))
    return facts


def stated_facts(kind: str, answers: dict[str, Any]) -> dict[str, int | float | bool | str]:
    """What a ``kind`` server states about itself, from the JSON answers of its
    ``STATED_PATHS`` (path -> parsed JSON, None for one that failed): its model ids,
    context, version, build and the setup its kind states (``sglang_facts``,
    ``tgi_facts``, ``llama_cpp_facts``); scalars only, never raises."""
    facts = models_facts(answers.get("/v1/models"))
    for path, j in answers.items():
        if not isinstance(j, dict):
            continue
        if path in ("/version", "/api/version"):
            facts.update(_pick(j, ("version",)))
        elif path == "/props":
            facts.update(llama_cpp_facts(j))
        elif path in SGLANG_SERVER_INFO:
            facts.update(sglang_facts(j)[1])
        elif path == "/info":
            facts.update(tgi_facts(j))
            facts.update(_pick(j, ("model_id", "sha", "docker_label")))
    return facts
