"""Held-out variants of the field's server kinds: HTML pages that do not start with
``<!doctype html``, a Responses-only server whose web server answers the old paths with
its own HTML 404, rejections worded as serde and plain-English messages, and model
lists whose first model cannot generate under a name no word list knows."""

from __future__ import annotations

import json

import pytest

from tests.fakeserver import Reply, models_reply, sse_data, sse_done, sse_text
from prefilltui.cli import main
from prefilltui.measure.probe import ProbeClient
from prefilltui.measure.server_models import cannot_generate

STREAM = [(0.05, sse_text("Hi")), (0.06, sse_text("", finish="length")),
          (0.07, sse_data({"choices": [], "usage": {"prompt_tokens": 12,
                                                    "completion_tokens": 1}})),
          (0.08, sse_done())]


async def probe(srv, n=1, **kw):
    async with ProbeClient(srv.base_url, model=kw.pop("model", "m"), timeout=5, **kw) as c:
        await c.discover()
        out = [await c.probe(16, prompt="hello world") for _ in range(n)]
        return out, c


# ------------------------------------------------ HTML pages of every opening

@pytest.mark.parametrize("ctype, page", [
    ("application/json", "\ufeff<!DOCTYPE html><html><head><title>Sign in</title></head>"
                         "<body>Please log in to continue</body></html>"),
    ("", "<!-- gateway 7 --><head><title>Access portal</title></head><body><form>Username"
         "</form></body>"),
    ("application/octet-stream", '<?xml version="1.0"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD '
     'XHTML 1.0 Strict//EN" "x"><HTML><HEAD><TITLE>Sign in</TITLE></HEAD><BODY>Log in'
     "</BODY></HTML>"),
    ("text/plain", "\n\n  <title>Sign in</title><p>Log in with your company account</p>"),
])
async def test_an_html_page_under_any_label_or_opening_is_a_page(fake_server, ctype, page):
    reply = Reply(200, {"Content-Type": ctype} if ctype else {}, page.encode())
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": reply})
    (r,), _ = await probe(srv)
    assert r.error_kind == "html_page", r.error_message  # was: protocol, no words
    assert "a sign-in page" in r.error_message and "Sign in" in r.error_message \
        or "Access portal" in r.error_message
    assert "\ufeff" not in r.error_message


async def test_a_responses_only_server_behind_an_html_404_says_use_api_responses(fake_server):
    """The web server in front answers /v1/completions with its own HTML 404 page; the
    hint was lost because the HTML branch returned before it."""
    page = Reply(404, {"Content-Type": "text/html"},
                 b"<html><head><title>404 Not Found</title></head><body><center>nginx"
                 b"</center></body></html>")
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": page,
                       "POST /v1/responses": Reply.json({"error": {"message": "input"}}, 400)})
    (r,), c = await probe(srv)
    assert r.error_kind == "html_page" and "use --api responses" in r.error_message
    assert "use --api responses" in c.notices


async def test_a_400_that_names_the_responses_api_gets_the_hint(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/chat/completions":
                       Reply.json({"error": {"message": "This model is only supported in "
                                             "v1/responses and not in v1/chat/completions."}},
                                  400),
                       "POST /v1/responses": Reply.json({"error": {"message": "input"}}, 400)})
    (r,), c = await probe(srv, api="chat")
    assert "use --api responses" in r.error_message and "use --api responses" in c.notices


# ------------------------------------------------ rejections in other wordings

def rejects(field: str, message: str, status: int = 422, text: bool = True):
    def reply(req):
        if field in req.json:
            return (Reply.text(message, status) if text
                    else Reply.json({"detail": message}, status))
        return Reply.sse(STREAM)
    return reply


async def test_a_rejection_listing_the_expected_fields_drops_the_one_it_names_first(fake_server):
    """serde's "unknown field `ignore_eos`, expected one of ..., `stream_options`": the
    first probe was lost (stream_options dropped, the same answer, then given up)."""
    msg = ("Failed to deserialize the JSON body into the target type: unknown field "
           "`ignore_eos`, expected one of `model`, `prompt`, `max_tokens`, `temperature`, "
           "`stream`, `stream_options` at line 1 column 80")
    srv = fake_server({"GET /v1/models": models_reply("m"), "GET /version": Reply.json({}),
                       "GET /metrics": Reply.text("vllm:num_requests_running 0\n"),
                       "POST /v1/completions": rejects("ignore_eos", msg)})
    rs, c = await probe(srv, n=3)
    assert [r.ok for r in rs] == [True, True, True], rs[0].error_message
    assert rs[0].notes.rejected_field.field == "ignore_eos"
    assert len([q for q in srv.requests if q.path == "/v1/completions"]) == 4  # 1 rejected
    assert "sent without ignore_eos" in c.notices and "sent without stream_options" not in c.notices


