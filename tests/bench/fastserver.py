"""A minimal OpenAI-compatible server for the benchmarks, run in its own process.

    python -m tests.bench.fastserver [--port P] [--a S] [--b S_PER_TOKEN]
                                     [--faults SEED] [--log FILE] [--restart-every S]

Prints ``PORT <n>`` on stdout once listening.  Routes:
  GET  /v1/models            one model, "fast-model" (also under a path prefix,
                             /t/7/v1/models: many targets on one server)
  POST /v1/completions       (and /v1/chat/completions) a one-token SSE stream: a token
                             chunk, a final chunk with ``usage`` and llama.cpp-style
                             ``timings`` (prompt_n, prompt_ms = the server's own time from
                             request parsed to first byte written), then ``[DONE]``,
                             written with one ``write`` after sleeping ``a + b*tokens``
                             seconds (tokens = words + 1, a BOS).  ``--a 0 --b 0`` (the
                             default) answers instantly.
  GET  /_last_request        the raw bytes (head + body) of the last POST, so a raw-socket
                             client can replay exactly what prefilltui sent.
Anything else answers 404.  HTTP/1.1 keep-alive, TCP_NODELAY, chunked responses.

Fault mode (``--faults SEED``): each POST draws one outcome from a seeded RNG (see
``FAULTS``): ok, drop before any byte, drop mid-event, stall (headers then nothing
for ``--stall-s``), malformed JSON event, error event in a 200 stream, a burst of
three 503 replies with ``Retry-After``, or a stream without a token.  With
``--restart-every S`` the first POST after S seconds of uptime makes the process
exit at once without answering (a crash; the benchmark restarts it on the same port).
Every POST appends ``<outcome> <X-Request-Id>\\n`` to ``--log`` *before* it is
answered, so the benchmark can match every request the server saw with the run file.

``FastServerProcess`` starts/stops/restarts it from a benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

#: Outcome weights in fault mode (per POST).  ~76 % ok; every fault kind shows up
#: several times a minute at ~10 probes/s.
FAULTS = (
    ("ok", 76),
    ("drop_before", 3),  # close without any response byte
    ("drop_mid", 3),  # headers + half an event, then close
    ("stall", 1),  # headers, then silence past the client's timeout
    ("malformed", 4),  # `data: {broken json` then [DONE]
    ("error_event", 3),  # 200 stream carrying an error object
    ("burst503", 2),  # this and the next two POSTs answer 503 + Retry-After
    ("no_token", 3),  # role-only/empty chunk then [DONE]
)
#: What each outcome must look like in the run file (ProbeResult.error_kind).
EXPECTED_KIND = {
    "ok": None, "drop_before": ("protocol", "connect"), "drop_mid": ("protocol", "connect"),
    "stall": ("timeout",), "malformed": ("protocol",), "error_event": ("stream_error",),
    "503": ("rate_limited",), "no_token": ("no_token",), "restart": ("protocol", "connect"),
}


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def _event(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


HEAD_SSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n")


def _json_reply(obj, status: int = 200, extra: str = "") -> bytes:
    body = json.dumps(obj).encode()
    reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}.get(status, "Status")
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n").encode() + body


MODELS = _json_reply({"object": "list", "data": [{"id": "fast-model", "object": "model"}]})
NOT_FOUND = _json_reply({"error": {"message": "not found"}}, 404)


def _count_tokens(body: bytes) -> int:
    try:
        obj = json.loads(body)
    except ValueError:
        return 1
    text = obj.get("prompt")
    if text is None:
        msgs = obj.get("messages") or []
        text = " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
    return len(str(text).split()) + 1


class Server:
    def __init__(self, a: float, b: float, faults: int | None, log: str | None,
                 restart_every: float | None, stall_s: float, retry_after: float) -> None:
        self.a, self.b = a, b
        self.rng = random.Random(faults) if faults is not None else None
        self.log = open(log, "a", buffering=1) if log else None
        self.restart_every = restart_every
        self.stall_s = stall_s
        self.retry_after = retry_after
        self.t_start = time.monotonic()
        self.pending_503 = 0
        self.last_request = b""
        self.weights = [w for _, w in FAULTS]
        self.names = [n for n, _ in FAULTS]

    def outcome(self) -> str:
        if self.rng is None:
            return "ok"
        if self.restart_every and time.monotonic() - self.t_start >= self.restart_every:
            return "restart"
        if self.pending_503 > 0:
            self.pending_503 -= 1
            return "503"
        kind = self.rng.choices(self.names, self.weights)[0]
        if kind == "burst503":
            self.pending_503 = 2
            return "503"
        return kind

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                t0 = time.perf_counter()
                line, _, rest = head.partition(b"\r\n")
                method, target, _ = line.split(b" ", 2)
                n = 0
                rid = "-"
                for h in rest.split(b"\r\n"):
                    if h[:15].lower() == b"content-length:":
                        n = int(h[15:].strip() or 0)
                    elif h[:13].lower() == b"x-request-id:":
                        rid = h[13:].strip().decode("ascii", "replace") or "-"
                try:
                    body = await reader.readexactly(n) if n else b""
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the client went away mid-request (a bench segment's end)
                if method == b"POST" and target.endswith(b"/completions"):
                    self.last_request = head + body
                    if not await self.completion(writer, body, t0, rid):
                        return
                elif method == b"GET" and target.endswith(b"/v1/models"):  # a gateway's prefix too
                    writer.write(MODELS)
                elif method == b"GET" and target == b"/_last_request":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                                 b"Content-Length: %d\r\nConnection: keep-alive\r\n\r\n"
                                 % len(self.last_request) + self.last_request)
                else:
                    writer.write(NOT_FOUND)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def completion(self, writer: asyncio.StreamWriter, body: bytes, t0: float,
                         rid: str = "-") -> bool:
        """Answer one POST; False when the connection must be dropped.  The log line is
        ``<outcome> <X-Request-Id or ->``."""
        kind = self.outcome()
        if self.log is not None:
            self.log.write(f"{kind} {rid}\n")
        if kind == "restart":
            os._exit(0)  # a crash: no reply, every connection reset
        tokens = _count_tokens(body)
        if kind == "503":
            writer.write(_json_reply({"error": {"message": "server busy", "code": 503}}, 503,
                                     f"Retry-After: {self.retry_after:g}\r\n"))
            return True
        if kind == "drop_before":
            return False
        delay = self.a + self.b * tokens
        if delay > 0:
            await asyncio.sleep(delay)
        if kind == "stall":
            writer.write(HEAD_SSE)
            await writer.drain()
            await asyncio.sleep(self.stall_s)
            return False
        if kind == "drop_mid":
            writer.write(HEAD_SSE + _chunk(b'data: {"choices":[{"index":0,"te'))
            await writer.drain()
            return False
        ms = (time.perf_counter() - t0) * 1e3
        if kind == "malformed":
            events = [b'data: {"choices":[{"index":0,"text":"x"\n\n', b"data: [DONE]\n\n"]
        elif kind == "error_event":
            events = [_event({"error": {"message": "internal error during decoding",
                                        "type": "server_error"}}), b"data: [DONE]\n\n"]
        elif kind == "no_token":
            events = [_event({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}),
                      b"data: [DONE]\n\n"]
        else:
            events = [
                _event({"choices": [{"index": 0, "text": " the", "finish_reason": None}]}),
                _event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                        "usage": {"prompt_tokens": tokens, "completion_tokens": 1,
                                  "total_tokens": tokens + 1},
                        "timings": {"prompt_n": tokens, "prompt_ms": ms}}),
                b"data: [DONE]\n\n"]
        writer.write(HEAD_SSE + b"".join(_chunk(e) for e in events) + b"0\r\n\r\n")
        return True


async def _serve(args: argparse.Namespace) -> None:
    srv = Server(args.a, args.b, args.faults, args.log, args.restart_every, args.stall_s,
                 args.retry_after)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    server = await asyncio.start_server(srv.handle, sock=sock, backlog=128)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--a", type=float, default=0.0, help="simulated fixed prefill cost, s")
    p.add_argument("--b", type=float, default=0.0, help="simulated prefill cost per token, s")
    p.add_argument("--faults", type=int, default=None, metavar="SEED")
    p.add_argument("--log", default=None)
    p.add_argument("--restart-every", type=float, default=None, metavar="S")
    p.add_argument("--stall-s", type=float, default=3.0)
    p.add_argument("--retry-after", type=float, default=0.3)
    asyncio.run(_serve(p.parse_args(argv)))
    return 0


class FastServerProcess:
    """The server in a child process: ``with FastServerProcess(a=0.005) as s: s.base_url``.

    ``restart()`` waits for the old process to exit (or kills it) and starts a new one on
    the same port.  Raises RuntimeError when the child does not print its port in 10 s.
    """

    def __init__(self, *args: str, **opts) -> None:
        self.args = list(args)
        for k, v in opts.items():
            if v is not None:
                self.args += [f"--{k.replace('_', '-')}", str(v)]
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FastServerProcess":
        cmd = [sys.executable, "-m", "tests.bench.fastserver", "--port", str(self.port),
               *self.args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     cwd=str(Path(__file__).resolve().parents[2]))
        line = b""
        deadline = time.monotonic() + 10
        while not line.startswith(b"PORT") and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line and self.proc.poll() is not None:
                break
        if not line.startswith(b"PORT"):
            self.stop()
            raise RuntimeError("benchmark server did not start")
        self.port = int(line.split()[1])
        self.starts += 1
        return self

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is None:
            return
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p.stdout:
            p.stdout.close()

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def __enter__(self) -> "FastServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
