"""Byte-exact SSE cases (a role-only first chunk, split reads, comments, errors inside a
200 stream, usage-only chunks) against a real loopback fake server."""

import pytest

from prefilltui.model.types import ProbeResult
from tests.fakeserver import Reply, llama_routes, models_reply, sse_data, sse_delta, sse_done, sse_text
from prefilltui.measure.probe import ProbeClient

USAGE = {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}}


async def run_probe(srv, api="completions", n=16, **kw):
    async with ProbeClient(srv.base_url, api=api, model="m", timeout=kw.pop("timeout", 10), **kw) as c:
        await c.warm()
        return await c.probe(n, prompt=kw.pop("prompt", "hello world"))


async def test_role_only_first_chunk_ttft_040(fake_server):
    srv = fake_server({"GET /v1/models": models_reply(), "POST /v1/chat/completions": Reply.sse([
        (0.0, sse_delta(role="assistant")), (0.40, sse_delta(content="Hi")),
        (0.41, sse_delta(finish="stop")), (0.42, sse_done())])})
    r = await run_probe(srv, api="chat")
    assert r.ok, r.error_message
    assert 0.39 <= r.ttft_s <= 0.55  # upper slack: a loaded 2-core test box
    assert r.ttfb_s < 0.2 and r.total_s >= r.ttft_s
    assert r.connect_s is None  # warm() opened the connection


async def test_split_reads_stamp_on_completing_read(fake_server):
    srv = fake_server({"GET /v1/models": models_reply(), "POST /v1/completions": Reply.sse([
        (0.0, b'data: {"choices":[{"text":"Hel'),
        (0.30, b'lo"}]}\n\ndata: {"choices":[{"text":" world"}]}\n\ndata: [DO'),
        (0.70, b"NE]\n\n")])})
    r = await run_probe(srv)
    assert r.ok, r.error_message
    assert 0.29 <= r.ttft_s <= 0.5  # the read at 0.30 completes the first event
    assert r.ttfb_s < 0.2
    # " world" is a second token for max_tokens 1: the cap was ignored, the stream is
    # closed at that read (a server that ignores the cap may never stop), not read on to [DONE] at 0.70
    assert "ignored max_tokens 1" in r.notes.cap_ignored
    assert 0.29 <= r.total_s < 0.6


async def test_comments_retry_id_ping(fake_server):
    srv = fake_server({"GET /v1/models": models_reply(), "POST /v1/completions": Reply.sse([
        (0.0, b":\n\n"), (0.05, b"retry: 3000\n\n"),
        (0.20, b"id: 7\n" + sse_text("ok")), (0.25, b": ping\n\n"),
        (0.50, sse_text("!")), (0.51, sse_done())])})
    r = await run_probe(srv)
    assert r.ok and r.error_kind is None
    assert 0.19 <= r.ttft_s <= 0.4


async def test_error_inside_200_stream(fake_server):
    srv = fake_server({"GET /v1/models": models_reply(), "POST /v1/completions": Reply.sse([
        (0.0, sse_text("The")), (0.05, sse_data({"error": {"message": "engine failure", "code": 500}})),
        (0.06, sse_done())])})
    r = await run_probe(srv)
    assert not r.ok and r.error_kind == "stream_error"
    assert r.error_message == "engine failure" and r.http_status == 200
    assert not r.fit_eligible


async def test_event_error_type(fake_server):
    srv = fake_server({"GET /v1/models": models_reply(), "POST /v1/completions": Reply.sse([
        (0.0, b'event: error\ndata: {"message":"overloaded"}\n\n')])})
    r = await run_probe(srv)
    assert r.error_kind == "stream_error" and r.error_message == "overloaded"


async def test_usage_only_chunk_does_not_move_ttft(fake_server):
    srv = fake_server({"GET /v1/models": models_reply(), "POST /v1/completions": Reply.sse([
        (0.10, sse_text("Hi")), (0.50, sse_data(USAGE)), (0.51, sse_done())])})
    r = await run_probe(srv)
    assert r.ok and r.prompt_tokens == 12 and r.prompt_tokens_source == "usage"
    assert 0.09 <= r.ttft_s <= 0.3 and r.total_s >= 0.49


@pytest.mark.parametrize("status,body", [
    (500, {"error": {"message": "Context size has been exceeded."}}),
    (400, {"error": {"type": "exceed_context_size_error", "n_prompt_tokens": 4390, "n_ctx": 4096,
                     "message": "request exceeds the available context size"}}),
    (400, {"object": "error", "message": "This model's maximum context length is 4096 tokens. "
           "However, you requested 4390 tokens (4389 in the messages, 1 in the completion)."}),
])
async def test_context_length(fake_server, status, body):
    srv = fake_server({"GET /v1/models": models_reply(),
                       "POST /v1/completions": Reply.json(body, status=status)})
    r = await run_probe(srv)
    assert r.error_kind == "context_length" and r.http_status == status
    if status == 400:
        assert "4390 > 4096" in r.error_message and r.notes.n_ctx == 4096


