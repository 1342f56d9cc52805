"""The OTLP/HTTP receiver on a real socket: bodies in both encodings, gzip, and every
bad body (malformed, huge, gzip bomb, wrong content type) answered as OTLP says while
the receiver keeps serving and loses nothing of the good bodies around them."""

from __future__ import annotations

import gzip
import json
import socket
import time

import httpx
import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from prefilltui.measure.otlp import OtlpReceiver, TraceRouter, UsersTrace, parse_listen
from prefilltui.measure.otlp import codec
from tests.unit.otlp_bodies import export

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}
T0 = time.time() - 5.0


@pytest.fixture
def rx():
    router = TraceRouter()
    trace = router.add(UsersTrace("t"))
    r = OtlpReceiver("127.0.0.1", 0, router, max_body_bytes=256 * 1024).start()
    r.trace = trace
    yield r
    r.stop()


def _post(rx, body: bytes, headers: dict) -> httpx.Response:
    return httpx.post(rx.endpoint, content=body, headers=headers, timeout=10)


def _ok(rx) -> None:
    """A good body still lands: one more user request."""
    before = len(rx.trace.recent(-1))
    resp = _post(rx, export({"rid": f"cmpl-u{before}-0"}).SerializeToString(), PB)
    assert resp.status_code == 200
    assert len(rx.trace.recent(-1)) == before + 1


def test_protobuf_body_gives_users_with_their_numbers(rx):
    body = export({"rid": "cmpl-a-0", "prompt": 812, "ttft": 0.25, "queue": 0.1,
                   "prefill": 0.12, "e2e": 0.3, "start_s": T0}).SerializeToString()
    resp = _post(rx, body, PB)
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/x-protobuf"
    msg = ExportTraceServiceResponse.FromString(resp.content)
    assert not msg.HasField("partial_success")
    (u,) = rx.trace.recent(-1)
    assert (u.prompt_tokens, u.ttft_s, u.queue_s, u.prefill_s, u.e2e_s) == (812, 0.25, 0.1,
                                                                             0.12, 0.3)
    assert u.arrival_s == pytest.approx(T0) and u.request_id == "cmpl-a-0"
    assert u.target == "t" and u.end_s == pytest.approx(T0 + 0.3) and u.max_tokens == 1


def test_json_body_answered_in_json(rx):
    body = json_format.MessageToJson(export({"rid": "cmpl-j-0", "prompt": 33}))
    resp = _post(rx, body.encode(), JS)
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    assert json.loads(resp.content) == {}
    assert [u.prompt_tokens for u in rx.trace.recent(-1)] == [33]


def test_gzip_body(rx):
    body = gzip.compress(export({"rid": "cmpl-g-0"}).SerializeToString())
    resp = _post(rx, body, {**PB, "Content-Encoding": "gzip"})
    assert resp.status_code == 200 and len(rx.trace.recent(-1)) == 1


def test_rejected_spans_are_a_partial_success(rx):
    body = export({"rid": "cmpl-1-0", "ttft": -1.0}, {"rid": "cmpl-2-0"},
                  {"rid": "x", "name": "other_span", "ttft": None}).SerializeToString()
    resp = _post(rx, body, PB)
    assert resp.status_code == 200
    ps = ExportTraceServiceResponse.FromString(resp.content).partial_success
    assert ps.rejected_spans == 1 and "time_to_first_token" in ps.error_message
    assert [u.request_id for u in rx.trace.recent(-1)] == ["cmpl-2-0"]
    assert rx.router.other == 1 and rx.router.rejected == 1


@pytest.mark.parametrize("body,headers,status", [
    (b"\xff\xff\xff\xff garbage", PB, 400),
    (b"{not json", JS, 400),
    (b'{"resourceSpans": 7}', JS, 400),
    (b"\x1f\x8b\x08\x00corrupt", {**PB, "Content-Encoding": "gzip"}, 400),
    (b"spans", {"Content-Type": "text/plain"}, 415),
    (b"", {"Content-Type": "application/grpc"}, 415),
    (b"x", {**PB, "Content-Encoding": "zstd"}, 415),
])
def test_bad_bodies_get_the_otlp_error_and_nothing_is_lost(rx, body, headers, status):
    resp = _post(rx, body, headers)
    assert resp.status_code == status
    if "json" in headers["Content-Type"]:
        st = json_format.Parse(resp.content, status_pb2.Status())
    else:
        st = status_pb2.Status.FromString(resp.content)
    assert st.message and st.code != 0
    assert rx.trace.recent(-1) == ()
    _ok(rx)


def test_huge_body_is_413_unread(rx):
    resp = _post(rx, b"\0" * (rx.max_body_bytes + 1), PB)
    assert resp.status_code == 413
    assert "over" in status_pb2.Status.FromString(resp.content).message
    _ok(rx)


def test_gzip_bomb_stops_at_the_cap(rx):
    bomb = gzip.compress(b"\0" * (64 * 2**20))  # 64 MiB of zeros in ~64 KiB
    assert len(bomb) < rx.max_body_bytes
    resp = _post(rx, bomb, {**PB, "Content-Encoding": "gzip"})
    assert resp.status_code == 413
    assert "inflates past" in status_pb2.Status.FromString(resp.content).message
    _ok(rx)


def test_other_paths_and_methods(rx):
    assert httpx.get(rx.endpoint, timeout=5).status_code == 405
    assert httpx.post(rx.endpoint.replace("/v1/traces", "/v1/logs"), content=b"",
                      headers=PB, timeout=5).status_code == 404
    _ok(rx)


def test_a_broken_http_request_does_not_stop_it(rx):
    with socket.create_connection((rx.host, rx.port), timeout=5) as s:
        s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 4")
    _ok(rx)


def test_inflate_caps_decoded_bytes_not_wire_bytes():
    with pytest.raises(codec.OtlpError) as e:
        codec.inflate(gzip.compress(b"a" * 10_000), "gzip", max_bytes=1000)
    assert e.value.status == 413


@pytest.mark.parametrize("text,want", [("127.0.0.1:4318", ("127.0.0.1", 4318)),
                                       (":4318", ("127.0.0.1", 4318)),
                                       ("[::1]:0", ("::1", 0))])
def test_parse_listen(text, want):
    assert parse_listen(text) == want


@pytest.mark.parametrize("text", ["4318", "host:", "h:99999", "h:x"])
def test_parse_listen_refuses(text):
    with pytest.raises(ValueError):
        parse_listen(text)
