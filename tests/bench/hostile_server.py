"""A hostile OpenAI-compatible server for the robustness benchmarks, in its own process.

    python -m tests.bench.hostile_server [--gzip-kb K] [--plain-mb M] [--paths P]
                                         [--trickle-metrics S] [--models-mb M] [--port N]

Prints ``PORT <n>`` on stdout once listening.  Without options it is a well-behaved,
instant llama.cpp-like server: ``/v1/models``, ``/props``, ``/metrics`` (a few
``llamacpp:`` lines), ``/tokenize`` (one token per word), and one-token SSE streams
with ``usage`` on ``/v1/completions``.  The options make it hostile:

``--gzip-kb K``         the chosen paths answer a gzip body of about K KiB that
                        inflates about 1,000x (zeros): a decompression bomb
``--plain-mb M``        the chosen paths answer M MiB of plain bytes (generated on the
                        fly, never held in memory here)
``--paths P``           where the bomb / plain body goes: ``models`` (GET /v1/models),
                        ``get`` (every discovery GET), ``all`` (those and POST /tokenize)
``--trickle-metrics S`` ``/metrics`` sends one byte every S seconds, never ending
``--models-mb M``       ``/v1/models`` is a valid JSON list of M MiB of model entries
``--no-tokenize``       no ``/tokenize`` (the client calibrates with two requests)
``--stall-completions S`` completions answer only after S seconds
Used by ``tests/bench/bench_hostile.py``; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import zlib

DISCOVERY_GETS = {b"/v1/models", b"/props", b"/version", b"/metrics", b"/info",
                  b"/api/version", b"/model_info", b"/get_model_info"}
METRICS = (b"# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 10\n"
           b"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 0\n")


def gzip_bomb(kib: int) -> bytes:
    """A gzip member of about ``kib`` KiB that inflates ~1,030x (zeros)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    out = bytearray()
    while len(out) < kib * 1024:
        out += c.compress(block)
    out += c.flush()
    return bytes(out)


def _reply(status: int, body: bytes, ctype: str = "application/json",
           extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s"
            b"Connection: keep-alive\r\n\r\n" % (status, ctype.encode(), len(body), extra)) + body


def _event(obj) -> bytes:
    data = b"data: " + json.dumps(obj).encode() + b"\n\n"
    return b"%x\r\n" % len(data) + data + b"\r\n"


class Hostile:
    def __init__(self, opts) -> None:
        self.o = opts
        self.bomb = gzip_bomb(opts.gzip_kb) if opts.gzip_kb else b""
        self.models = json.dumps({"data": [{"id": "fake-model"}]}).encode()
        if opts.models_mb:
            n = int(opts.models_mb * 2**20 / 60)
            self.models = json.dumps({"data": [{"id": f"model-{i:08d}", "object": "model",
                                                "owned_by": "x"} for i in range(n)]}).encode()

    def hostile_path(self, method: bytes, path: bytes) -> bool:
        p = self.o.paths
        if method == b"GET":
            return path == b"/v1/models" if p == "models" else path in DISCOVERY_GETS
        return p == "all" and path.endswith(b"/tokenize")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, _, rest = head.partition(b"\r\n")
                method, target, _ = line.split(b" ", 2)
                path = target.split(b"?", 1)[0]
                n = 0
                for h in rest.split(b"\r\n"):
                    if h[:15].lower() == b"content-length:":
                        n = int(h[15:].strip() or 0)
                body = await reader.readexactly(n) if n else b""
                if not await self.answer(writer, method, path, body):
                    return
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError,
                ValueError):
            return
        finally:
            writer.close()

    async def answer(self, w: asyncio.StreamWriter, method: bytes, path: bytes,
                     body: bytes) -> bool:
        if self.hostile_path(method, path) and self.bomb:
            w.write(_reply(200, self.bomb, extra=b"Content-Encoding: gzip\r\n"))
            return True
        if self.hostile_path(method, path) and self.o.plain_mb:
            total = int(self.o.plain_mb * 2**20)
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % total)
            block = b" " * (1 << 16)
            sent = 0
            while sent < total:
                w.write(block[: min(len(block), total - sent)])
                sent += len(block)
                await w.drain()
            return True
        if method == b"GET" and path == b"/metrics" and self.o.trickle_metrics:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n")
            while True:
                await w.drain()
                await asyncio.sleep(self.o.trickle_metrics)
                w.write(b"1\r\n#\r\n")
        if method == b"GET" and path == b"/v1/models":
            w.write(_reply(200, self.models))
        elif method == b"GET" and path == b"/props":
            w.write(_reply(200, json.dumps({"default_generation_settings": {"n_ctx": 4096},
                                            "total_slots": 1}).encode()))
        elif method == b"GET" and path == b"/metrics":
            w.write(_reply(200, METRICS, "text/plain"))
        elif method == b"POST" and path.endswith(b"/tokenize") and not self.o.no_tokenize:
            try:
                text = json.loads(body).get("content") or ""
            except (ValueError, AttributeError):
                text = ""
            w.write(_reply(200, json.dumps({"tokens": list(range(len(text.split()) + 1))})
                           .encode()))
        elif method == b"POST" and path.endswith(b"/completions"):
            if self.o.stall_completions:
                await asyncio.sleep(self.o.stall_completions)
            try:
                n = len(str(json.loads(body).get("prompt", "")).split()) + 1
            except (ValueError, AttributeError):
                n = 1
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                    + _event({"choices": [{"index": 0, "text": "x", "finish_reason": None}]})
                    + _event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                              "usage": {"prompt_tokens": n, "completion_tokens": 1}})
                    + b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
        else:
            w.write(_reply(404, b'{"error":"not found"}'))
        return True


async def main_async(opts) -> None:
    h = Hostile(opts)
    srv = await asyncio.start_server(h.handle, "127.0.0.1", opts.port, backlog=512)
    print(f"PORT {srv.sockets[0].getsockname()[1]}", flush=True)
    async with srv:
        await srv.serve_forever()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--gzip-kb", type=int, default=0)
    p.add_argument("--plain-mb", type=float, default=0)
    p.add_argument("--paths", choices=("models", "get", "all"), default="models")
    p.add_argument("--trickle-metrics", type=float, default=0)
    p.add_argument("--models-mb", type=float, default=0)
    p.add_argument("--no-tokenize", action="store_true")
    p.add_argument("--stall-completions", type=float, default=0)
    opts = p.parse_args(argv)
    try:
        asyncio.run(main_async(opts))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
