"""The field's server kinds without a handed input, each against a fake server of it:
a stream under another content type, redirected POSTs, compressed streams, buffered
answers, hidden tokens, models that cannot generate, the Responses API, HTML sign-in
pages, and hostile servers (no probe outlives its timeout)."""

from __future__ import annotations

import json
import time
import zlib

import brotli
import pytest

from tests.fakeserver import Reply, models_reply, sse_data, sse_delta, sse_done, sse_text
from prefilltui.cli import main
from prefilltui.measure.probe import ProbeClient
from prefilltui.measure.proxy import choose_proxy

USAGE = sse_data({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 1}})
STREAM = [(0.10, sse_text("Hi")), (0.11, sse_text("", finish="length")), (0.12, USAGE),
          (0.13, sse_done())]


async def probe(srv, *, api="completions", discover=True, **kw):
    async with ProbeClient(srv.base_url, api=api, model=kw.pop("model", "m"),
                           timeout=kw.pop("timeout", 5), **kw) as c:
        if discover:
            await c.discover()
        await c.warm()
        t = time.perf_counter()
        r = await c.probe(16, prompt="hello world")
        return r, c, time.perf_counter() - t


# ------------------------------------------------ a valid stream under another content type

@pytest.mark.parametrize("ctype", ["application/json", "text/plain; charset=utf-8", None])
async def test_sse_labelled_otherwise_is_read_as_sse(fake_server, ctype):
    reply = Reply.sse(STREAM)
    if ctype is None:
        del reply.headers["Content-Type"]
    else:
        reply.headers["Content-Type"] = ctype
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": reply})
    r, c, _ = await probe(srv)
    assert r.ok and 0.09 <= r.ttft_s <= 0.3 and r.prompt_tokens == 12, r.error_message
    assert r.notes.content_type == (ctype or "(none)")
    assert any(k.startswith("stream labelled") for k in c.notices)


# ------------------------------------------------ redirected POSTs

@pytest.mark.parametrize("status", [307, 308])
async def test_307_308_are_followed_with_method_body_and_key_same_origin(fake_server, status):
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       "POST /v1/completions": Reply(status, {"Location": "/api/v1/completions"}),
                       "POST /api/v1/completions": Reply.sse(STREAM)})
    r, c, _ = await probe(srv, api_key="sk-test-123456789")
    assert r.ok and 0.09 <= r.ttft_s <= 0.3, r.error_message
    moved = [q for q in srv.requests if q.path == "/api/v1/completions"][-1]
    assert moved.method == "POST" and moved.json["prompt"] == "hello world"
    assert moved.headers["authorization"] == "Bearer sk-test-123456789"
    assert r.notes.redirected.status == status and "redirected" in c.notices


async def test_cross_origin_redirect_does_not_carry_the_key(fake_server):
    other = fake_server({"POST /v1/completions": Reply.sse(STREAM)})
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": Reply(
        307, {"Location": other.base_url + "/v1/completions"})})
    r, _, _ = await probe(srv, api_key="sk-test-123456789")
    assert r.ok, r.error_message
    assert "authorization" not in other.requests[-1].headers
    assert other.requests[-1].headers["host"] == other.base_url.split("//")[1]
    assert r.notes.redirected.key_sent is False


@pytest.mark.parametrize("status", [301, 302, 303])
async def test_a_redirect_that_would_turn_the_post_into_a_get_fails_clearly(fake_server, status):
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       "POST /v1/completions": Reply(status, {"Location": "/new/v1/completions"})})
    r, _, _ = await probe(srv)
    assert r.error_kind == "redirect" and "turns it into a GET" in r.error_message
    assert "/new/v1/completions" in r.error_message


async def test_a_redirect_loop_is_bounded(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       "POST /v1/completions": Reply(307, {"Location": "/v1/completions"})})
    r, _, wall = await probe(srv)
    assert r.error_kind == "redirect" and "more than 5 redirects" in r.error_message
    assert len([q for q in srv.requests if q.path == "/v1/completions"]) == 6 and wall < 3


# ------------------------------------------------ compressed streams

def _compressed(enc: str) -> Reply:
    """STREAM compressed as one stream, flushed after each event (as gateways do)."""
    if enc == "gzip":
        comp = zlib.compressobj(wbits=31)
    elif enc == "deflate":
        comp = zlib.compressobj()
    else:
        comp = brotli.Compressor()
    chunks = []
    for t, data in STREAM:
        if enc == "br":
            chunks.append((t, comp.process(data) + comp.flush()))
        else:
            chunks.append((t, comp.compress(data) + comp.flush(zlib.Z_SYNC_FLUSH)))
    chunks.append((0.14, comp.finish() if enc == "br" else comp.flush()))
    return Reply(200, {"Content-Type": "text/event-stream", "Content-Encoding": enc},
                 chunks=chunks)


