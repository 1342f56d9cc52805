"""The demo's synthetic users: loopback only, bounded in count, shared prefixes and
mixed lengths, no X-Request-Id (so the receiver sees users, never probes)."""

from __future__ import annotations

import time

import pytest

from prefilltui.demo.users import PREFIX_WORDS, SUFFIX_WORDS, SyntheticUsers
from tests.fakeserver import Reply, models_reply


def test_refuses_another_machine_and_a_bad_rate():
    with pytest.raises(ValueError, match="loopback"):
        SyntheticUsers("http://10.0.0.1:8000", 1.0)
    with pytest.raises(ValueError, match="positive"):
        SyntheticUsers("http://127.0.0.1:8000", 0.0)


def test_sends_a_bounded_load_with_shared_prefixes(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       "POST /v1/completions": Reply.json({"choices": [{"text": "x"}]})})
    users = SyntheticUsers(srv.base_url, 200.0, seed=3, max_requests=12).start()
    deadline = time.monotonic() + 20
    while users.sent + users.skipped < 12 and time.monotonic() < deadline:
        time.sleep(0.05)
    users.stop()
    posts = [r for r in srv.requests if r.method == "POST"]
    assert 0 < len(posts) <= 12 and users.sent + users.skipped == 12 and users.failed == 0
    assert all("x-request-id" not in r.headers for r in posts)
    prompts = [r.json["prompt"] for r in posts]
    assert all(r.json["model"] == "m" and r.json["max_tokens"] == 4 for r in posts)
    prefixes = {p.split("\n\n")[0] for p in prompts}
    assert prefixes <= set(users.prefixes) and len(users.prefixes) == len(PREFIX_WORDS)
    asked = {len(p.split("Question: ")[1].split()) for p in prompts}
    assert asked <= set(SUFFIX_WORDS)
