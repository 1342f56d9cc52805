"""Held-out variants of the field's stream kinds: a buffering path that also ignores
max_tokens (the whole answer at once), a buffered body over several reads, a check
that must not hold the probe, and error bodies in the shapes servers really use
(FastAPI ``detail``, pydantic lists, Google's list, RFC 9457, plain text), whose own
words the message must carry."""

from __future__ import annotations

import time

import pytest

from tests.fakeserver import Reply, models_reply, sse_data, sse_delta, sse_done, sse_text
from prefilltui.measure.probe import ProbeClient

USAGE = sse_data({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 1}})


async def probe(srv, *, api="completions", timeout=5):
    async with ProbeClient(srv.base_url, api=api, model="m", timeout=timeout) as c:
        await c.discover()
        await c.warm()
        t = time.perf_counter()
        r = await c.probe(16, prompt="hello world")
        return r, c, time.perf_counter() - t


# ------------------------------------------------ buffered, and the cap ignored

@pytest.mark.parametrize("api", ["completions", "chat"])
async def test_a_buffered_answer_that_ignores_the_cap_has_no_ttft(fake_server, api):
    """A gateway that drops max_tokens and buffers: 40 tokens (the role chunk first for
    chat), no [DONE], all in one write 0.3 s after the request.  Before: ok, "TTFT"
    0.30 s (the arrival), cap_ignored."""
    if api == "chat":
        body = sse_delta(role="assistant") + b"".join(sse_delta(content=" w") for _ in range(40))
    else:
        body = b"".join(sse_text(" w") for _ in range(40))
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       f"POST {path}": Reply.sse([(0.3, body)])})
    r, c, wall = await probe(srv, api=api)
    assert not r.ok and r.error_kind == "buffered" and not r.fit_eligible, r.error_message
    assert r.ttft_s is None and 0.29 <= r.arrival_s <= 0.6
    assert "buffered" in c.notices and c.streaming == "buffers"
    assert wall < 2.5


async def test_a_buffered_body_over_several_reads_has_no_ttft(fake_server):
    """One token, then ~100 KiB (comments, a large usage tail) and [DONE], all written at
    once 0.2 s after the request: the reader gets it in several 64 KiB reads.  Before:
    ok, "TTFT" = the arrival (the token and [DONE] were in different reads)."""
    body = sse_text("Hi") + sse_text("", finish="length") + b": pad\n" * 16000 + USAGE + sse_done()
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       "POST /v1/completions": Reply.sse([(0.2, body)])})
    r, c, _ = await probe(srv)
    assert not r.ok and r.error_kind == "buffered", r.error_message
    assert r.ttft_s is None and r.arrival_s >= 0.19


async def test_two_tokens_after_a_streamed_start_are_not_buffered(fake_server):
    """The role chunk at 0.05 s, then two tokens in one read at 0.2 s: the path streams
    (the body started before the tokens) and coalesced two decode steps; the probe
    stands, its TTFT the first token's read."""
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/chat/completions": Reply.sse(
        [(0.05, sse_delta(role="assistant")),
         (0.2, sse_delta(content="Hi") + sse_delta(content=" there"))])})
    r, _, _ = await probe(srv, api="chat")
    assert r.ok and 0.19 <= r.ttft_s <= 0.4, r.error_message
    assert r.notes.cap_ignored and not r.notes.token_with_end


async def test_the_streaming_check_ends_one_tail_after_its_last_token(fake_server):
    """Two tokens at once, then keep-alive comments every 0.1 s forever (timeout 5 s):
    the 8-token check waited for its 8 tokens until the timeout (5.1 s for the probe);
    it now decides one CHECK_TAIL_S after the last token."""
    stream = [(0.1, sse_text("a") + sse_text("b"))] + [(0.1 + 0.1 * i, b": ka\n\n")
                                                       for i in range(1, 100)]
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       "POST /v1/completions": Reply.sse(stream)})
    r, _, wall = await probe(srv, timeout=5)
    assert r.error_kind == "buffered" and wall < 2.5, (r.error_message, wall)


# ------------------------------------------------ error bodies: the server's own words

