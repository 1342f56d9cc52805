"""The HTTP/1.1 server core where the exporter's and the receiver's tests do not reach:
which connection makes room, keep-alive, and a stop that answers the request in flight.
Each test holds one idle kept-alive connection and one being answered (``/slow``)."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from prefilltui.measure.httpserver import HttpServer


class Gated(HttpServer):
    def __init__(self) -> None:
        super().__init__("127.0.0.1", 0, name="test-http", max_connections=2, backlog=16,
                         request_deadline_s=10)
        self.gate, self.started = threading.Event(), threading.Event()

    async def handle(self, req):
        if req.path == "/slow":  # answered once the test opens the gate
            self.started.set()
            await asyncio.get_running_loop().run_in_executor(None, self.gate.wait, 10)
        return 200, [], b"ok"


def _ask(srv, path: str, s: socket.socket | None = None) -> socket.socket:
    s = s or socket.create_connection((srv.host, srv.port), timeout=5)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return s


def _answer(s: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"ok") and (chunk := s.recv(4096)):
        data += chunk
    return data


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
def held():
    srv = Gated().start()
    idle = _ask(srv, "/")
    assert _answer(idle).startswith(b"HTTP/1.1 200")  # kept alive, now idle
    busy = _ask(srv, "/slow")
    assert srv.started.wait(5)
    yield srv, idle, busy
    srv.gate.set()
    srv.stop()
    idle.close()
    busy.close()


def test_the_idle_connection_makes_room_never_the_one_being_answered(held):
    srv, idle, busy = held
    with _ask(srv, "/") as new:
        assert _answer(new).startswith(b"HTTP/1.1 200")
    assert _closed(idle) and srv.evicted == 1
    srv.gate.set()
    assert _answer(busy).startswith(b"HTTP/1.1 200")
    assert _answer(_ask(srv, "/", busy)).startswith(b"HTTP/1.1 200")  # kept alive
    assert srv.counts == {200: 4}


def test_stop_closes_the_idle_and_answers_the_request_in_flight(held):
    srv, idle, busy = held
    stopping = threading.Thread(target=srv.stop)
    stopping.start()
    assert _closed(idle)
    srv.gate.set()
    got = _answer(busy)
    assert got.startswith(b"HTTP/1.1 200") and b"connection: close" in got.lower()
    assert _closed(busy) and srv.evicted == 0
    stopping.join(10)
    with pytest.raises(OSError):
        socket.create_connection((srv.host, srv.port), timeout=2)
