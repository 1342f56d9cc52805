"""Prefill at context depth: prefix reuse verified, slope vs depth, the CLI's --depth."""

import json

import pytest

from tests.fakeserver import Reply, llama_routes, sse_data, sse_done
from prefilltui.cli import main
from prefilltui.measure import depth as DM
from prefilltui.model import depth as D
from prefilltui.model.roofline import ModelShape, lookup_model
from prefilltui.measure.probe import ProbeClient
from prefilltui.model.types import ProbeResult
from prefilltui.render.tables import format_depth


class AttentionLlama:
    """A llama-server-like /v1/completions with 8 slots: with ``cache_prompt`` the
    longest common word prefix with any of the last 8 prompts is reused
    (``timings.cache_n``); each new word costs 0.2 ms plus 1 µs per word before it
    (attention over the context)."""

    def __init__(self, honour=True):
        self.slots: list[list[str]] = []
        self.honour = honour
        self.bodies: list[dict] = []

    @staticmethod
    def _lcp(a, b):
        i = 0
        while i < min(len(a), len(b)) and a[i] == b[i]:
            i += 1
        return i

    def __call__(self, req):
        body = req.json
        self.bodies.append(body)
        words = body["prompt"].split()
        cached = 0
        if body.get("cache_prompt", True) and self.honour and self.slots:
            cached = min(max(self._lcp(words, s) for s in self.slots), len(words) - 1)
        self.slots = (self.slots + [words])[-8:]
        t = sum(0.0002 + 1e-6 * p for p in range(cached, len(words)))
        timings = {"cache_n": cached, "prompt_n": len(words) - cached, "prompt_ms": t * 1e3}
        return Reply.sse([(t, sse_data({"choices": [{"index": 0, "text": "x", "finish_reason": None}]})),
                          (t, sse_data({"choices": [], "timings": timings,
                                        "usage": {"prompt_tokens": len(words), "completion_tokens": 1}})),
                          (t, sse_done())])


async def _run(srv, depths, lengths, repeats=2):
    got: list[ProbeResult] = []
    async with ProbeClient(srv.base_url, model="m", timeout=10, seed=1) as c:
        await c.discover()
        notes = await DM.run_depths(c, depths, lengths, repeats=repeats, cap=4000, seed=1,
                                   on_result=got.append)
    return got, notes


async def test_depth_probes_reuse_the_prefix_and_slope_rises(fake_server):
    h = AttentionLlama()
    srv = fake_server({**llama_routes(), "POST /v1/completions": h})
    got, notes = await _run(srv, [0, 300], [20, 60, 120])
    assert notes == []
    prefixes = [r for r in got if r.depth and r.depth.role == "prefix"]
    assert len(prefixes) == 1 and prefixes[0].warmup and not prefixes[0].fit_eligible
    probes = [r for r in got if r.depth and r.depth.role == "probe"]
    deep = [r for r in probes if r.depth.depth == 300]
    assert len(probes) == 12 and all(r.depth.verified for r in probes)
    assert len(deep) == 6 and all(r.cached_tokens == prefixes[0].prompt_tokens for r in deep)
    assert all(r.depth.new_tokens == r.prompt_tokens - r.cached_tokens for r in probes)
    # prefix caching asked for exactly on the depth requests; depth 0 interleaved
    flags = [b.get("cache_prompt") for b in h.bodies]
    assert flags[0] is True and flags.count(True) == 7 and flags.count(False) == 6
    assert flags[1:7] != [False] * 6 and flags[1:7] != [True] * 6
    cold = [r for r in probes if r.depth.depth == 0]
    assert len(cold) == 6 and all(r.cached_tokens == 0 for r in cold)
    shape = ModelShape(key="m", name="m", params=1e6, layers=2, hidden=100)
    t = D.depth_table(got, shape)
    r0, r1 = t.rows
    assert (r0.depth, r1.depth) == (0, 300)
    assert r1.verified == 6 and r1.flagged == 0
    assert r1.cached_tokens == r1.prefix_tokens == prefixes[0].prompt_tokens
    # 0.2 ms + 1 µs x position per word: LS slope ~ 200 + D + 140 µs/word -> ratio ~1.9
    assert 1.3 < r1.ratio < 3.0, r1
    assert r1.expected_ratio > 1 and r1.per_token_flops > r0.per_token_flops
    text = "\n".join(format_depth(t))
    assert "Prefill at context depth" in text and "6/6" in text
    json.dumps(t.to_json(), allow_nan=False)


