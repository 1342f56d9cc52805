"""Held-out, OTLP spans whose numbers no request can have: a latency of 1e300 s
or 1e308 s, a prompt of 1e30 tokens, more cached tokens than the prompt, a queue longer
than the TTFT it is part of.  Each such span is rejected with its reason (the OTLP
``partial_success``), its neighbours in the same body are kept, and the users' window,
the stats lines, the exporter's series and the verdict never see NaN, inf or a share
past 100 %."""

from __future__ import annotations

import math
import time

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from prefilltui.measure.otlp import OtlpReceiver, TraceRouter, UsersTrace
from prefilltui.measure.otlp.spans import read_batch
from prefilltui.model.fit import LinearFit
from prefilltui.model.users import UserRequest, users_window, window_to_json
from prefilltui.render.users import users_lines
from tests.unit.otlp_bodies import export

CACHED = "gen_ai.usage.cached_tokens"
FIT = LinearFit(0.02, 1e-4, (0.0, 0.04), (0.0, 2e-4), 1e4, (None, None), 0.99, 20, "ols")


def _finite_window(w) -> None:
    for k, v in window_to_json(w).items():
        if isinstance(v, float):
            assert math.isfinite(v), (k, v)
    for share in (w.queue_share, w.prefix_cache_hit_rate):
        assert share is None or 0.0 <= share <= 1.0, share
    text = " ".join(users_lines(w))
    assert "nan" not in text.lower() and "inf" not in text.lower(), text


@pytest.mark.parametrize("bad,words", [
    ({"ttft": 1e300}, "time_to_first_token"),
    ({"ttft": 1e308, "queue": 1e308}, "time_to_first_token"),
    ({"e2e": 1e9}, "e2e"),
    ({"prompt": 1e30}, "prompt_tokens"),          # a double that is an integer
    ({"prompt": 2**62}, "prompt_tokens"),         # an int64 past any context
    ({"prompt": 1, CACHED: 1e308}, "cached_tokens"),
    ({"prompt": 5, CACHED: 50}, "cached_tokens"),
    ({"queue": 5.0, "ttft": 0.1}, "time_in_queue"),
    ({"prefill": 9.0, "ttft": 0.1}, "time_in_model_prefill"),
], ids=["ttft-1e300", "ttft-queue-1e308", "e2e-31-years", "prompt-1e30", "prompt-2^62",
        "cached-1e308", "cached-over-prompt", "queue-over-ttft", "prefill-over-ttft"])
def test_a_span_no_request_can_have_is_rejected_and_its_neighbour_kept(bad, words):
    req = export({"rid": "cmpl-bad-0", **bad}, {"rid": "cmpl-bad2-0", **bad},
                 {"rid": "cmpl-good-0"})
    b = read_batch(req, received_s=time.time())
    assert b.rejected == 2 and words in b.reason, b.reason
    assert [f.request.request_id for f in b.found] == ["cmpl-good-0"]
    t = UsersTrace("t")
    for f in b.found:
        t.add(f.request)
    w = t.window(fit=FIT)
    assert w.requests == 1
    _finite_window(w)


def test_the_window_never_shows_a_non_finite_share_whatever_it_is_given():
    """The window's own guard, for requests that did not come through the reader: a
    prefill of 5e-324 s would make the unexplained share -inf."""
    now = time.time()
    rs = [UserRequest(arrival_s=now - 2, prompt_tokens=100, ttft_s=0.05, queue_s=0.2,
                      prefill_s=5e-324, e2e_s=0.06),
          UserRequest(arrival_s=now - 2, prompt_tokens=100, ttft_s=0.05, queue_s=0.001,
                      prefill_s=5e-324, e2e_s=0.06)]
    w = users_window(rs, now_s=now, window_s=60, fit=FIT)
    assert w.requests == 2 and w.unexplained_prefill_share is None
    assert w.queue_share is not None and w.queue_share <= 1.0
    _finite_window(w)


def test_over_http_an_absurd_span_is_a_partial_success_and_metrics_stay_finite():
    from prefilltui.exporter.collector import families
    from prefilltui.exporter.snapshot import TargetSnapshot

    router = TraceRouter()
    trace = router.add(UsersTrace("t"))
    rx = OtlpReceiver("127.0.0.1", 0, router).start()
    try:
        body = export({"rid": "cmpl-a-0", "ttft": 1e308, "queue": 1e308},
                      {"rid": "cmpl-b-0", "prompt": 1, CACHED: 1e308},
                      {"rid": "cmpl-c-0"}).SerializeToString()
        resp = httpx.post(rx.endpoint, content=body, timeout=10,
                          headers={"Content-Type": "application/x-protobuf"})
        assert resp.status_code == 200
        ps = ExportTraceServiceResponse.FromString(resp.content).partial_success
        assert ps.rejected_spans == 2 and ps.error_message
        assert [u.request_id for u in trace.recent(-1)] == ["cmpl-c-0"]
        w = trace.window(fit=FIT)
        _finite_window(w)
        snap = TargetSnapshot(target="t", model="m", server_kind="vllm", api="completions",
                              interval_s=15, users=w, spans=trace.stats())
        users = [s for m in families([snap]) for s in m.samples
                 if s.name.startswith("prefilltui_users")]
        assert users and all(math.isfinite(s.value) for s in users), users
    finally:
        rx.stop()