@pytest.mark.parametrize("message", [
    "Bad request: the parameter max tokens is not supported; use max completion tokens",
    "Max Tokens: unsupported for this deployment",
])
async def test_max_tokens_rejected_in_plain_words_is_replaced(fake_server, message):
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       "POST /v1/completions": rejects("max_tokens", message, 400)})
    rs, c = await probe(srv, n=2)
    assert all(r.ok for r in rs), rs[0].error_message  # was: every probe failed
    assert json.loads(srv.requests[-1].body)["max_completion_tokens"] == 1


# ------------------------------------------------ the first listed model cannot generate

def acme_routes():
    def complete(req):
        model = req.json.get("model")
        if model != "acme-chat-8b":
            return Reply.json({"error": {"message": f"The model `{model}` does not support "
                                                    "the completions endpoint"}}, 400)
        return Reply.sse(STREAM)
    return {"GET /v1/models": Reply.json({"data": [{"id": "acme-retriever-v2"},
                                                   {"id": "acme-ranker"},
                                                   {"id": "acme-chat-8b"}]}),
            "POST /v1/completions": complete}


def test_a_refused_first_model_is_swapped_for_the_next_listed_that_answers(fake_server,
                                                                          tmp_path, capsys):
    """No name says the first two cannot generate; the server's 400 does.  Before:
    every probe failed (exit 3) with a hint to pass --model."""
    srv = fake_server(acme_routes())
    out = tmp_path / "run.jsonl"
    rc = main(["sweep", srv.base_url, "--lengths", "50,100,200", "--repeats", "1",
               "--warmup", "0", "--no-telemetry", "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "model acme-chat-8b" in cap.out and "probes ok 3, failed 0" in cap.out
    assert "probing acme-chat-8b, the next listed model that answers" in cap.out
    lines = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert {ln["model"] for ln in lines if "ok" in ln and not ln.get("record")} == {"acme-chat-8b"}


async def test_a_model_given_with_model_is_never_swapped(fake_server):
    srv = fake_server(acme_routes())
    rs, c = await probe(srv, n=2, model="acme-retriever-v2")
    assert [r.error_kind for r in rs] == ["http", "http"] and c.model == "acme-retriever-v2"


@pytest.mark.parametrize("mid", ["gpt-4o-transcribe", "sora-2", "gpt-realtime", "voyage-3-large",
                                 "google/embeddinggemma-300m", "dall-e-3", "mistral-ocr-latest",
                                 "stabilityai/stable-diffusion-xl-base-1.0", "colpali-v1.3"])
def test_more_models_that_cannot_generate_are_known_by_name(mid):
    assert cannot_generate({"id": mid}) is not None


@pytest.mark.parametrize("mid", ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct",
                                 "gpt-4o-mini-search-preview", "gpt-oss-120b", "stellar-7b",
                                 "Clipper-7B", "deepseek-ai/DeepSeek-R1"])
def test_models_that_generate_are_not_passed_over(mid):
    assert cannot_generate({"id": mid}) is None


# ------------------------------------------------ numbers no count can be

async def test_a_completion_count_of_thousands_of_digits_is_no_count(fake_server):
    huge = b'data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":' + b"9" * 4000 \
        + b"}}\n\n"
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": Reply.sse(
        [(0.05, sse_text("Hi")), (0.06, huge), (0.07, sse_done())])})
    (r,), c = await probe(srv)
    assert r.ok and r.notes.cap_ignored is None  # was: a 4,000-digit "usage says ..." note
    assert all(len(v) < 1000 for v in c.notices.values())


# ------------------------------------------------ sizes no name or label can have

