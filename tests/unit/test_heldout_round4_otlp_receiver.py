"""Held-out, the OTLP/HTTP receiver under hostile clients: 64 connections that
send half a request head (or nothing) and hold it locked the engine out (every new
connection, the engine's export included, was closed at once until they timed out, and
a client reconnecting holds it forever).  The oldest connection that has not sent a
whole request now makes room, as in the exporter's own server."""

from __future__ import annotations

import socket
import time

import httpx

from prefilltui.measure.otlp import OtlpReceiver, TraceRouter, UsersTrace
from prefilltui.measure.otlp.receiver import MAX_CONNECTIONS
from tests.unit.otlp_bodies import export

PB = {"Content-Type": "application/x-protobuf"}


def test_a_flood_of_half_sent_connections_never_locks_the_engine_out():
    router = TraceRouter()
    trace = router.add(UsersTrace("t"))
    rx = OtlpReceiver("127.0.0.1", 0, router).start()
    flood: list[socket.socket] = []
    try:
        for i in range(MAX_CONNECTIONS + 16):
            s = socket.create_connection((rx.host, rx.port), timeout=5)
            if i % 2:
                s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")  # never finished
            flood.append(s)
        time.sleep(0.3)
        for n in range(3):  # the engine's exports, each on a new connection
            resp = httpx.post(rx.endpoint, headers=PB, timeout=5,
                              content=export({"rid": f"cmpl-u{n}-0"}).SerializeToString())
            assert resp.status_code == 200
        assert [u.request_id for u in trace.recent(-1)] == ["cmpl-u0-0", "cmpl-u1-0",
                                                            "cmpl-u2-0"]
        assert len(rx._conns) <= MAX_CONNECTIONS and rx.evicted > 0
    finally:
        for s in flood:
            s.close()
        rx.stop()


def test_a_chunked_body_that_never_ends_is_cut_and_the_receiver_keeps_serving(monkeypatch):
    from prefilltui.measure.otlp import receiver

    monkeypatch.setattr(receiver, "REQUEST_DEADLINE_S", 0.5)
    router = TraceRouter()
    trace = router.add(UsersTrace("t"))
    rx = OtlpReceiver("127.0.0.1", 0, router).start()
    try:
        with socket.create_connection((rx.host, rx.port), timeout=5) as s:
            s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/x-protobuf\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
            s.settimeout(3)
            assert s.recv(100) == b""  # closed at the deadline, never answered as a body
        resp = httpx.post(rx.endpoint, headers=PB, timeout=5,
                          content=export({"rid": "cmpl-ok-0"}).SerializeToString())
        assert resp.status_code == 200 and len(trace.recent(-1)) == 1
    finally:
        rx.stop()


def test_an_export_sent_again_never_doubles_the_users_nor_costs_a_probe_its_span():
    """An OTLP exporter sends a batch again when its answer was lost or late (its own
    timeout, a loaded receiver): the same spans, the same trace and span ids.  They were
    counted again: 3 users became 6; a probe's span came back as another prefilltui's."""
    from prefilltui.model.types import ProbeResult

    router = TraceRouter()
    trace = router.add(UsersTrace("t"))
    probe = ProbeResult(seq=1, requested_tokens=100, ok=True, ttft_s=0.2)
    probe.notes.request_id = "prefilltui-ab12-1"
    trace.register_probe(probe)
    rx = OtlpReceiver("127.0.0.1", 0, router).start()
    try:
        body = export({"rid": "cmpl-u1-0"}, {"rid": "cmpl-u2-0"}, {"rid": "cmpl-u3-0"},
                      {"rid": "cmpl-prefilltui-ab12-1-0", "ttft": 0.15}).SerializeToString()
        for _ in range(3):
            assert httpx.post(rx.endpoint, headers=PB, content=body, timeout=5).status_code == 200
        assert len(trace.recent(-1)) == 3 and trace.window().requests == 3
        st = trace.stats()
        assert st.users == 3 and st.probes_matched == 1 and st.foreign_probes == 0
        assert probe.server_ttft_s == 0.15 and router.duplicates == 8
        # the same request id in a new span (a user reusing an X-Request-Id) still counts
        again = export({"rid": "cmpl-u1-0"}).SerializeToString()
        httpx.post(rx.endpoint, headers=PB, content=again, timeout=5)
        assert len(trace.recent(-1)) == 4
    finally:
        rx.stop()
