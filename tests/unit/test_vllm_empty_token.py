"""The probe at vLLM's context cap that failed as ``no_token``: the bytes vLLM 0.32.0
sent, replayed by a fake server.

Root cause (measured on vLLM 0.32.0, ``--load-format dummy``, SmolLM2-135M shape):
at prompts of ~4,000 tokens the random model's logits are flat (every top
logprob -10.8027 = -ln 49,152), so the greedy token is close to uniform over the
vocabulary, and 331 of its 49,152 tokens decode to nothing alone (17 special
tokens, 314 byte-level pieces of a UTF-8 character).  vLLM then streams the
choice with ``"text": ""`` and ``finish_reason: "length"``, and counts the token
in usage (``completion_tokens: 1``).  The fixture was captured from the real
server at 4,009 prompt tokens with ``logit_bias`` forcing one such token
(``'ķ'``, id 239), which gives the same bytes as the unforced case.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.fakeserver import Reply, models_reply
from prefilltui.measure.probe import ProbeClient

CAPTURED = (Path(__file__).parent / "fixtures" / "vllm_empty_token.sse").read_bytes()
EVENTS = [e + b"\n\n" for e in CAPTURED.split(b"\n\n") if e]


def word_tokenize(req):
    n = len(req.json["prompt"].split())
    return Reply.json({"count": n, "tokens": list(range(n)), "max_model_len": 4096})


def replay(events, times=(0.10, 0.11, 0.12)):
    return lambda req: Reply.sse(list(zip(times, events)))


async def probe_once(srv, n=50):
    async with ProbeClient(srv.base_url, timeout=8) as c:
        await c.discover()
        t = time.perf_counter()
        r = await c.probe(n)
        return r, time.perf_counter() - t


def test_the_capture_is_what_vllm_sent():
    assert len(EVENTS) == 3 and EVENTS[-1] == b"data: [DONE]\n\n"
    assert b'"text":""' in EVENTS[0] and b'"finish_reason":"length"' in EVENTS[0]
    assert b'"completion_tokens":1' in EVENTS[1] and b'"prompt_tokens":4009' in EVENTS[1]


async def test_an_empty_text_token_is_a_token_stamped_at_its_chunk(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("/models/smollm2", max_model_len=4096),
                       "POST /tokenize": word_tokenize,
                       "POST /v1/completions": replay(EVENTS)})
    r, _ = await probe_once(srv)
    assert r.ok, r.error_message  # was: no_token "stream ended without a generated token"
    assert r.error_kind is None
    assert 0.09 <= r.ttft_s <= 0.3  # the finish chunk at 0.10 s, not [DONE] at 0.12 s
    assert r.prompt_tokens == 4009 and r.cached_tokens == 0
    assert r.notes.token_channel == "hidden"  # counted by usage, no text to show


async def test_zero_completion_tokens_stays_no_token(fake_server):
    zero = EVENTS[1].replace(b'"completion_tokens":1', b'"completion_tokens":0')
    srv = fake_server({"GET /v1/models": models_reply("m", max_model_len=4096),
                       "POST /tokenize": word_tokenize,
                       "POST /v1/completions": replay([EVENTS[0], zero, EVENTS[2]])})
    r, _ = await probe_once(srv)
    assert not r.ok and r.error_kind == "no_token"


async def test_an_empty_finish_without_usage_stays_no_token(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("m", max_model_len=4096),
                       "POST /tokenize": word_tokenize,
                       "POST /v1/completions": replay([EVENTS[0], EVENTS[2]], (0.1, 0.11))})
    r, _ = await probe_once(srv)
    assert not r.ok and r.error_kind == "no_token"