async def test_unreused_prefix_is_flagged_and_left_out(fake_server):
    srv = fake_server({**llama_routes(), "POST /v1/completions": AttentionLlama(honour=False)})
    got, notes = await _run(srv, [200], [20, 60, 120], repeats=1)
    assert any("not verified" in n for n in notes)
    probes = [r for r in got if r.depth and r.depth.role == "probe" and r.depth.depth]
    assert probes and not any(r.depth.verified for r in probes)
    assert "0 cached tokens, prefix has" in probes[0].depth.flag
    row = D.depth_table(got).rows[1]
    assert row.fit is None and row.flagged == 3 and row.verified == 0
    assert "left out" in "\n".join(format_depth(D.depth_table(got)))


def test_verify_rules():
    r = ProbeResult(ok=True, prompt_tokens=600, cached_tokens=510)
    assert D.verify(r, 512) is None
    assert D.verify(ProbeResult(ok=True, prompt_tokens=600), 512) == \
        "the server reports no cached-token count"
    assert "cached tokens" in D.verify(ProbeResult(ok=True, prompt_tokens=600, cached_tokens=100), 512)
    assert D.verify(ProbeResult(ok=False, error_kind="timeout"), 512) == "failed: timeout"
    assert D.tolerance(100) == 16 and D.tolerance(4000) == 120


def test_expected_slope_matches_the_formula():
    # one length pair: the LS slope of lin*n + 4Ld(Dn + n(n+1)/2) between n=a and n=b is
    # lin + 4Ld(D + 1/2) + 2Ld(a+b); a shape with only params counts lin = 2P
    P, L, d = 1e8, 10, 64
    m = ModelShape(key="t", name="t", params=P, layers=L, hidden=None, attn_width=d)
    s = D.expected_slope([100, 300], 500, m)
    assert s == pytest.approx(2 * P + 4 * L * d * 500.5 + 2 * L * d * 400)
    assert D.expected_slope([100, 100], 0, m) is None
    # the full shape: the linear part leaves out the embeddings and the LM head
    smol = lookup_model("smollm2-135m")
    lin = 2 * 30 * (2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536)
    assert D.expected_slope([100, 300], 0, smol) == pytest.approx(
        lin + 4 * 30 * 576 * 0.5 + 2 * 30 * 576 * 400)
    assert D.lengths_for_depth([16, 64, 1024], 3500, 4000) == [16, 64]


def test_depth_table_none_without_depth_probes():
    assert D.depth_table([ProbeResult(ok=True, ttft_s=0.1, prompt_tokens=10)]) is None


def test_cli_depth_json_and_text(fake_server, tmp_path, capsys):
    srv = fake_server({**llama_routes(), "POST /v1/completions": AttentionLlama()})
    out = tmp_path / "run.jsonl"
    rc = main(["sweep", srv.base_url, "--lengths", "20,60,120", "--repeats", "2", "--depth",
               "0,250", "--out", str(out), "--format", "json", "--no-telemetry", "--seed", "3"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    d = json.loads(cap.out)
    rows = d["depth"]["rows"]
    assert [r["depth"] for r in rows] == [0, 250] and rows[1]["verified"] == 6
    assert rows[0]["verified"] == 6  # the cold reference, measured in the depth phase
    assert rows[1]["ratio"] > 1.2
    # depth probes stay out of the ordinary summary (no cache-hit warning, no fit change)
    assert d["probes"]["cache_hits"] == 0 and d["probes"]["ok"] == d["probes"]["total"] == 7
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert sum(x.get("extra", {}).get("depth_role") == "probe" for x in lines) == 12
    # the report re-reads the depth table from the run file
    rc = main(["report", str(out), "--no-plot"])
    text = capsys.readouterr().out
    assert rc == 0 and "Prefill at context depth" in text and "6/6" in text
    assert "Probes: 7 total" in text  # the depth phase is not in the ordinary summary


def test_cli_depth_needs_headless_in_demo(capsys):
    assert main(["demo", "--depth", "512"]) == 2
    assert "--headless" in capsys.readouterr().err