@pytest.mark.parametrize("status, body, words", [
    (400, {"detail": "max_tokens is not supported here"}, "max_tokens is not supported here"),
    (422, {"detail": [{"type": "missing", "loc": ["body", "prompt"], "msg": "Field required",
                       "input": None}]}, "body.prompt: Field required"),
    (400, [{"error": {"code": 400, "message": "API key not valid for this project",
                      "status": "INVALID_ARGUMENT"}}], "API key not valid for this project"),
    (400, {"errors": [{"message": "model is warming up"}]}, "model is warming up"),
    (403, {"type": "about:blank", "title": "Forbidden", "detail": "quota exhausted for org"},
     "quota exhausted for org"),
    (400, {"error": True, "message": "unsupported model family"}, "unsupported model family"),
    (401, {"error": "invalid_token", "error_description": "token expired"}, "invalid_token"),
])
async def test_an_error_body_of_any_common_shape_keeps_the_servers_words(fake_server, status,
                                                                        body, words):
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       "POST /v1/completions": Reply.json(body, status)})
    r, _, _ = await probe(srv)
    assert r.error_kind == "http" and r.error_message.startswith(f"HTTP {status}: ")
    assert words in r.error_message, r.error_message  # was: "HTTP 400" alone


async def test_a_plain_text_200_that_is_not_a_stream_quotes_it(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": Reply.text(
        "Service  temporarily\nunavailable: upstream pool drained")})
    r, _, _ = await probe(srv)
    assert r.error_kind == "protocol"
    assert r.error_message == ("server did not stream (content-type 'text/plain'): Service "
                               "temporarily unavailable: upstream pool drained")


# ------------------------------------------------ JSON lines instead of SSE

def line(obj) -> bytes:
    import json

    return json.dumps(obj).encode() + b"\n"


async def test_an_ollama_native_ndjson_stream_is_measured(fake_server):
    """Ollama's native stream on the path (a gateway mapping /v1 to /api/generate).
    Before: protocol, "server did not stream (content-type 'application/x-ndjson')"."""
    reply = Reply.sse([(0.10, line({"model": "m", "response": "Hi", "done": False})),
                       (0.12, line({"model": "m", "response": "", "done": True,
                                    "done_reason": "length", "prompt_eval_count": 12,
                                    "prompt_eval_duration": 80_000_000, "eval_count": 1}))])
    reply.headers["Content-Type"] = "application/x-ndjson"
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": reply})
    r, c, _ = await probe(srv)
    assert r.ok and 0.09 <= r.ttft_s <= 0.3, r.error_message
    assert r.prompt_tokens == 12 and r.prompt_tokens_source == "usage"
    assert r.server_prefill_s == pytest.approx(0.08)
    assert "JSON lines stream" in c.notices


async def test_openai_chunks_as_json_lines_under_a_json_label_are_measured(fake_server):
    chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {
        "content": "Hi"}, "finish_reason": None}]}
    end = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {},
                                                          "finish_reason": "length"}]}
    reply = Reply.sse([(0.10, line(chunk)), (0.12, line(end))])
    reply.headers["Content-Type"] = "application/json"
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/chat/completions": reply})
    r, _, _ = await probe(srv, api="chat")
    assert r.ok and 0.09 <= r.ttft_s <= 0.3, r.error_message


async def test_one_json_completion_is_still_buffered_not_a_line_stream(fake_server):
    reply = Reply.sse([(0.2, line({"object": "text_completion", "choices": [
        {"index": 0, "text": "Hi", "finish_reason": "length"}]}))])
    reply.headers["Content-Type"] = "application/json"
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": reply})
    r, _, _ = await probe(srv)
    assert r.error_kind == "buffered" and "did not stream" in r.error_message


async def test_a_json_line_without_end_is_cut_not_held(fake_server, monkeypatch):
    from prefilltui.measure import jsonlines

    monkeypatch.setattr(jsonlines, "MAX_LINE_BYTES", 64 * 1024)
    reply = Reply.sse([(0.05, line({"response": "", "done": False})),
                       (0.06, b'{"response": "' + b"x" * 100_000)])
    reply.headers["Content-Type"] = "application/x-ndjson"
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": reply})
    r, _, _ = await probe(srv)
    assert r.error_kind == "protocol" and "JSON line over 65536 bytes" in r.error_message


# ------------------------------------------------ no probe outlives its timeout