@pytest.mark.parametrize("enc", ["gzip", "deflate", "br"])
async def test_a_compressed_stream_is_decoded_as_it_arrives(fake_server, enc):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": _compressed(enc)})
    r, c, _ = await probe(srv)
    assert r.ok and 0.09 <= r.ttft_s <= 0.3 and r.prompt_tokens == 12, r.error_message
    assert r.notes.content_encoding == enc and "compressed stream" in c.notices
    assert srv.requests[-1].headers["accept-encoding"] == "identity"


# ------------------------------------------------ buffered answers

ALL_AT_ONCE = Reply.sse([(0.5, sse_delta(role="assistant") + sse_delta(content="Hi")
                          + sse_delta(finish="length") + USAGE + sse_done())])


async def test_a_buffered_answer_has_no_ttft_and_stays_out_of_the_fit(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/chat/completions": ALL_AT_ONCE})
    r, c, _ = await probe(srv, api="chat")
    assert not r.ok and r.error_kind == "buffered" and not r.fit_eligible
    assert r.ttft_s is None and 0.49 <= r.arrival_s <= 0.8
    assert "TTFT cannot be known" in r.error_message and "proxy_buffering off" in r.error_message
    assert c.streaming == "unknown" and "buffered" in c.notices


def test_a_buffering_gateway_fails_the_sweep_with_the_kind_and_what_to_do(fake_server, tmp_path,
                                                                         capsys):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/chat/completions": ALL_AT_ONCE})
    rc = main(["sweep", srv.base_url, "--api", "chat", "--lengths", "50,100", "--warmup", "0",
               "--no-telemetry", "--out", str(tmp_path / "r.jsonl")])
    err = capsys.readouterr().err
    assert rc == 3 and "every probe failed (buffered" in err and "proxy_buffering off" in err


async def test_a_coalescing_but_streaming_path_keeps_its_probes(fake_server):
    """The one-token answer comes in one read, but 8 tokens stream 10 ms apart: an
    unbuffered proxy coalesced it; the probe stands."""
    def reply(req):
        if req.json["max_tokens"] == 8:
            return Reply.sse([(0.05 + 0.01 * i, sse_text(f" t{i}")) for i in range(8)]
                             + [(0.2, sse_done())])
        return Reply.sse([(0.2, sse_text("Hi", finish="length") + USAGE + sse_done())])
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": reply})
    r, c, _ = await probe(srv)
    assert r.ok and c.streaming == "streams" and r.notes.token_with_end
    assert 0.19 <= r.ttft_s <= 0.4


# ------------------------------------------------ the generated token is not visible text

@pytest.mark.parametrize("delta,channel", [
    ({"reasoning_content": "Let"}, "reasoning"), ({"reasoning": "Hmm"}, "reasoning"),
    ({"thinking": "So"}, "reasoning"),
    ({"tool_calls": [{"index": 0, "function": {"name": "f"}}]}, "tool_call")])
async def test_a_hidden_channel_token_is_timed_and_labelled(fake_server, delta, channel):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/chat/completions": Reply.sse([
        (0.02, sse_delta(role="assistant")), (0.10, sse_delta(**delta)),
        (0.11, sse_delta(finish="length")), (0.12, USAGE), (0.13, sse_done())])})
    r, c, _ = await probe(srv, api="chat")
    assert r.ok and 0.09 <= r.ttft_s <= 0.3 and r.notes.token_channel == channel
    assert "token not text" in c.notices


async def test_a_token_only_counted_is_timed_at_the_first_event_of_the_answer(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/chat/completions": Reply.sse([
        (0.02, sse_delta(role="assistant")), (0.10, sse_delta(content="", finish="length")),
        (0.30, USAGE), (0.31, sse_done())])})
    r, c, _ = await probe(srv, api="chat")
    assert r.ok and r.notes.token_channel == "hidden", r.error_message
    assert 0.09 <= r.ttft_s <= 0.25  # the finish event at 0.10, not the usage at 0.30
    assert "counted by the server" in c.notices["token not text"]


# ------------------------------------------------ several models, some cannot generate

async def test_discovery_picks_a_model_that_generates_and_says_which_to_pass(fake_server):
    srv = fake_server({"GET /v1/models": Reply.json({"data": [
        {"id": "BAAI/bge-m3"}, {"id": "bge-reranker-v2-m3"}, {"id": "x", "type": "embedding"},
        {"id": "Qwen2.5-7B-Instruct"}]})})
    async with ProbeClient(srv.base_url) as c:
        info = await c.discover()
    assert info.model == "Qwen2.5-7B-Instruct" and len(info.models) == 4
    assert "pass --model NAME" in c.notices["model Qwen2.5-7B-Instruct"]


async def test_only_embedding_models_listed_names_them_and_the_flag(fake_server):
    srv = fake_server({"GET /v1/models": Reply.json({"data": [{"id": "text-embedding-3-small"},
                                                              {"id": "jina-reranker-v2"}]}),
                       "POST /v1/completions": Reply.json(
                           {"error": {"message": "This model does not support completions"}},
                           status=400)})
    async with ProbeClient(srv.base_url, timeout=5) as c:
        await c.discover()
        r = await c.probe(16, prompt="hello world")
    assert "looks unable to generate" in next(iter(c.notices.values()))
    assert r.error_kind == "http" and "jina-reranker-v2: pass --model NAME" in r.error_message


