"""Every read from a server is bounded in bytes after decompression
and in total time (one deadline per request, not per read).

Memory is checked with ``tracemalloc``'s peak (every ``bytes`` object an inflated body
makes is a Python allocation): a body of tens of MiB, inflated whole, shows up in it.
"""

from __future__ import annotations

import asyncio
import gzip
import time
import tracemalloc
import zlib

import httpx
import pytest

from prefilltui.measure import metrics_hook as H
from prefilltui.measure import server as S
from prefilltui.measure.probe import ProbeClient
from prefilltui.model.types import ServerInfo
from tests.fakeserver import FakeServer, Reply, llama_routes, sse_done, sse_text

#: Inflated size of the test bombs: far over every cap, small enough for a test.
BOMB_MIB = 48


def bomb(mib: int = BOMB_MIB) -> bytes:
    """A gzip body of ~``mib`` MiB of zeros (about ``mib`` KiB on the wire)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return c.compress(bytes(mib * 2**20)) + c.flush()


def gz_reply(body: bytes, ctype: str = "application/json") -> Reply:
    return Reply(200, {"Content-Type": ctype, "Content-Encoding": "gzip"}, body)


def plain(mib: int) -> Reply:
    """``mib`` MiB of spaces, streamed in 64 KiB chunks (never whole in memory)."""
    block = b" " * 65536
    return Reply(200, {"Content-Type": "application/json"},
                 chunks=[(0.0, block)] * (mib * 16))


async def _peak_mib(coro) -> tuple[object, float]:
    tracemalloc.start()
    try:
        result = await coro
        return result, tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


# -- the decoder


def test_decoder_inflates_gzip_and_deflate_in_bounded_pieces():
    from prefilltui.measure import bounded

    data = b"x" * 300_000
    for enc, wire in (("gzip", gzip.compress(data)), ("deflate", zlib.compress(data)),
                      ("deflate", zlib.compress(data)[2:-4]),  # raw deflate, as some send
                      ("identity", data)):
        pieces = list(bounded.Decoder(enc).pieces(wire))
        assert b"".join(pieces) == data, enc
        assert max(len(p) for p in pieces) <= bounded.DECODE_CHUNK


def test_decoder_refuses_an_encoding_it_did_not_ask_for():
    from prefilltui.measure import bounded

    with pytest.raises(httpx.DecodingError, match="unsupported content-encoding 'compress'"):
        bounded.Decoder("compress")
    with pytest.raises(httpx.DecodingError, match="unsupported content-encoding 'gzip, br'"):
        bounded.Decoder("gzip, br")


def test_a_brotli_bomb_is_inflated_in_bounded_pieces():
    import brotli

    from prefilltui.measure import bounded

    data = bytes(8 * 2**20)
    wire = brotli.compress(data)
    pieces = bounded.Decoder("br").pieces(wire)
    first = next(pieces)
    assert len(first) <= 2 * bounded.DECODE_CHUNK  # the rest is never inflated
    assert b"".join([first, *pieces]) == data


def test_decoder_stops_inflating_when_the_reader_stops():
    from prefilltui.measure import bounded

    pieces = bounded.Decoder("gzip").pieces(bomb(8))
    first = next(pieces)
    assert len(first) == bounded.DECODE_CHUNK  # the rest is never inflated


# -- discovery and tokenize


@pytest.mark.parametrize("body", ["gzip", "plain"])
async def test_discovery_against_huge_bodies_stays_small(body):
    big = gz_reply(bomb()) if body == "gzip" else plain(BOMB_MIB)
    routes = {k: big for k in ("GET /v1/models", "GET /props", "GET /version", "GET /metrics",
                               "GET /info", "GET /api/version", "GET /model_info",
                               "GET /get_model_info", "GET /server_info",
                               "GET /get_server_info")}
    routes["POST /tokenize"] = big
    with FakeServer(routes) as srv:
        async with httpx.AsyncClient(headers={"Accept-Encoding": "identity"}) as c:
            info, peak = await _peak_mib(S.discover(c, srv.base_url, timeout=20))
    assert isinstance(info, ServerInfo) and info.model is None
    assert any("over 8 MiB" in n for n in info.notes), info.notes
    # at most one capped body (8 MiB) plus a few pieces; whole bodies would be 48 MiB each
    assert peak < 24, f"peak {peak:.0f} MiB"


async def test_count_tokens_against_a_bomb_is_none_and_small():
    with FakeServer({"POST /tokenize": gz_reply(bomb())}) as srv:
        info = ServerInfo(base_url=srv.base_url, has_tokenize=True, tokenize_style="llama.cpp",
                          tokenize_url=srv.base_url + "/tokenize", kind="llama.cpp")
        async with httpx.AsyncClient() as c:
            n, peak = await _peak_mib(S.count_tokens(c, info, "a b c"))
    assert n is None
    assert peak < 1.5 * 16 + 4, f"peak {peak:.0f} MiB"  # the tokenize cap: 16 MiB


async def test_probe_clients_ask_for_identity_encoding():
    with FakeServer(llama_routes()) as srv:
        async with ProbeClient(srv.base_url) as c:
            await c.discover()
    assert {r.headers.get("accept-encoding") for r in srv.requests} == {"identity"}


async def test_a_gzip_bomb_in_a_probe_stream_is_cut_off_small():
    stream = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = stream.compress(sse_text("x") + bytes(BOMB_MIB * 2**20)) + stream.flush()
    routes = {**llama_routes(), "POST /v1/completions":
              Reply(200, {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}, body)}
    with FakeServer(routes) as srv:
        async with ProbeClient(srv.base_url, timeout=20) as c:
            await c.discover()
            r, peak = await _peak_mib(c.probe(16, prompt="a b c"))
    assert not r.ok and "stream over" in r.error_message
    assert peak < 16, f"peak {peak:.0f} MiB"


async def test_a_huge_model_list_is_named_not_none():
    """A model list over the cap says so; one under it (4 MB) is read."""
    many = {"data": [{"id": f"model-{i:07d}", "object": "model"} for i in range(100_000)]}
    with FakeServer({"GET /v1/models": Reply.json(many)}) as srv:
        async with httpx.AsyncClient() as c:
            info = await S.discover(c, srv.base_url, timeout=20)
    assert info.model == "model-0000000"


# -- one deadline per request


def trickle(seconds: float, every: float = 0.2) -> Reply:
    """A 200 text body that sends one byte every ``every`` s for ``seconds``."""
    n = int(seconds / every)
    return Reply(200, {"Content-Type": "text/plain"},
                 chunks=[(every * i, b"#") for i in range(1, n)])


async def test_a_trickling_metrics_scrape_ends_at_its_deadline_then_backs_off():
    with FakeServer({"GET /metrics": trickle(30)}) as srv:
        async with H.MetricsReader(srv.base_url, "llama.cpp", timeout=1.0) as rd:
            t0 = time.monotonic()
            assert await asyncio.wait_for(rd.scrape(), 10) is None
            first = time.monotonic() - t0
            assert "within 1 s" in rd.problem and f"{H.SLOW_BACKOFF_S:g} s" in rd.problem
            t0 = time.monotonic()
            assert await rd.scrape() is None  # backing off: no request at all
            assert time.monotonic() - t0 < 0.5
    assert first < 3.0, f"scrape took {first:.1f} s"
    assert sum(1 for r in srv.requests if r.path == "/metrics") == 1


async def test_the_hook_bounds_its_scrapes_by_the_probe_timeout():
    routes = {**llama_routes(), "GET /metrics": trickle(30),
              "POST /v1/completions": Reply.sse([(0.0, sse_text("x", "length")),
                                                 (0.0, sse_done())])}
    with FakeServer(routes) as srv:
        async with ProbeClient(srv.base_url, timeout=1.5) as c:
            await c.discover()
            hook = H.MetricsHook()
            t0 = time.monotonic()
            await asyncio.wait_for(hook.before_probe(c), 10)
            r = await c.probe(8, prompt="a b")
            await asyncio.wait_for(hook.after_probe(r), 10)
            took = time.monotonic() - t0
            await hook.aclose()
    assert r.ok
    assert took < 1.5 + 1.5, f"probe with its scrapes took {took:.1f} s"


async def test_warm_reads_a_bounded_body():
    with FakeServer({"GET /v1/models": gz_reply(bomb())}) as srv:
        async with ProbeClient(srv.base_url, timeout=20) as c:
            _, peak = await _peak_mib(c.warm())
    assert peak < 1.5 * 8 + 4, f"peak {peak:.0f} MiB"  # the model-list cap: 8 MiB


async def test_a_load_request_is_bounded_too():
    """The background load's streams and error bodies read through the same caps."""
    import threading
    from types import SimpleNamespace

    from prefilltui.measure.load.request import LoadFault, send_load_request

    stream = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = stream.compress(b": " + b"x" * (BOMB_MIB * 2**20)) + stream.flush()
    routes = {**llama_routes(), "POST /v1/completions":
              Reply(200, {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}, body)}
    with FakeServer(routes) as srv:
        async with ProbeClient(srv.base_url, timeout=20) as c:
            await c.discover()
            live = SimpleNamespace(arrivals=[], prompt_tokens=None)

            async def fault(coro) -> str:
                try:
                    await coro
                except LoadFault as e:
                    return str(e)
                return ""
            said, peak = await _peak_mib(fault(send_load_request(
                c, {"prompt": "a"}, live, threading.Lock())))
            assert "load stream over 16 MiB" in said and peak < 16 + 8, f"peak {peak:.0f} MiB"
            srv.set("POST /v1/completions", Reply(
                500, {"Content-Type": "text/plain", "Content-Encoding": "gzip"}, bomb()))
            said, peak = await _peak_mib(fault(send_load_request(
                c, {"prompt": "a"}, live, threading.Lock())))
            assert "HTTP 500" in said and peak < 8, f"peak {peak:.0f} MiB"
