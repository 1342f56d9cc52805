"""The exporter's HTTP side under hostile clients (half-sent
requests, connection floods, many scrapers at once) and its limits, on loopback."""

from __future__ import annotations

import re
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from prefilltui.exporter import http as H
from prefilltui.exporter.snapshot import TargetSnapshot


class CountingProber:
    """A prober stand-in whose snapshot counts how often a page reads it."""

    def __init__(self, label: str = "t") -> None:
        self.cfg = SimpleNamespace(label=label, shown_url=f"http://{label}", url=f"http://{label}")
        self.reads = 0
        self._lock = threading.Lock()

    @property
    def snapshot(self) -> TargetSnapshot:
        with self._lock:
            self.reads += 1
        time.sleep(0.05)  # a rendering that takes a while, as 500 targets' does
        return TargetSnapshot(target=self.cfg.label, model="m", server_kind="vllm",
                              api="completions", interval_s=15.0, ready=True)


@pytest.fixture
def served():
    servers = []

    def start(sources, **kw):
        s = H.MetricsServer("127.0.0.1", 0, sources, **kw).start()
        servers.append(s)
        return s
    yield start
    for s in servers:
        s.stop()


def _get(port: int, path: str = "/metrics", timeout: float = 5.0) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.status, r.read().decode()


def _half_sent(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
        socks.append(s)
    return socks


def _closed_by_server(s: socket.socket, wait: float) -> bool:
    s.settimeout(wait)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_half_sent_requests_are_cut_off_at_their_deadline(served, monkeypatch):
    """6: slowloris.  A request head must be whole within REQUEST_DEADLINE_S of the
    accept, whatever trickles in; no thread is held meanwhile."""
    monkeypatch.setattr(H, "REQUEST_DEADLINE_S", 0.5)
    server = served([CountingProber()])
    threads = threading.active_count()
    socks = _half_sent(server.port, 30)
    try:
        time.sleep(0.2)
        assert threading.active_count() <= threads + 1  # no thread per connection
        for s in socks[:5]:
            s.send(b"X")  # a trickle does not extend the deadline
        assert all(_closed_by_server(s, 3.0) for s in socks)
        assert server.timed_out >= 30 and server.open_connections == 0
    finally:
        for s in socks:
            s.close()


def test_a_connection_flood_never_keeps_a_scrape_out(served):
    """5/6: at most ``max_connections`` are held; a new one closes the oldest unfinished
    one, so a whole request always gets in, fast."""
    server = served([CountingProber()], max_connections=8)
    socks = _half_sent(server.port, 60)
    try:
        t0 = time.monotonic()
        status, text = _get(server.port)
        assert status == 200 and 'prefilltui_target_ready{model="m",target="t"} 1.0' in text
        assert time.monotonic() - t0 < 2.0
        assert server.open_connections <= 8 and server.evicted >= 50
    finally:
        for s in socks:
            s.close()


def test_concurrent_scrapes_share_one_rendering(served):
    """5: a bounded worker pool, and N scrapers at once cost one rendering, not N."""
    p = CountingProber()
    server = served([p])
    with ThreadPoolExecutor(40) as ex:
        codes = list(ex.map(lambda _: _get(server.port)[0], range(40)))
    assert codes == [200] * 40
    assert p.reads <= 4, f"{p.reads} renderings for 40 scrapes"
    assert sum(t.name.startswith("prefilltui-render") for t in threading.enumerate()) \
        <= H.WORKERS


def test_the_listen_backlog_is_real(served):
    """5: the kernel's accept queue for the socket (``ss`` shows it as Send-Q)."""
    server = served([CountingProber()])
    try:
        out = subprocess.run(["ss", "-ltnH", f"sport = :{server.port}"], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("ss not available")
    backlog = int(out.split()[2])
    assert backlog >= min(H.LISTEN_BACKLOG, int(open("/proc/sys/net/core/somaxconn").read()))


def test_bad_requests_get_an_answer_never_a_crash(served):
    server = served([CountingProber()])
    for raw, code in ((b"GARBAGE\r\n\r\n", b"400"),
                      (b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 40000
                       + b"\r\n\r\n", b"431"),
                      (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
                       b"413"),
                      (b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n", b"405")):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
            s.sendall(raw)
            assert s.recv(100).split(b" ")[1] == code, raw[:30]
    assert _get(server.port)[0] == 200  # still serving


def test_ready_says_which_targets_have_not_started(served):
    """7: served from the start; /-/ready is 503 while targets wait to start."""
    class Queued(CountingProber):
        @property
        def snapshot(self):
            return TargetSnapshot(target="q", model="", server_kind="", api="completions",
                                  interval_s=15.0, state="queued")
    server = served([CountingProber(), Queued("q")])
    with pytest.raises(urllib.error.HTTPError) as ei:
        _get(server.port, "/-/ready")
    assert ei.value.code == 503 and b"1 of 2 targets not started" in ei.value.read()
    text = _get(server.port)[1]
    assert re.search(r'prefilltui_target_ready\{model="",target="q"\} 0\.0', text)


def test_the_shipped_unit_fits_the_maximum_number_of_targets():
    """7: LimitNOFILE and MemoryMax of deploy/prefilltui-exporter.service fit MAX_TARGETS
    (files at their worst case, memory at the measured steady state plus one hostile
    target in twenty sending oversized answers), and SIGHUP is its reload."""
    from pathlib import Path

    from prefilltui.exporter import fleet as F

    unit = (Path(__file__).resolve().parents[2] / "deploy" / "prefilltui-exporter.service"
            ).read_text()
    nofile = int(re.search(r"^LimitNOFILE=(\d+)$", unit, re.M).group(1))
    m = re.search(r"^MemoryMax=(\d+)([MG])$", unit, re.M)
    mem_mib = int(m.group(1)) * (1024 if m.group(2) == "G" else 1)
    n = F.MAX_TARGETS
    assert nofile >= F.FDS_BASE + H.MAX_CONNECTIONS + F.FDS_PER_TARGET * n
    assert mem_mib >= (F.RSS_BASE_MIB + F.RSS_PER_TARGET_MIB * n
                       + F.RSS_HOSTILE_TARGET_MIB * n / 20)
    assert re.search(r"^ExecReload=/bin/kill -HUP \$MAINPID$", unit, re.M)