def test_a_model_id_of_megabytes_is_skipped_not_copied_everywhere(fake_server, tmp_path, capsys):
    """A 3 MB "model id": before, every run-file line and request repeated it (30 MB for
    7 probes) and the summary printed it (3 MB)."""
    def complete(req):
        n = len(req.json["prompt"].split())
        return Reply.sse([(0.02, sse_text("Hi")), (0.03, sse_data(
            {"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": 1}})),
            (0.04, sse_done())])
    srv = fake_server({"GET /v1/models": Reply.json({"data": [{"id": "m" * 3_000_000}]}),
                       "POST /v1/completions": complete})
    out = tmp_path / "run.jsonl"
    rc = main(["sweep", srv.base_url, "--lengths", "50,100,200", "--repeats", "1",
               "--warmup", "0", "--no-telemetry", "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert len(cap.out) < 20_000 and out.stat().st_size < 50_000
    assert "over 1,024 characters skipped" in cap.out
    assert all(len(q.body) < 10_000 for q in srv.requests)


async def test_a_header_of_kilobytes_is_kept_short_in_every_note(fake_server):
    reply = Reply.sse(STREAM)
    reply.headers["Content-Type"] = "application/json; x=" + "y" * 8000
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": reply})
    (r,), c = await probe(srv)
    assert r.ok and len(r.notes.content_type) <= 201
    assert all(len(k) < 300 and len(v) < 600 for k, v in c.notices.items())


@pytest.mark.parametrize("field, event", [
    ("stream_options", sse_data({"error": {"message": "Unrecognized request argument supplied: "
                                                      "stream_options", "code": 400}})),
    ("max_tokens", b"event: error\ndata: " + json.dumps({"error": {
        "message": "Unsupported parameter: 'max_tokens'. Use 'max_completion_tokens' instead.",
        "param": "max_tokens", "code": "unsupported_parameter"}}).encode() + b"\n\n"),
])
async def test_a_rejection_sent_inside_a_200_stream_is_a_rejection(fake_server, field, event):
    """A gateway answers 200 and puts the 400 in the stream before any token.  Before:
    every probe failed as stream_error."""
    def complete(req):
        if field in req.json:
            return Reply.sse([(0.01, event), (0.02, sse_done())])
        return Reply.sse(STREAM)
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": complete})
    rs, c = await probe(srv, n=2)
    assert all(r.ok for r in rs), rs[0].error_message
    assert rs[0].notes.rejected_field.field == field
    assert field not in json.loads(srv.requests[-1].body)


# ------------------------------------------------ this machine under any name goes direct

@pytest.mark.parametrize("host", ["0.0.0.0", "127.1", "[::ffff:127.0.0.1]", "[::]"])
def test_this_machine_under_any_spelling_is_never_proxied(host):
    """vLLM and uvicorn print "running on http://0.0.0.0:8000": pasted with HTTP_PROXY
    set, the probes went to the proxy, which cannot reach the user's own machine."""
    from prefilltui.measure.proxy import choose_proxy

    c = choose_proxy(f"http://{host}:8000/v1", None, {"HTTP_PROXY": "http://proxy.corp:3128"})
    assert c.url is None and c.source == "loopback"
    assert choose_proxy("http://10.0.0.7:8000", None,
                        {"HTTP_PROXY": "http://proxy.corp:3128"}).url == "http://proxy.corp:3128"


def test_a_sweep_of_0_0_0_0_with_a_proxy_set_goes_direct(fake_server, tmp_path, capsys,
                                                          monkeypatch):
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       "POST /v1/completions": Reply.sse(STREAM)})
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    rc = main(["sweep", srv.base_url.replace("127.0.0.1", "0.0.0.0"), "--lengths", "50,100",
               "--repeats", "1", "--warmup", "0", "--no-telemetry",
               "--out", str(tmp_path / "run.jsonl")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "probes ok 2, failed 0" in cap.out and "via proxy" not in cap.out


# ------------------------------------------------ /metrics readings no server can have

@pytest.mark.parametrize("reading", ["1e308", "-5", "NaN", "+Inf"])
def test_a_gauge_no_server_can_read_is_not_a_count_of_requests(reading):
    """``vllm:num_requests_running 1e308`` was shown as "[1e+308 running, 1e+308
    waiting]" on every probe line and read as a busy server."""
    from prefilltui.model import metrics as M

    text = (f'vllm:num_requests_running{{model_name="m"}} {reading}\n'
            f'vllm:num_requests_waiting{{model_name="m"}} {reading}\n')
    before = M.parse_metrics(text, "vllm", t=0.0)
    after = M.parse_metrics(text, "vllm", t=1.0)
    d = M.delta(before, after)
    assert d.gauge("running") is None and d.gauge("waiting") is None
    ok = M.delta(M.parse_metrics('vllm:num_requests_running{model_name="m"} 3\n', "vllm", t=0),
                 M.parse_metrics('vllm:num_requests_running{model_name="m"} 2\n', "vllm", t=1))
    assert ok.gauge("running") == 3