async def test_a_trickling_tokenize_endpoint_cannot_hold_a_probe_past_its_timeout(fake_server):
    """/tokenize answers the discovery's short test at once, then trickles a byte a
    second for the prompts: each count had its own 30 s deadline, so a probe with
    --timeout 2 took 30 s.  Counting is now bounded by the timeout in all, and the
    endpoint is given up for the session."""
    import json as _json

    def tokenize(req):
        n = len(str(req.json.get("prompt") or req.json.get("content") or "").split())
        body = _json.dumps({"count": n, "tokens": list(range(n))}).encode()
        if n < 20:
            return Reply.json(_json.loads(body))
        r = Reply.sse([(1.0 * i, body[i:i + 1]) for i in range(len(body))])
        r.headers["Content-Type"] = "application/json"
        return r

    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /tokenize": tokenize,
                       "POST /v1/completions": Reply.sse([(0.02, sse_text("Hi")), (0.03, USAGE),
                                                          (0.04, sse_done())])})
    async with ProbeClient(srv.base_url, model="m", timeout=2) as c:
        await c.discover()
        assert c.info.has_tokenize
        t = time.perf_counter()
        r = await c.probe(200)
        first = time.perf_counter() - t
        t = time.perf_counter()
        r2 = await c.probe(300)
        second = time.perf_counter() - t
    assert r.ok and r2.ok, (r.error_message, r2.error_message)
    assert first < 3.0 and second < 1.0, (first, second)  # was: 30 s each
    assert "tokenize too slow" in c.notices


# ------------------------------------------------ labelled an event stream, and no stream

@pytest.mark.parametrize("body, kind, words", [
    (b"<html><head><title>502 Bad Gateway</title></head><body>upstream connect error or "
     b"disconnect/reset before headers</body></html>", "html_page", "502 Bad Gateway"),
    (b'{"error": {"message": "Rate limit exceeded for organization", "type": "rate_limit"}}',
     "protocol", "Rate limit exceeded for organization"),
])
async def test_a_page_or_error_labelled_text_event_stream_keeps_its_words(fake_server, body,
                                                                         kind, words):
    """A proxy's error page or a JSON error sent with ``Content-Type: text/event-stream``
    (the label of the route, not of the answer).  Before: no_token, "stream ended without
    a generated token (no [DONE])", the words lost."""
    reply = Reply(200, {"Content-Type": "text/event-stream"}, body)
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": reply})
    r, _, _ = await probe(srv)
    assert r.error_kind == kind and words in r.error_message, r.error_message


async def test_an_empty_content_part_in_the_role_chunk_is_not_the_token(fake_server):
    """Gateways that send chat content as parts open with
    ``{"role": "assistant", "content": [{"type": "text", "text": ""}]}`` at once; it
    was taken for the token (TTFT 0.01 s, before any prefill).  Parts with text, and
    thinking parts, still are."""
    role = sse_data({"choices": [{"index": 0, "delta": {
        "role": "assistant", "content": [{"type": "text", "text": ""}]}}]})
    tok = sse_data({"choices": [{"index": 0, "delta": {
        "content": [{"type": "thinking", "thinking": [{"type": "text", "text": "Hm"}]}]}}]})
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/chat/completions":
                       Reply.sse([(0.01, role), (0.2, tok), (0.21, USAGE), (0.22, sse_done())])})
    r, _, _ = await probe(srv, api="chat")
    assert r.ok and 0.19 <= r.ttft_s <= 0.4, (r.ttft_s, r.error_message)


async def test_responses_events_named_only_in_the_sse_event_field_are_read(fake_server):
    """A Responses API server that names each event in ``event:`` and leaves ``type``
    out of the data: no token was seen (no_token)."""
    def ev(name, obj):
        import json as _json

        return f"event: {name}\ndata: {_json.dumps(obj)}\n\n".encode()
    stream = [(0.01, ev("response.created", {"response": {"status": "in_progress"}})),
              (0.10, ev("response.output_text.delta", {"delta": "Hi"})),
              (0.11, ev("response.completed", {"response": {"status": "completed", "usage": {
                  "input_tokens": 12, "output_tokens": 1}}}))]
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       "POST /v1/responses": Reply.sse(stream)})
    r, _, _ = await probe(srv, api="responses")
    assert r.ok and 0.09 <= r.ttft_s <= 0.3 and r.prompt_tokens == 12, r.error_message
