"""The OpenTelemetry GenAI conventions' current attribute names beside vLLM's older
ones, through the real OTLP/HTTP receiver in both encodings.

The handed span: a user's request with ``gen_ai.usage.input_tokens: 250`` (the current
name, open-telemetry/semantic-conventions#1200) and ``gen_ai.latency.time_to_first_token``.
It used to be counted with no prompt length (the users' prompt p50 null): now it is
counted with prompt 250, and the users' prompt p50 is 250."""

from __future__ import annotations

import time

import httpx
import pytest
from google.protobuf import json_format

from prefilltui.measure.otlp import OtlpReceiver, TraceRouter, UsersTrace
from prefilltui.measure.otlp.spans import read_batch
from tests.unit.otlp_bodies import export

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}


@pytest.fixture
def rx():
    router = TraceRouter()
    trace = router.add(UsersTrace("t"))
    r = OtlpReceiver("127.0.0.1", 0, router).start()
    r.trace = trace
    yield r
    r.stop()


def _handed(rid: str) -> dict:
    """The span as handed: current usage name, vLLM's TTFT name, nothing else of note."""
    return {"rid": rid, "prompt": None, "queue": None, "prefill": None, "e2e": 0.4,
            "ttft": 0.18, "name": "chat gpt-x", **{"gen_ai.usage.input_tokens": 250}}


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_the_handed_span_counts_the_user_with_its_prompt(rx, encoding):
    msg = export(_handed("chatcmpl-u1"))
    if encoding == "protobuf":
        resp = httpx.post(rx.endpoint, content=msg.SerializeToString(), headers=PB, timeout=10)
    else:
        resp = httpx.post(rx.endpoint, content=json_format.MessageToJson(msg).encode(),
                          headers=JS, timeout=10)
    assert resp.status_code == 200
    (u,) = rx.trace.recent()
    assert (u.prompt_tokens, u.ttft_s, u.request_id) == (250, 0.18, "chatcmpl-u1")
    w = rx.trace.window(time.time())
    assert w.source == "traces" and w.requests == 1
    assert w.prompt_tokens_p50 == 250 and w.ttft_p50_s == pytest.approx(0.18)


def _read(**attrs):
    (f,) = read_batch(export({"rid": None, "prompt": None, **attrs}), received_s=time.time()).found
    return f.request


def test_each_renamed_attribute_is_read_under_both_names_the_current_first():
    old = _read(**{"gen_ai.request.id": "cmpl-a-0", "gen_ai.usage.prompt_tokens": 300,
                   "gen_ai.usage.completion_tokens": 7, "gen_ai.usage.cached_tokens": 128})
    assert (old.request_id, old.prompt_tokens, old.output_tokens, old.cached_tokens) == \
        ("cmpl-a-0", 300, 7, 128)
    new = _read(**{"gen_ai.response.id": "cmpl-b", "gen_ai.usage.input_tokens": 310,
                   "gen_ai.usage.output_tokens": 9,
                   "gen_ai.usage.cache_read.input_tokens": 256})
    assert (new.request_id, new.prompt_tokens, new.output_tokens, new.cached_tokens) == \
        ("cmpl-b", 310, 9, 256)
    both = _read(**{"gen_ai.request.id": "old-id", "gen_ai.response.id": "new-id",
                    "gen_ai.usage.prompt_tokens": 1, "gen_ai.usage.input_tokens": 2,
                    "gen_ai.usage.completion_tokens": 3, "gen_ai.usage.output_tokens": 4,
                    "gen_ai.usage.cached_tokens": 0, "gen_ai.usage.cache_read.input_tokens": 1})
    assert (both.request_id, both.prompt_tokens, both.output_tokens, both.cached_tokens) == \
        ("new-id", 2, 4, 1)


def test_a_probes_span_is_matched_by_the_current_id_name_too():
    from prefilltui.measure.otlp.users import PROBE_ID

    u = _read(**{"gen_ai.response.id": "cmpl-prefilltui-0a1b-3", "gen_ai.usage.input_tokens": 64})
    assert PROBE_ID.search(u.request_id)


def test_a_bad_value_under_a_current_name_rejects_the_span_naming_it():
    batch = read_batch(export({"rid": "x", "prompt": None,
                               **{"gen_ai.usage.input_tokens": -5}}), received_s=time.time())
    assert batch.rejected == 1 and not batch.found
    assert "gen_ai.usage.input_tokens" in batch.reason


def test_a_client_spans_time_to_first_chunk_is_not_a_user():
    """The conventions' gen_ai.response.time_to_first_chunk is the client's measure:
    a span carrying only it (a gateway's client span; its engine sends its own span of
    the same request) is not a request span, so no request is counted twice."""
    batch = read_batch(export({"rid": "chatcmpl-9", "prompt": None, "ttft": None,
                               "name": "chat gpt-x",
                               **{"gen_ai.usage.input_tokens": 250,
                                  "gen_ai.response.time_to_first_chunk": 0.3}}),
                       received_s=time.time())
    assert batch.found == [] and batch.other == 1