# ------------------------------------------------ the Responses API only

def responses_stream(req):
    b = req.json
    if b.get("max_output_tokens", 0) < 16:
        return Reply.json({"error": {"message": "Invalid 'max_output_tokens': integer below "
                                     "minimum value. Expected a value >= 16, but got 1.",
                                     "param": "max_output_tokens"}}, status=400)
    ev = lambda o: (b"event: " + o["type"].encode() + b"\n" + sse_data(o))  # noqa: E731
    return Reply.sse([
        (0.02, ev({"type": "response.created", "response": {"status": "in_progress"}})),
        (0.10, ev({"type": "response.output_text.delta", "delta": "Hi"})),
        (0.20, ev({"type": "response.output_text.delta", "delta": " there"})),
        (0.30, ev({"type": "response.completed", "response": {
            "status": "completed", "usage": {"input_tokens": 12, "output_tokens": 16}}}))])


async def test_a_responses_only_server_says_use_api_responses(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/responses": responses_stream})
    r, c, _ = await probe(srv)
    assert r.error_kind == "http" and r.http_status == 404
    assert "use --api responses" in r.error_message and "use --api responses" in c.notices


async def test_api_responses_probes_with_output_text_delta_events(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/responses": responses_stream})
    r, c, _ = await probe(srv, api="responses")
    assert r.ok and 0.09 <= r.ttft_s <= 0.3, r.error_message
    assert r.notes.rejected_field.replaced_by == "max_output_tokens: 16"
    assert r.prompt_tokens == 12 and r.prompt_tokens_source == "usage"  # response.completed
    assert 0.29 <= r.total_s <= 0.6 and r.notes.stream_end is None
    assert srv.requests[-1].json["input"] == "hello world" and c.token_cap == 16


# ------------------------------------------------ an HTML sign-in page

PAGE = ("<!DOCTYPE html><html><head><title>Sign in \x1b[2J- Contoso SSO</title>"
        "<style>p{}</style></head><body><h1>Sign in</h1><p>Use your corporate account "
        "to continue.</p><script>x()</script></body></html>")


@pytest.mark.parametrize("status,headers", [(200, {}), (401, {}),
                                            (302, {"Location": "https://sso.example/login"})])
async def test_an_html_sign_in_page_fails_with_its_words_and_what_to_do(fake_server, status,
                                                                        headers):
    reply = Reply(status, {"Content-Type": "text/html; charset=utf-8", **headers}, PAGE.encode())
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": reply})
    r, _, _ = await probe(srv)
    assert r.error_kind == "html_page" and not r.ok
    assert "a sign-in page" in r.error_message and "Contoso SSO" in r.error_message
    assert "Use your corporate account to continue." in r.error_message
    assert "x()" not in r.error_message and "--api-key-env" in r.error_message
    if status == 302:
        assert "sso.example/login" in r.error_message


# ------------------------------------------------ hostile and broken servers

async def test_no_probe_outlives_its_timeout(fake_server):
    """Comments every 50 ms forever, never a token: the probe ends at its timeout."""
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": Reply.sse(
        [(0.05 * i, b": busy\n\n") for i in range(400)])})
    r, _, wall = await probe(srv, timeout=1.0)
    assert r.error_kind == "timeout" and wall < 2.0


async def test_a_token_then_silence_is_closed_after_the_tail(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": Reply.sse(
        [(0.10, sse_text("Hi"))] + [(0.5 * i, b": wait\n\n") for i in range(1, 40)])})
    r, _, wall = await probe(srv, timeout=30)
    assert r.ok and 0.09 <= r.ttft_s <= 0.3 and wall < 2.0
    assert "closed by the client" in r.notes.stream_end


def test_no_proxy_rules():
    env = {"HTTPS_PROXY": "proxy:3128", "NO_PROXY": "internal.example,10.0.0.0/8,.corp:8443"}
    assert choose_proxy("https://api.example", environ=env).url == "http://proxy:3128"
    assert choose_proxy("https://a.internal.example", environ=env).url is None
    assert choose_proxy("http://10.1.2.3:8000", environ=env).url is None
    assert choose_proxy("https://x.corp:8443", environ=env).url is None
    assert choose_proxy("https://x.corp", environ=env).url == "http://proxy:3128"
    assert choose_proxy("http://localhost:8000", environ=env).source == "loopback"
    assert choose_proxy("http://[::1]:8000", environ=env).url is None
    assert choose_proxy("http://h", environ={"ALL_PROXY": "socks5://p:1080"}).url == "socks5://p:1080"
    assert choose_proxy("http://h", "none", environ={"HTTP_PROXY": "p:1"}).url is None
    assert json.dumps(choose_proxy("http://h", environ={}).url) == "null"
