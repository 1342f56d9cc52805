"""Client overhead: the TTFT prefilltui reports against a server that answers at once,
compared with a raw-socket client sending the very same request bytes, and with an
aiohttp client written the way vLLM's benchmark_serving reads a stream.

    python -m tests.bench.bench_overhead [--quick] [--n N]

The server (tests/bench/fastserver.py) runs in its own process and answers every
POST with one write (token event, usage/timings event, [DONE]).  One iteration fires
the three clients back to back, in a rotating order, over one keep-alive connection
each; ``n`` iterations.  Clocks (time.perf_counter):
  prefilltui  ProbeResult.ttft_s as ProbeClient reports it (request handed to httpx ->
              the read completing the first token event);
  raw socket  sendall() of the captured bytes -> the recv() completing that event
              (blocking socket, the floor: kernel + server only);
  aiohttp     session.post() -> the line carrying the first token (json-decoded), as
              vLLM's benchmark does.
Figures are differences of quantiles of the three distributions (ms), plus each
client's CPU time per probe (time.process_time around each call, whole probe).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time

from tests.bench import Row, ms, quantile
from tests.bench.fastserver import FastServerProcess

SECTION = "1 client overhead"
#: Prompt length of every request (words; the fast server counts words + 1 tokens).
PROMPT_WORDS = 512


class RawClient:
    """Blocking keep-alive socket replaying one captured request."""

    def __init__(self, port: int, request: bytes) -> None:
        self.request = request
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def probe(self) -> float:
        buf = b""
        t0 = time.perf_counter()
        self.sock.sendall(self.request)
        ttft = None
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("server closed the connection")
            buf += data
            if ttft is None:
                i = buf.find(b'"text":" the"')
                if i >= 0 and buf.find(b"\n\n", i) >= 0:
                    ttft = time.perf_counter() - t0
            if buf.endswith(b"0\r\n\r\n"):
                break
        assert ttft is not None, "no token event"
        return ttft

    def close(self) -> None:
        self.sock.close()


async def _aiohttp_probe(session, url: str, body: bytes) -> float:
    t0 = time.perf_counter()
    ttft = None
    async with session.post(url, data=body, headers={"Content-Type": "application/json",
                                                      "Accept": "text/event-stream"}) as resp:
        async for line in resp.content:
            line = line.strip()
            if not line or not line.startswith(b"data: "):
                continue
            payload = line[6:]
            if payload == b"[DONE]":
                continue
            obj = json.loads(payload)
            ch = obj.get("choices") or []
            if ttft is None and ch and ch[0].get("text"):
                ttft = time.perf_counter() - t0
    assert ttft is not None, "no token event"
    return ttft


async def measure(n: int) -> dict:
    """Run the three clients ``n`` times each; returns their TTFT lists (seconds)."""
    import aiohttp
    import httpx

    from prefilltui.measure.probe import ProbeClient
    from prefilltui.model.prompts import PromptBuilder

    prompt = " ".join(PromptBuilder(1).words(PROMPT_WORDS))
    with FastServerProcess() as srv:
        client = ProbeClient(srv.base_url)
        await client.discover()
        await client.warm()
        first = await client.probe(PROMPT_WORDS, prompt=prompt)
        if not first.ok:
            raise RuntimeError(f"probe against the fast server failed: {first.error_message}")
        async with httpx.AsyncClient(trust_env=False) as h:
            request = (await h.get(srv.base_url + "/_last_request")).content
        body = request.partition(b"\r\n\r\n")[2]
        raw = RawClient(srv.port, request)
        conn = aiohttp.TCPConnector(limit=1)
        session = aiohttp.ClientSession(connector=conn)
        url = client.v1 + "/completions"
        out: dict[str, list[float]] = {"prefilltui": [], "raw": [], "aiohttp": []}
        cpu = {k: 0.0 for k in out}
        try:
            for _ in range(20):  # warm every path (connections, caches)
                raw.probe()
                await _aiohttp_probe(session, url, body)
                await client.probe(PROMPT_WORDS, prompt=prompt)

            async def one(name: str) -> None:
                c0 = time.process_time()
                await one_(name)
                cpu[name] += time.process_time() - c0

            async def one_(name: str) -> None:
                if name == "raw":
                    out["raw"].append(raw.probe())
                elif name == "aiohttp":
                    out["aiohttp"].append(await _aiohttp_probe(session, url, body))
                else:
                    r = await client.probe(PROMPT_WORDS, prompt=prompt)
                    if not r.ok or r.ttft_s is None:
                        raise RuntimeError(f"probe failed: {r.error_message}")
                    out["prefilltui"].append(r.ttft_s)

            names = ["prefilltui", "raw", "aiohttp"]
            for i in range(n):
                k = i % 3
                for name in names[k:] + names[:k]:
                    await one(name)
        finally:
            raw.close()
            await session.close()
            await client.aclose()
    out["request_bytes"] = len(request)  # type: ignore[assignment]
    out["cpu_per_probe_s"] = {k: v / n for k, v in cpu.items()}  # type: ignore[assignment]
    return out


def run(opts) -> list[Row]:
    n = getattr(opts, "overhead_n", None) or (200 if opts.quick else 600)
    d = asyncio.run(measure(n))
    p, r, a = d["prefilltui"], d["raw"], d["aiohttp"]
    q = {k: {"p50": quantile(v, 0.5), "p95": quantile(v, 0.95)} for k, v in
         (("prefilltui", p), ("raw", r), ("aiohttp", a))}
    med = q["prefilltui"]["p50"] - q["raw"]["p50"]
    p95 = q["prefilltui"]["p95"] - q["raw"]["p95"]
    amed = q["aiohttp"]["p50"] - q["raw"]["p50"]
    ap95 = q["aiohttp"]["p95"] - q["raw"]["p95"]
    cpu = d["cpu_per_probe_s"]
    ratio = cpu["prefilltui"] / cpu["aiohttp"] if cpu["aiohttp"] > 0 else float("inf")
    data = {"n": n, "request_bytes": d["request_bytes"], "quantiles_s": q,
            "prompt_words": PROMPT_WORDS, "cpu_per_probe_s": cpu}
    return [
        Row(SECTION, "raw-socket TTFT, instant server (p50 / p95)",
            f"{ms(q['raw']['p50'], 3)} / {ms(q['raw']['p95'], 3)}", "", None, data),
        Row(SECTION, "prefilltui - raw socket, median TTFT", ms(med, 3), "<= 1 ms", med <= 1e-3),
        Row(SECTION, "prefilltui - raw socket, p95 TTFT", ms(p95, 3), "", None),
        Row(SECTION, "aiohttp (vLLM bench style) - raw, median / p95",
            f"{ms(amed, 3)} / {ms(ap95, 3)}", "", None),
        Row(SECTION, "prefilltui - aiohttp, median TTFT", ms(med - amed, 3), "", None),
        Row(SECTION, "client CPU per probe: prefilltui / aiohttp / raw",
            f"{ms(cpu['prefilltui'])} / {ms(cpu['aiohttp'])} / {ms(cpu['raw'], 3)}", "", None),
        Row(SECTION, "client CPU per probe, prefilltui over aiohttp (same run)",
            f"{ratio:.1f}x", "<= 2x", ratio <= 2.0),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", dest="overhead_n", type=int, default=None)
    opts = ap.parse_args(argv)
    from tests.bench import format_table

    print(format_table(run(opts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
