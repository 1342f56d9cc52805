"""A small HTTP forward proxy on a real loopback socket, for tests of proxy support.

``ForwardProxy({"llm.holdout.invalid": srv.base_url})`` accepts absolute-form requests
(``POST http://llm.holdout.invalid/v1/completions HTTP/1.1``, as a client sends them
to an HTTP proxy), forwards those for a known host to its upstream URL (so a host
that no DNS can resolve is reachable only through the proxy), and answers 502 for
any other host.  The body is relayed chunk by chunk as the upstream sends it
(streams stay streams); ``seen`` lists ``"METHOD URL"`` of each request.  No CONNECT
(https targets are not needed by the tests).  Runs an asyncio loop in a thread.
"""

from __future__ import annotations

import asyncio
import threading
import urllib.parse

import httpx

_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
        "transfer-encoding", "content-length", "te", "trailer", "upgrade"}


class ForwardProxy:
    def __init__(self, routes: dict[str, str]) -> None:
        self.routes = routes
        self.seen: list[str] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "ForwardProxy":
        self._thread = threading.Thread(target=self._run, name="forwardproxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("proxy did not start")
        return self

    def __exit__(self, *exc) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        server = loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._client = httpx.AsyncClient(trust_env=False, timeout=60)
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            for t in asyncio.all_tasks(loop):
                t.cancel()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = [tuple(x.strip() for x in ln.split(":", 1)) for ln in lines[1:] if ":" in ln]
                n = int(dict((k.lower(), v) for k, v in headers).get("content-length", "0") or 0)
                body = await reader.readexactly(n) if n else b""
                self.seen.append(f"{method} {target}")
                parts = urllib.parse.urlsplit(target)
                upstream = self.routes.get(parts.hostname or "")
                if upstream is None:
                    writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                url = upstream + parts.path + (f"?{parts.query}" if parts.query else "")
                fwd = [(k, v) for k, v in headers if k.lower() not in _HOP | {"host"}]
                async with self._client.stream(method, url, headers=fwd, content=body) as resp:
                    out = [f"HTTP/1.1 {resp.status_code} {resp.reason_phrase}"]
                    out += [f"{k}: {v}" for k, v in resp.headers.multi_items()
                            if k.lower() not in _HOP]
                    out += ["Transfer-Encoding: chunked", "Connection: keep-alive"]
                    writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))
                    await writer.drain()
                    async for chunk in resp.aiter_raw():
                        writer.write(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                        await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError, httpx.HTTPError):
            return
        finally:
            try:
                writer.close()
            except Exception:
                pass
