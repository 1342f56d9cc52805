"""Which hop a worker is, where the engine says it.  Pure.

- vLLM: ``kv_transfer_config.kv_role`` (``kv_producer`` = prefill, ``kv_consumer`` =
  decode, ``kv_both`` = either; ``vllm/config/kv_transfer.py``), stated in the dev-mode
  ``/server_info`` (its ``vllm_config``); on /metrics, ``vllm:num_requests_kv_fetch_by_stage``
  is created only when ``kv_transfer_config.is_kv_consumer`` (``vllm/v1/metrics/loggers.py``).
- SGLang: ``disaggregation_mode`` (``prefill`` / ``decode`` / ``null``) in ``/server_info``
  (``ServerArgs``).
- Dynamo: the ``worker_type`` label (``prefill`` / ``decode``) of its per-worker series.
"""

from __future__ import annotations

from typing import Any, Literal

Role = Literal["router", "prefill", "decode"]
#: Where a role came from.
RoleSource = Literal["flag", "kv_role", "disaggregation_mode", "worker_type"]

_KV_ROLE = {"kv_producer": "prefill", "kv_consumer": "decode"}


def _find(d: Any, key: str, depth: int = 0) -> Any:
    """The first value under ``key`` in nested dicts (depth-bounded), else None."""
    if not isinstance(d, dict) or depth > 4:
        return None
    if key in d:
        return d[key]
    for v in d.values():
        got = _find(v, key, depth + 1)
        if got is not None:
            return got
    return None


def role_from_server_info(info: Any) -> tuple[Role, RoleSource] | None:
    """The role an engine's ``/server_info`` JSON states (SGLang ``disaggregation_mode``,
    vLLM ``kv_role``), else None (``null`` / ``kv_both`` / missing / not a dict)."""
    mode = _find(info, "disaggregation_mode")
    if mode in ("prefill", "decode"):
        return mode, "disaggregation_mode"
    kv = _find(info, "kv_role")
    if isinstance(kv, str) and kv in _KV_ROLE:
        return _KV_ROLE[kv], "kv_role"  # type: ignore[return-value]
    return None


def role_from_labels(labels: list[dict[str, str]], consumer: bool = False
                     ) -> tuple[Role, RoleSource] | None:
    """The role the page's labels state: Dynamo's ``worker_type``, ``kv_role`` on an
    info gauge, or (``consumer``) a series only a vLLM KV consumer publishes."""
    for key, source in (("worker_type", "worker_type"), ("kv_role", "kv_role"),
                        ("disaggregation_mode", "disaggregation_mode")):
        vals = {lab.get(key) for lab in labels if key in lab}
        vals = {_KV_ROLE.get(v, v) for v in vals if v}
        if len(vals) == 1 and (v := vals.pop()) in ("prefill", "decode"):
            return v, source  # type: ignore[return-value]
    if consumer:
        return "decode", "kv_role"
    return None


def role_notice(flag: Role, stated: tuple[Role, RoleSource] | None, url: str) -> str | None:
    """A line when the engine's stated role contradicts the flag it was given as."""
    if stated is None or stated[0] == flag:
        return None
    return (f"{url} was given as the {flag} worker but says it is the {stated[0]} "
            f"({stated[1]}); check --prefill / --decode")
