"""A small HTTP forward proxy on a real loopback socket, for tests of proxy support.

``ForwardProxy({"llm.holdout.invalid": srv.base_url})`` accepts absolute-form requests
(``POST http://llm.holdout.invalid/v1/completions HTTP/1.1``, as a client sends them
to an HTTP proxy), forwards those for a known host to its upstream URL (so a host
that no DNS can resolve is reachable only through the proxy), and answers 502 for
any other host.  The body is relayed chunk by chunk as the upstream sends it
(streams stay streams); ``seen`` lists ``"METHOD URL"`` of each request.  No CONNECT
(https targets are not needed by the tests).  Runs FakeServer's asyncio loop in a
thread.
"""

from __future__ import annotations

import asyncio
import urllib.parse

import httpx

from tests.fakeserver import FakeServer

_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
        "transfer-encoding", "content-length", "te", "trailer", "upgrade"}


class ForwardProxy(FakeServer):
    """FakeServer's loop, thread and life cycle; its own handler (no script)."""

    def __init__(self, routes: dict[str, str]) -> None:
        super().__init__()
        self.routes = routes
        self.seen: list[str] = []
        self._client = httpx.AsyncClient(trust_env=False, timeout=60)

    @property
    def url(self) -> str:
        return self.base_url

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