# -- a span claiming to be a probe's, with times its probe cannot have

def _probes(n: int = 5):
    from prefilltui.model.types import ProbeResult

    out = []
    for i, tokens in enumerate([100, 200, 400, 800, 1600][:n]):
        r = ProbeResult(seq=i, requested_tokens=tokens, prompt_tokens=tokens, ok=True,
                        ttft_s=0.02 + 1e-4 * tokens)
        r.notes.request_id = f"prefilltui-ab12-{i}"
        out.append(r)
    return out


@pytest.mark.parametrize("claim", [{"ttft": 1e5, "prefill": 1e5, "queue": 0.0},
                                   {"ttft": None, "prefill": 600_000.0, "queue": 0.0},
                                   {"ttft": None, "prefill": 0.01, "queue": 50.0}],
                         ids=["ttft", "prefill", "queue"])
def test_a_probes_span_longer_than_the_probe_never_reaches_its_numbers_or_the_fit(claim):
    """A sender posting spans under the probes' ids (``prefilltui-<hex>-<n>``) with
    times longer than the probes themselves: kept as the span, named in the notes, and
    the probes' server TTFT, queue, prefill and the server-side fixed cost untouched."""
    from prefilltui.model.fit import intercept

    trace = UsersTrace("t")
    probes = _probes()
    for r in probes:
        trace.register_probe(r)
    body = export(*({"rid": f"cmpl-{r.notes.request_id}-0", "prompt": r.prompt_tokens,
                     "e2e": 1.0, **claim} for r in probes))
    for f in read_batch(body, received_s=time.time()).found:
        trace.add(f.request)
    for r in probes:
        assert r.span is not None and r.notes.ignored, r
        assert r.server_ttft_s is None and r.server_prefill_s is None and r.queue_s is None
        assert r.overhead_s is None
    assert intercept.server_fixed_cost(probes) is None
    assert trace.window().requests == 0  # never users either


def test_a_probes_own_span_inside_its_ttft_is_still_applied():
    from prefilltui.model.users import apply_span, span_of

    r = _probes(1)[0]
    apply_span(r, span_of(UserRequest(arrival_s=1.0, ttft_s=0.025, queue_s=0.001,
                                      prefill_s=0.02, request_id="x")))
    assert r.server_ttft_s == 0.025 and r.queue_s == 0.001 and r.server_prefill_s == 0.02
    assert r.queue_source == "span" and not r.notes.ignored


# -- an attribute of the wrong kind: an array, a map, bytes

@pytest.mark.parametrize("key,kind", [
    ("gen_ai.latency.time_to_first_token", "array"),
    ("gen_ai.usage.prompt_tokens", "kvlist"),
    ("gen_ai.request.id", "bytes"),
])
def test_an_attribute_sent_as_an_array_map_or_bytes_rejects_its_span(key, kind):
    """They were read as if absent: a TTFT sent as an array made a user without a TTFT,
    a probe's id sent as bytes made it a user instead of the probe's span."""
    from opentelemetry.proto.common.v1.common_pb2 import (AnyValue, ArrayValue, KeyValue,
                                                          KeyValueList)

    value = {"array": AnyValue(array_value=ArrayValue(values=[AnyValue(double_value=0.1)])),
             "kvlist": AnyValue(kvlist_value=KeyValueList()),
             "bytes": AnyValue(bytes_value=b"cmpl-prefilltui-ab12-1-0")}[kind]
    req = export({"rid": "cmpl-x-0"}, {"rid": "cmpl-good-0"})
    sp = req.resource_spans[0].scope_spans[0].spans[0]
    kept = [a for a in sp.attributes if a.key != key]
    del sp.attributes[:]
    sp.attributes.extend(kept + [KeyValue(key=key, value=value)])
    b = read_batch(req, received_s=time.time())
    assert b.rejected == 1 and key in b.reason, b.reason
    assert [f.request.request_id for f in b.found] == ["cmpl-good-0"]
