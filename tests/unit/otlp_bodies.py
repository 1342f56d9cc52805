"""OTLP trace export bodies for the tests: vLLM-shaped ``llm_request`` spans."""

from __future__ import annotations

import itertools
import time

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


_IDS = itertools.count(1)


def _kv(k: str, v) -> KeyValue:
    if isinstance(v, bool):
        return KeyValue(key=k, value=AnyValue(bool_value=v))
    if isinstance(v, int):
        return KeyValue(key=k, value=AnyValue(int_value=v))
    if isinstance(v, float):
        return KeyValue(key=k, value=AnyValue(double_value=v))
    return KeyValue(key=k, value=AnyValue(string_value=str(v)))


def span(req: ExportTraceServiceRequest, *, rid: str, prompt: int | None = 100,
         ttft: float | str | None = 0.05, queue: float | None = 0.001,
         prefill: float | None = 0.04, e2e: float | None = 0.06, start_s: float | None = None,
         name: str = "llm_request", service: str = "vllm", **more) -> None:
    """Add one span (a resource of its own named ``service``; started ``start_s``,
    default a second ago) to ``req``."""
    start_s = time.time() - 1.0 if start_s is None else start_s
    rs = req.resource_spans.add()
    rs.resource.attributes.append(_kv("service.name", service))
    sp = rs.scope_spans.add().spans.add()
    sp.name = name
    n = next(_IDS)  # each span its own identity (the receiver drops a span sent again)
    sp.trace_id = n.to_bytes(16, "big")
    sp.span_id = n.to_bytes(8, "big")
    sp.start_time_unix_nano = int(start_s * 1e9)
    sp.end_time_unix_nano = int((start_s + (e2e or 0.0)) * 1e9)
    attrs = {"gen_ai.request.id": rid, "gen_ai.usage.prompt_tokens": prompt,
             "gen_ai.latency.time_to_first_token": ttft, "gen_ai.latency.time_in_queue": queue,
             "gen_ai.latency.time_in_model_prefill": prefill, "gen_ai.latency.e2e": e2e,
             "gen_ai.request.max_tokens": 1, **more}
    sp.attributes.extend(_kv(k, v) for k, v in attrs.items() if v is not None)


def export(*spans: dict) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    for kw in spans:
        span(req, **kw)
    return req