async def test_rate_limited_retry_after(fake_server):
    srv = fake_server({"GET /v1/models": models_reply(), "POST /v1/completions": Reply.json(
        {"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "7"})})
    r = await run_probe(srv)
    assert r.error_kind == "rate_limited" and r.retry_after_s == 7.0 and "slow down" in r.error_message


async def test_http_error_and_no_token_and_protocol(fake_server):
    srv = fake_server({"GET /v1/models": models_reply(),
                       "POST /v1/completions": Reply.json({"error": {"message": "bad model"}}, status=404)})
    r = await run_probe(srv)
    assert r.error_kind == "http" and "bad model" in r.error_message
    srv.set("POST /v1/completions", Reply.sse([(0, sse_text("", finish="length")), (0.01, sse_done())]))
    r = await run_probe(srv)
    assert r.error_kind == "no_token"
    srv.set("POST /v1/completions", Reply.sse([(0, b"data: {not json\n\n"), (0.01, sse_done())]))
    r = await run_probe(srv)
    assert r.error_kind == "protocol"
    srv.set("POST /v1/completions", Reply.json({"choices": [{"text": "x"}]}))
    r = await run_probe(srv)
    # one JSON completion for stream: true: the whole answer at the end, TTFT unknown
    assert r.error_kind == "buffered" and "did not stream" in r.error_message
    assert r.ttft_s is None and r.arrival_s > 0
    srv.set("POST /v1/completions", Reply.sse([(0, sse_text("x"))], truncate=True))
    r = await run_probe(srv)
    assert not r.ok and r.error_kind in ("protocol", "connect")


async def test_timeout_and_size_caps(fake_server, monkeypatch):
    srv = fake_server({"GET /v1/models": models_reply(), "POST /v1/completions": Reply.sse([
        (0.0, b": wait\n\n"), (3.0, sse_text("late"))])})
    r = await run_probe(srv, timeout=0.5)
    assert r.error_kind == "timeout" and "first token" in r.error_message
    import prefilltui.measure.probe.stream as probe_mod
    monkeypatch.setattr(probe_mod, "MAX_STREAM_BYTES", 1000)
    srv.set("POST /v1/completions", Reply.sse([(0.0, b": " + b"x" * 2000 + b"\n\n"), (0.1, sse_text("x"))]))
    r = await run_probe(srv)
    assert r.error_kind == "protocol" and "cut off" in r.error_message


async def test_connect_refused():
    async with ProbeClient("http://127.0.0.1:9", timeout=3) as c:
        r = await c.probe(8, prompt="x")
    assert r.error_kind == "connect" and not r.ok


async def test_connect_time_recorded_and_excluded(fake_server):
    srv = fake_server({"POST /v1/completions": Reply.sse([(0.2, sse_text("x")), (0.21, sse_done())])})
    async with ProbeClient(srv.base_url, timeout=5) as c:
        r = await c.probe(8, prompt="x")  # no warm(): a new connection
    assert r.ok and r.connect_s is not None and r.connect_s < 0.2
    assert 0.19 <= r.ttft_s <= 0.35


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_base_url_with_or_without_v1(fake_server, suffix):
    srv = fake_server({"GET /v1/models": models_reply("mm"), "POST /v1/completions": Reply.sse([
        (0.0, sse_text("x")), (0.01, sse_done())])})
    async with ProbeClient(srv.base_url + suffix, timeout=5) as c:
        info = await c.discover()
        r = await c.probe(8, prompt="x")
    assert r.ok and info.model == "mm" and info.base_url == srv.base_url
    assert srv.requests[-1].path == "/v1/completions" and srv.requests[-1].json["model"] == "mm"


async def test_llama_cpp_body_timings_and_cache(fake_server):
    routes = llama_routes()
    routes["POST /v1/completions"] = Reply.sse([
        (0.05, sse_text("x")),
        (0.06, sse_data({"choices": [{"text": "", "finish_reason": "length"}],
                         "timings": {"cache_n": 3, "prompt_n": 97, "prompt_ms": 31.5}})),
        (0.07, sse_done())])
    srv = fake_server(routes)
    async with ProbeClient(srv.base_url, timeout=5) as c:
        info = await c.discover()
        r = await c.probe(8, prompt="x")
    assert info.kind == "llama.cpp" and info.context_tokens == 4096 and info.hidden == 576
    body = srv.requests[-1].json
    assert body["cache_prompt"] is False and body["max_tokens"] == 1 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert r.prompt_tokens == 100 and r.cached_tokens == 3 and r.cache_hit
    assert r.server_prefill_s == pytest.approx(0.0315) and not r.fit_eligible


async def test_rejected_optional_field_is_dropped(fake_server):
    def complete(req):
        if "stream_options" in req.json:
            return Reply.json({"error": {"message": "Unknown field: stream_options"}}, status=422)
        return Reply.sse([(0, sse_text("x")), (0.01, sse_done())])
    srv = fake_server({"GET /v1/models": models_reply(), "POST /v1/completions": complete})
    async with ProbeClient(srv.base_url, timeout=5) as c:
        r1 = await c.probe(8, prompt="x")
        r2 = await c.probe(8, prompt="x")
    # resent at once without the field; later probes never send it
    assert r1.ok and r1.notes.rejected_field.field == "stream_options"
    assert r2.ok and r2.notes.rejected_field is None
    sent = [q.json for q in srv.requests if q.method == "POST"]
    assert ["stream_options" in b for b in sent] == [True, False, False]


async def test_api_key_sent_but_not_in_repr_or_errors(fake_server):
    key = "sk-abc-123-SECRET"
    srv = fake_server({"GET /v1/models": models_reply(), "POST /v1/completions": Reply.json(
        {"error": {"message": f"invalid key {key}"}}, status=401)})
    async with ProbeClient(srv.base_url, api_key=key, timeout=5) as c:
        r = await c.probe(8, prompt="x")
        assert key not in repr(c)
    assert srv.requests[-1].headers["authorization"] == f"Bearer {key}"
    assert r.error_kind == "http" and key not in r.error_message and "***" in r.error_message
    assert key not in str(r.to_json())


async def test_chat_tool_call_counts_as_token(fake_server):
    srv = fake_server({"GET /v1/models": models_reply(), "POST /v1/chat/completions": Reply.sse([
        (0.0, sse_delta(role="assistant", content="")),
        (0.15, sse_delta(tool_calls=[{"index": 0, "id": "c1", "function": {"name": "f"}}])),
        (0.2, sse_done())])})
    r = await run_probe(srv, api="chat")
    assert r.ok and 0.14 <= r.ttft_s <= 0.3
    assert srv.requests[-1].json["messages"] == [{"role": "user", "content": "hello world"}]


async def test_stale_keepalive_connection_is_resent_once_not_failed(fake_server):
    # The server closes the warmed keep-alive connection without answering (as
    # llama-server does after some streamed responses): the probe is resent once on
    # a new connection, whose connect time stays out of TTFT.
    srv = fake_server({"GET /v1/models": models_reply(), "POST /v1/completions": [
        Reply(drop=True), Reply.sse([(0.05, sse_text("Hi")), (0.06, sse_done())])]})
    r = await run_probe(srv)
    assert r.ok, r.error_message
    assert r.notes.resent_on_stale_connection is True
    posts = [q for q in srv.requests if q.method == "POST"]
    assert len(posts) == 2
    # one request id for both sends, the resend recorded with its reason
    rid = r.notes.request_id
    assert [q.headers["x-request-id"] for q in posts] == [rid, rid]
    assert len(r.notes.resends) == 1 and "stale connection" in r.notes.resends[0].reason
    assert r.notes.resends[0].resend_error is None
    assert r.connect_s is not None and r.notes.connect_excluded
    # the run file keeps them under extra, and reads them back
    back = ProbeResult.from_json(r.to_json())
    assert back.notes.request_id == rid and back.notes.resends == r.notes.resends
    assert 0.04 <= r.ttft_s < 0.5


async def test_a_resend_that_fails_is_still_recorded(fake_server):
    """Dropped twice: the probe fails, and its record still says it was sent twice."""
    srv = fake_server({"GET /v1/models": models_reply(), "POST /v1/completions": [
        Reply(drop=True), Reply(drop=True)]})
    r = await run_probe(srv)
    assert not r.ok and r.error_kind == "protocol"
    assert sum(q.method == "POST" for q in srv.requests) == 2
    assert len(r.notes.resends) == 1 and r.notes.resends[0].resend_error


async def test_each_probe_has_its_own_request_id(fake_server):
    srv = fake_server({"GET /v1/models": models_reply(), "POST /v1/completions": Reply.sse([
        (0.0, sse_text("Hi")), (0.01, sse_done())])})
    async with ProbeClient(srv.base_url, timeout=5) as c:
        a, b = await c.probe(8, prompt="x"), await c.probe(8, prompt="x")
    ids = [q.headers["x-request-id"] for q in srv.requests if q.method == "POST"]
    assert ids == [a.notes.request_id, b.notes.request_id] and ids[0] != ids[1]
    assert ids[0].startswith("prefilltui-") and not a.notes.resends
