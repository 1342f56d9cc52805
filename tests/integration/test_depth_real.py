"""Prefill at context depth against the demo llama-server: the prefix is really
served from the cache (cached tokens = the prefix's count) by probes with unique new
tokens, and the new tokens cost more per token behind a long prefix.  Small prompts
(<= 128 new tokens after a 512-token prefix) keep it quick on 2 shared cores."""

from __future__ import annotations

import asyncio

import pytest

from prefilltui.measure import depth as DM
from prefilltui.model import depth as D
from prefilltui.measure.probe import ProbeClient

pytestmark = pytest.mark.integration

LENGTHS = [32, 64, 128]


def test_depth_prefix_is_reused_and_verified(llama_server):
    async def go():
        got = []
        async with ProbeClient(llama_server.base_url, timeout=120, seed=11) as c:
            await c.discover()
            notes = await DM.run_depths(c, [512], LENGTHS, repeats=2, cap=4000, seed=11,
                                       on_result=got.append)
        return got, notes

    got, notes = asyncio.run(go())
    assert notes == [], notes
    (prefix,) = [r for r in got if r.depth and r.depth.role == "prefix"]
    assert prefix.ok and abs(prefix.prompt_tokens - 512) <= 16, prefix
    probes = [r for r in got if r.depth and r.depth.role == "probe" and r.depth.depth]
    assert len(probes) == 6
    for r in probes:
        assert r.ok and r.depth.verified, r.depth
        assert abs(r.cached_tokens - prefix.prompt_tokens) <= D.tolerance(prefix.prompt_tokens)
        assert abs(r.depth.new_tokens - r.requested_tokens) <= 4, r
    t = D.depth_table(got)
    assert [row.depth for row in t.rows] == [0, 512]
    assert [row.verified for row in t.rows] == [6, 6] and t.rows[1].fit is not None
