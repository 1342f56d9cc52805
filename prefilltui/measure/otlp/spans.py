"""The request spans in one OTLP trace export, as ``UserRequest`` records.

A request span is one named ``llm_request`` (vLLM's, ``vllm/tracing.py``; started at
the request's arrival) or any span carrying ``gen_ai.latency.time_to_first_token``
(the same attribute names from another engine or a gateway).  Only these attributes
are read, by name; nothing else of a span (no prompt or output text, which vLLM does
not send anyway) is ever looked at:

=====================================  ===============================
``gen_ai.request.id``                  ``UserRequest.request_id``
``gen_ai.usage.prompt_tokens``         ``prompt_tokens``
``gen_ai.usage.cached_tokens``         ``cached_tokens`` (when sent)
``gen_ai.latency.time_to_first_token`` ``ttft_s``
``gen_ai.latency.time_in_queue``       ``queue_s``
``gen_ai.latency.time_in_model_prefill`` ``prefill_s``
``gen_ai.latency.e2e``                 ``e2e_s``
``gen_ai.request.max_tokens``          ``max_tokens``
=====================================  ===============================

A request span with a value of the wrong type or out of range (negative, not finite,
or no request a server ran: ``model.users.request_problem``, a TTFT of 1e300 s, a
prompt of 1e30 tokens, more cached tokens than the prompt, a queue longer than its TTFT)
is rejected (counted in ``Batch.rejected``, the OTLP ``partial_success``); any other
span is counted in ``Batch.other`` and ignored.  Each span keeps its resource's
identifying attributes (``RESOURCE_KEYS``) so the receiver can tell targets apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from prefilltui.model.users import UserRequest, request_problem

#: vLLM's request span name (vllm/tracing.py, ``instrument_manual(span_name="llm_request")``).
REQUEST_SPAN = "llm_request"
#: Attribute names (vllm/tracing.py ``SpanAttributes``).
ID = "gen_ai.request.id"
PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
CACHED_TOKENS = "gen_ai.usage.cached_tokens"
TTFT = "gen_ai.latency.time_to_first_token"
QUEUE = "gen_ai.latency.time_in_queue"
PREFILL = "gen_ai.latency.time_in_model_prefill"
E2E = "gen_ai.latency.e2e"
MAX_TOKENS = "gen_ai.request.max_tokens"
#: Resource attributes that may name the server a span came from.
RESOURCE_KEYS = ("service.name", "service.instance.id", "host.name", "server.address")
#: The longest request id kept (characters): ids are matched, never shown whole.
MAX_ID_CHARS = 256


@dataclass(frozen=True, slots=True)
class Found:
    """One request span and the identifying attributes of its resource."""

    request: UserRequest
    resource: tuple[tuple[str, str], ...]
    #: the span's identity (trace id + span id), b"" when it has no span id: the same
    #: span sent again (an exporter's retry after a lost answer) has the same key
    key: bytes = b""


@dataclass(slots=True)
class Batch:
    """What one export held: the request spans, the rejected ones (with the first
    reason) and the count of other spans."""

    found: list[Found] = field(default_factory=list)
    rejected: int = 0
    reason: str = ""
    other: int = 0


def _value(v):
    """An AnyValue's scalar (str, int, float, bool), or None for arrays, maps, bytes."""
    kind = v.WhichOneof("value")
    if kind in ("string_value", "int_value", "double_value", "bool_value"):
        return getattr(v, kind)
    return None


class _Kind:
    """A read attribute holding an array, a map or bytes: its kind, for the reason."""

    def __init__(self, kind: str) -> None:
        self.kind = kind.removesuffix("_value")

    def __str__(self) -> str:
        return f"<{self.kind}>"


def _read(v):
    """A read attribute's value: its scalar, None when empty (no value set), or a
    ``_Kind`` for an array, a map or bytes (a wrong type: the span is rejected, never
    read as if the attribute were absent: a TTFT sent as an array is no TTFT-less user,
    a request id sent as bytes no user instead of a probe)."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    scalar = _value(v)
    return scalar if scalar is not None else _Kind(kind)


class _Bad(ValueError):
    pass


def _seconds(attrs: dict, key: str) -> float | None:
    v = attrs.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise _Bad(f"{key} is {str(v)[:40]!r}, not a time in seconds")
    return float(v)


def _tokens(attrs: dict, key: str) -> int | None:
    v = attrs.get(key)
    if v is None:
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise _Bad(f"{key} is {str(v)[:40]!r}, not a token count")
    return v


def read_batch(req: ExportTraceServiceRequest, *, received_s: float) -> Batch:
    """The request spans of ``req`` (see the module docstring); ``received_s``: unix
    seconds the body arrived (each ``UserRequest.received_s``)."""
    out = Batch()
    for rs in req.resource_spans:
        res = tuple((a.key, str(_value(a.value))) for a in rs.resource.attributes
                    if a.key in RESOURCE_KEYS and _value(a.value) is not None)
        for ss in rs.scope_spans:
            for sp in ss.spans:
                names = {a.key for a in sp.attributes}
                if sp.name != REQUEST_SPAN and TTFT not in names:
                    out.other += 1
                    continue
                attrs = {a.key: _read(a.value) for a in sp.attributes
                         if a.key in (ID, PROMPT_TOKENS, CACHED_TOKENS, TTFT, QUEUE, PREFILL, E2E,
                                      MAX_TOKENS)}
                try:
                    rid = attrs.get(ID)
                    if rid is not None and not isinstance(rid, str):
                        raise _Bad(f"{ID} is not a string")
                    start = sp.start_time_unix_nano / 1e9
                    if start <= 0:
                        raise _Bad("the span has no start time")
                    end = sp.end_time_unix_nano / 1e9 if sp.end_time_unix_nano else None
                    u = UserRequest(
                        arrival_s=start, prompt_tokens=_tokens(attrs, PROMPT_TOKENS),
                        ttft_s=_seconds(attrs, TTFT), queue_s=_seconds(attrs, QUEUE),
                        prefill_s=_seconds(attrs, PREFILL), e2e_s=_seconds(attrs, E2E),
                        cached_tokens=_tokens(attrs, CACHED_TOKENS),
                        request_id=(rid or "")[:MAX_ID_CHARS],
                        end_s=end if end is not None and end >= start else None,
                        received_s=received_s, max_tokens=_tokens(attrs, MAX_TOKENS))
                    why = request_problem(u)
                    if why is not None:
                        raise _Bad(why)
                except _Bad as e:
                    out.rejected += 1
                    out.reason = out.reason or f"{sp.name[:40]!r} span: {e}"
                    continue
                out.found.append(Found(u, res, sp.trace_id + sp.span_id if sp.span_id else b""))
    return out
