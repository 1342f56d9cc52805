"""TTFT at any byte split: valid event streams (LF, CRLF and lone-CR line ends,
comments, id/retry/event fields, multi-line data, ``data:`` without a space,
multi-byte UTF-8) are cut at every byte boundary, with a clock step at the cut;
the probe's TTFT must be the time of the read that completes the first token
event (the line end of its blank line), never a later read.

Runs the probe's own stream reader (``StreamReader.read_events``) on an
in-memory response with a fake clock: no sockets, no sleeping.
"""

from __future__ import annotations

import asyncio
import json
import types

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import prefilltui.measure.probe.stream as probe_mod
from prefilltui.measure.probe import ProbeClient
from prefilltui.model.types import ProbeResult

EOLS = ("\n", "\r\n", "\r")


class Clock:
    t = 0.0

    def perf_counter(self) -> float:
        return self.t


class Pieces(httpx.AsyncByteStream):
    """Yields ``(t, bytes)`` pieces, setting the fake clock to ``t`` before each."""

    def __init__(self, pieces, clock: Clock) -> None:
        self.pieces, self.clock = pieces, clock

    async def __aiter__(self):
        for t, p in self.pieces:
            self.clock.t = t
            yield p


@st.composite
def streams(draw) -> tuple[bytes, int]:
    """A valid one-token stream and the byte offset (exclusive) at which its first
    token event is complete."""
    lines: list[tuple[str, str]] = []  # (line, its end)

    def eol(blank: bool = False) -> str:
        # a blank line right after a lone CR must not start with LF (that would
        # make the pair one CRLF line end)
        choices = EOLS if not (blank and lines and lines[-1][1] == "\r") else ("\r", "\r\n")
        return draw(st.sampled_from(choices))

    def field(name: str, value: str) -> str:
        return name + draw(st.sampled_from([": ", ":"])) + value

    def block(body: list[str]) -> None:
        for ln in body:
            lines.append((ln, eol()))
        lines.append(("", eol(blank=True)))

    prefix = draw(st.lists(st.sampled_from(["comment", "retry", "role", "empty", "ping"]),
                           max_size=3))
    for kind in prefix:
        if kind == "comment":
            block([": " + draw(st.text("abc :\u00e9", max_size=8))])
        elif kind == "ping":
            lines.append((":", eol()))  # a lone comment line, no blank line needed
        elif kind == "retry":
            block([field("retry", "3000")])
        elif kind == "role":
            role = {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}
            block([field("data", json.dumps(role))])
        else:
            block([field("data", json.dumps({"choices": [{"index": 0, "text": ""}]}))])
    text = draw(st.sampled_from(["Hi", "\u00e9", "\u2603", "x y"]))
    obj = json.dumps({"choices": [{"index": 0, "text": text}]}, ensure_ascii=False)
    cut = draw(st.integers(0, len(obj)))
    body: list[str] = []
    if draw(st.booleans()):
        body.append(field("id", "7"))
    if draw(st.booleans()):
        body.append(field("event", "message"))
    if draw(st.booleans()) and 0 < cut < len(obj) and obj[cut - 1] in ",:{[":
        body += [field("data", obj[:cut]), field("data", obj[cut:])]  # joined with \n: still JSON
    else:
        body.append(field("data", obj))
    if draw(st.booleans()):
        body.insert(draw(st.integers(0, len(body))), ": inside")
    for ln in body:
        lines.append((ln, eol()))
    blank_end = eol(blank=True)
    head = "".join(a + b for a, b in lines).encode()
    complete_at = len(head) + 1  # the first character of the blank line's end
    lines.append(("", blank_end))
    block([field("data", json.dumps({"choices": [], "usage": {"prompt_tokens": 50}}))])
    block([field("data", "[DONE]")])
    raw = "".join(a + b for a, b in lines).encode()
    return raw, complete_at


def _read(client: ProbeClient, clock: Clock, pieces) -> ProbeResult:
    resp = httpx.Response(200, headers={"content-type": "text/event-stream"},
                          stream=Pieces(pieces, clock),
                          request=httpx.Request("POST", "http://test/v1/completions"))
    r = ProbeResult(requested_tokens=50)
    clock.t = 0.0

    async def go():
        await client.reader.read_events(resp, r, 0.0)
    _LOOP.run_until_complete(go())
    return r


_LOOP = asyncio.new_event_loop()  # one loop for thousands of reads (asyncio.run each is slow)


@pytest.fixture
def fake_clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(probe_mod, "time", types.SimpleNamespace(perf_counter=clock.perf_counter,
                                                                  time=lambda: 0.0))
    return clock


@settings(max_examples=60, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(streams())
def test_ttft_is_stamped_at_the_completing_read_for_every_split(fake_clock, case):
    raw, complete_at = case
    client = ProbeClient("http://test")
    for k in range(1, len(raw)):
        r = _read(client, fake_clock, [(0.0, raw[:k]), (1.0, raw[k:])])
        want = 0.0 if complete_at <= k else 1.0
        assert r.ok and r.ttft_s == want, (k, raw[:k], raw[k:], r.error_message)
        assert r.prompt_tokens == 50
    # every byte its own read, read i at t = i: TTFT is the completing byte's read
    r = _read(client, fake_clock, [(float(i), raw[i:i + 1]) for i in range(len(raw))])
    assert r.ok and r.ttft_s == complete_at - 1


def test_the_reported_crlf_case_completes_at_the_cr(fake_clock):
    """``...\\r\\n\\r`` at t = 0.10, the ``\\n`` only at 0.40: TTFT is 0.10."""
    first = b'data: {"choices":[{"index":0,"text":"Hi"}]}\r\n\r'
    rest = (b'\ndata: {"choices":[],"usage":{"prompt_tokens":50}}\r\n\r\n'
            b"data: [DONE]\r\n\r\n")
    r = _read(ProbeClient("http://test"), fake_clock, [(0.10, first), (0.40, rest)])
    assert r.ok and r.ttft_s == 0.10 and r.ttfb_s == 0.10 and r.prompt_tokens == 50
