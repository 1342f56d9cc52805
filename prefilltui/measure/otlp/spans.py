"""The request spans in one OTLP trace export, as ``UserRequest`` records.

A request span is one named ``llm_request`` (vLLM's, ``vllm/tracing.py``; started at
the request's arrival) or any span carrying ``gen_ai.latency.time_to_first_token``
(the same attribute names from another engine or a gateway).  Only these attributes
are read, by name; nothing else of a span (no prompt or output text, which vLLM does
not send anyway) is ever looked at.  Where the OpenTelemetry GenAI semantic
conventions renamed an attribute, both names are read, the current one first when a
span carries both (``NAMES``):

=================================================  ==================================
``gen_ai.response.id`` / ``gen_ai.request.id``     ``UserRequest.request_id``
``gen_ai.usage.input_tokens`` / ``.prompt_tokens`` ``prompt_tokens``
``gen_ai.usage.output_tokens`` / ``.completion_tokens``  ``output_tokens``
``gen_ai.usage.cache_read.input_tokens`` / ``gen_ai.usage.cached_tokens``
                                                   ``cached_tokens`` (when sent)
``gen_ai.latency.time_to_first_token``             ``ttft_s``
``gen_ai.latency.time_in_queue``                   ``queue_s``
``gen_ai.latency.time_in_model_prefill``           ``prefill_s``
``gen_ai.latency.e2e``                             ``e2e_s``
``gen_ai.request.max_tokens``                      ``max_tokens``
=================================================  ==================================

The ``gen_ai.latency.*`` names are vLLM's own (the conventions have none of them on
spans); the conventions' ``gen_ai.response.time_to_first_chunk`` is a *client's*
measure (from the client issuing the request), so it is not read as the server's
TTFT, and a span carrying only it (a gateway's or an SDK's client span, whose engine
sends its own span of the same request) is not a request span: one user's request is
never counted twice.

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
#: Attribute names as vLLM sends them (vllm/tracing.py ``SpanAttributes``, which copies
#: the GenAI conventions of 2024 and adds its own ``gen_ai.request.id`` and latencies).
ID = "gen_ai.request.id"
PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
OUTPUT_TOKENS_OLD = "gen_ai.usage.completion_tokens"
#: the cached prompt tokens under an engine's own name (in no convention), read when sent
CACHED_TOKENS = "gen_ai.usage.cached_tokens"
TTFT = "gen_ai.latency.time_to_first_token"
QUEUE = "gen_ai.latency.time_in_queue"
PREFILL = "gen_ai.latency.time_in_model_prefill"
E2E = "gen_ai.latency.e2e"
MAX_TOKENS = "gen_ai.request.max_tokens"
#: The current OpenTelemetry GenAI semantic conventions' names (the registry now lives
#: in open-telemetry/semantic-conventions-genai, ``model/gen-ai/registry.yaml``):
#: ``gen_ai.usage.prompt_tokens`` / ``completion_tokens`` were renamed
#: ``input_tokens`` / ``output_tokens`` (open-telemetry/semantic-conventions#1200,
#: release 1.27), the cached prompt tokens are ``gen_ai.usage.cache_read.input_tokens``
#: (included in ``input_tokens``), and the completion's id is ``gen_ai.response.id``
#: (vLLM's id for it is ``gen_ai.request.id``).  Gateways and newer senders use these.
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
RESPONSE_ID = "gen_ai.response.id"
#: Each field's names, the current convention's first: the first one a span carries
#: is read (a span carrying both has them agree, or the current one is right).
NAMES: dict[str, tuple[str, ...]] = {
    "request_id": (RESPONSE_ID, ID),
    "prompt_tokens": (INPUT_TOKENS, PROMPT_TOKENS),
    "output_tokens": (OUTPUT_TOKENS, OUTPUT_TOKENS_OLD),
    "cached_tokens": (CACHE_READ_TOKENS, CACHED_TOKENS),
    "ttft_s": (TTFT,), "queue_s": (QUEUE,), "prefill_s": (PREFILL,), "e2e_s": (E2E,),
    "max_tokens": (MAX_TOKENS,),
}
_READ = frozenset(n for names in NAMES.values() for n in names)
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


def _first(attrs: dict, field: str) -> tuple[str, object]:
    """(name, value) of the first of ``field``'s names (``NAMES``) the span carries,
    else (its current name, None)."""
    names = NAMES[field]
    for name in names:
        if attrs.get(name) is not None:
            return name, attrs[name]
    return names[0], None


def _seconds(attrs: dict, field: str) -> float | None:
    key, v = _first(attrs, field)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise _Bad(f"{key} is {str(v)[:40]!r}, not a time in seconds")
    return float(v)


def _tokens(attrs: dict, field: str) -> int | None:
    key, v = _first(attrs, field)
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
                attrs = {a.key: _read(a.value) for a in sp.attributes if a.key in _READ}
                try:
                    id_name, rid = _first(attrs, "request_id")
                    if rid is not None and not isinstance(rid, str):
                        raise _Bad(f"{id_name} is not a string")
                    start = sp.start_time_unix_nano / 1e9
                    if start <= 0:
                        raise _Bad("the span has no start time")
                    end = sp.end_time_unix_nano / 1e9 if sp.end_time_unix_nano else None
                    u = UserRequest(
                        arrival_s=start, prompt_tokens=_tokens(attrs, "prompt_tokens"),
                        ttft_s=_seconds(attrs, "ttft_s"), queue_s=_seconds(attrs, "queue_s"),
                        prefill_s=_seconds(attrs, "prefill_s"), e2e_s=_seconds(attrs, "e2e_s"),
                        cached_tokens=_tokens(attrs, "cached_tokens"),
                        request_id=(rid or "")[:MAX_ID_CHARS],
                        end_s=end if end is not None and end >= start else None,
                        received_s=received_s, max_tokens=_tokens(attrs, "max_tokens"),
                        output_tokens=_tokens(attrs, "output_tokens"))
                    why = request_problem(u)
                    if why is not None:
                        raise _Bad(why)
                except _Bad as e:
                    out.rejected += 1
                    out.reason = out.reason or f"{sp.name[:40]!r} span: {e}"
                    continue
                out.found.append(Found(u, res, sp.trace_id + sp.span_id if sp.span_id else b""))
    return out
