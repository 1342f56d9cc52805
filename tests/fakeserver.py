"""A scriptable fake OpenAI-compatible HTTP/1.1 server on a real loopback socket.

Reusable by every test that needs a server without a model::

    from tests.unit.fakeserver import FakeServer, Reply, sse_text, sse_done

    script = {
        "POST /v1/completions": Reply.sse([(0.0, sse_text("Hi")), (0.4, sse_done())]),
        "GET /v1/models": Reply.json({"data": [{"id": "fake"}]}),
    }
    with FakeServer(script) as srv:
        srv.base_url            # "http://127.0.0.1:PORT"  (no /v1)
        srv.requests            # list[Request] received so far
        srv.set("POST /v1/completions", other_reply)   # change the script live

A route value may be a ``Reply``, a list of replies (served in order, the last one
repeats) or a callable ``f(request) -> Reply``.  Unknown routes answer 404.
``Reply.sse(chunks)`` sends each ``(at_s, bytes)`` chunk at ``at_s`` seconds after
the request arrived, as its own HTTP chunk with TCP_NODELAY, so a client sees
each chunk as a separate read (the byte-exact split-read cases rely on this).
Connections are kept alive.  The server runs an asyncio loop in a daemon thread.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Request:
    method: str
    path: str  # without the query string
    query: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    t_received: float  # perf_counter

    @property
    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    chunks: list[tuple[float, bytes]] | None = None  # streamed when not None
    close: bool = False  # close the connection after this reply (or mid-stream if truncate)
    truncate: bool = False  # drop the connection without the terminating chunk
    drop: bool = False  # close the connection without any response (a stale keep-alive)

    @classmethod
    def json(cls, obj: Any, status: int = 200, headers: dict | None = None) -> "Reply":
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        return cls(status, h, json.dumps(obj).encode())

    @classmethod
    def text(cls, text: str, status: int = 200, ctype: str = "text/plain") -> "Reply":
        return cls(status, {"Content-Type": ctype}, text.encode())

    @classmethod
    def sse(cls, chunks: list[tuple[float, bytes | str]], status: int = 200, **kw) -> "Reply":
        norm = [(t, c.encode() if isinstance(c, str) else c) for t, c in chunks]
        return cls(status, {"Content-Type": "text/event-stream"}, chunks=norm, **kw)


@dataclass
class QueueReply(Reply):
    """A streamed reply whose chunks come from ``queue`` as they are put (None ends it);
    a client that goes away mid-stream is handed to ``FakeServer._drop``."""

    queue: asyncio.Queue | None = None


def sse_data(obj: Any) -> bytes:
    """``data: <json>\\n\\n`` for one chunk object."""
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def sse_text(text: str, finish: str | None = None) -> bytes:
    """A /v1/completions chunk carrying ``text``."""
    return sse_data({"choices": [{"index": 0, "text": text, "finish_reason": finish}]})


def sse_delta(finish: str | None = None, **delta: Any) -> bytes:
    """A /v1/chat/completions chunk with ``delta`` fields (e.g. role=, content=)."""
    return sse_data({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def sse_done() -> bytes:
    return b"data: [DONE]\n\n"


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests",
            500: "Internal Server Error", 503: "Service Unavailable"}


class FakeServer:
    """Context manager: starts on ``127.0.0.1:<free port>`` (or ``port``: a server
    started again where the last one was), stops on exit."""

    def __init__(self, script: dict[str, Any] | None = None, *,
                 ssl_context: Any = None, port: int = 0) -> None:
        self.script: dict[str, Any] = dict(script or {})
        self.ssl_context = ssl_context  # an ssl.SSLContext: serve HTTPS
        self.requests: list[Request] = []
        self.connections = 0
        self._counts: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        #: the port asked for (0: a free one); the one bound once started
        self.port = port

    @property
    def base_url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def set(self, route: str, reply: Any) -> None:
        self.script[route] = reply
        self._counts.pop(route, None)

    # -- lifecycle
    def __enter__(self) -> "FakeServer":
        self._thread = threading.Thread(target=self._run, name="fakeserver", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake server did not start")
        return self

    def __exit__(self, *exc) -> None:
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port, ssl=self.ssl_context))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            tasks = asyncio.all_tasks(loop)
            for t in tasks:
                t.cancel()
            # the handlers close their connections as they end; one more turn of the
            # loop closes the sockets, so a client's kept-alive connection sees the end
            # (a server started again on the port is then reached afresh)
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    # -- serving
    def _pick(self, req: Request) -> Reply:
        route = f"{req.method} {req.path}"
        val = self.script.get(route)
        if val is None:
            return Reply.json({"error": {"message": f"no route {route}"}}, status=404)
        if callable(val):
            return val(req)
        if isinstance(val, list):
            i = self._counts.get(route, 0)
            self._counts[route] = i + 1
            return val[min(i, len(val) - 1)]
        return val

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                t0 = time.perf_counter()
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for ln in lines[1:]:
                    if ":" in ln:
                        k, v = ln.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = b""
                n = int(headers.get("content-length", "0") or 0)
                if n:
                    body = await reader.readexactly(n)
                path, _, query = target.partition("?")
                req = Request(method, path, query, headers, body, t0)
                self.requests.append(req)
                reply = self._pick(req)
                if not await self._send(writer, reply, t0):
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def _send(self, writer: asyncio.StreamWriter, r: Reply, t0: float) -> bool:
        """Write one reply; False when the connection must be dropped."""
        if r.drop:
            return False
        if isinstance(r, QueueReply):
            return await self._send_queue(writer, r.queue)
        head = [f"HTTP/1.1 {r.status} {_REASONS.get(r.status, 'Status')}"]
        hdrs = dict(r.headers)
        if r.chunks is None:
            hdrs["Content-Length"] = str(len(r.body))
        else:
            hdrs["Transfer-Encoding"] = "chunked"
        hdrs["Connection"] = "close" if r.close else "keep-alive"
        head += [f"{k}: {v}" for k, v in hdrs.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if r.chunks is None:
            writer.write(r.body)
            await writer.drain()
            return not r.close
        await writer.drain()
        for at, data in r.chunks:
            wait = t0 + at - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            if data:
                writer.write(b"%x\r\n" % len(data) + data + b"\r\n")
                await writer.drain()
        if r.truncate:
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return not r.close

    async def _send_queue(self, writer: asyncio.StreamWriter, q: asyncio.Queue) -> bool:
        head = ["HTTP/1.1 200 OK", "Content-Type: text/event-stream",
                "Transfer-Encoding: chunked", "Connection: keep-alive"]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        try:
            while True:
                data = await q.get()
                if data is None:
                    break
                writer.write(b"%x\r\n" % len(data) + data + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        except (ConnectionError, asyncio.CancelledError):
            self._drop(q)
            raise

    def _drop(self, q: asyncio.Queue) -> None:
        """A client left a ``QueueReply``'s stream: its request runs on (a subclass may
        take it out)."""


def per_token_completion(a: float = 0.005, b: float = 1e-3) -> Any:
    """A ``POST /v1/completions`` handler whose first token comes ``a + b x words``
    seconds after the request (one token a word: a CPU target at 1 ms a token by
    default), with ``usage.prompt_tokens`` = the prompt's words."""
    def reply(req: Request) -> Reply:
        words = len(req.json["prompt"].split())
        t = a + words * b
        return Reply.sse([(t, sse_text("x")),
                          (t + 0.001, sse_data({"choices": [], "usage": {"prompt_tokens": words}})),
                          (t + 0.002, sse_done())])
    return reply


def models_reply(model: str = "fake-model", **extra: Any) -> Reply:
    """A /v1/models reply listing one model (``extra`` goes into the entry)."""
    return Reply.json({"object": "list", "data": [{"id": model, "object": "model", **extra}]})


def llama_routes(n_ctx: int = 4096) -> dict[str, Reply]:
    """Discovery endpoints answering like llama-server (kind "llama.cpp")."""
    return {
        "GET /v1/models": models_reply("smollm", meta={"n_params": 134515008, "n_embd": 576,
                                                       "n_ctx_train": 8192}),
        "GET /props": Reply.json({"default_generation_settings": {"n_ctx": n_ctx},
                                  "total_slots": 1, "build_info": "b1"}),
        "GET /metrics": Reply.text("llamacpp:prompt_tokens_total 0\n"),
    }


def tokenize_route() -> Any:
    """``POST /tokenize`` answering like vLLM: ``{"count": words, "tokens": [...]}``
    (one token per whitespace-separated word of ``prompt``)."""
    def reply(req: Request) -> Reply:
        n = len(str(req.json.get("prompt", "")).split())
        return Reply.json({"count": n, "tokens": list(range(n)), "max_model_len": None})
    return reply
