"""Streams as real servers and gateways send them: the end of a probe, rejected
optional fields, prompt lengths on any server, and API-key scrubbing that leaves
the server's words alone.  (TTFT at any byte split: test_sse_split.py.)"""

from __future__ import annotations

import json
import time

import pytest

from tests.fakeserver import Reply, llama_routes, models_reply, sse_data, sse_done, sse_text
from prefilltui.cli import main
from prefilltui.measure.probe import ProbeClient
from prefilltui.model.redact import scrub_secrets
from prefilltui.measure.runfile import read_run

LENGTHS = "50,100,200,400"


def words_of(req) -> int:
    return len(req.json["prompt"].split())


def usage_chunk(n: int) -> bytes:
    return sse_data({"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": 1}})


def word_tokenize(req):
    """vLLM-style ``POST /tokenize``: one token per word (as the fake servers count)."""
    if "prompt" not in req.json:
        return Reply.json({"error": "prompt is required"}, status=400)
    n = len(req.json["prompt"].split())
    return Reply.json({"count": n, "tokens": list(range(n))})


def sweep(srv_url, tmp_path, capsys, *extra, fmt="json"):
    out = tmp_path / "run.jsonl"
    rc = main(["sweep", srv_url, "--lengths", LENGTHS, "--warmup", "0", "--no-telemetry",
               "--out", str(out), "--format", fmt, *extra])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    return (json.loads(cap.out) if fmt == "json" else cap.out), cap, out


def fitted(d) -> int:
    """Probes that entered the fit (a robust fit may still reject an outlier)."""
    assert d["fit"] and d["fit"]["n"] >= 3
    return d["probes"]["fit_eligible"]


async def one_probe(srv, n=50, **kw):
    async with ProbeClient(srv.base_url, timeout=kw.pop("timeout", 8), **kw) as c:
        await c.discover()
        await c.warm()
        t = time.perf_counter()
        r = await c.probe(n)
        return r, time.perf_counter() - t


# ------------------------------------------------------------- TTFT at the completing read


async def test_crlf_event_ended_by_a_trailing_cr_is_stamped_at_0_10_not_0_40(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /tokenize": word_tokenize,
                       "POST /v1/completions": lambda req: Reply.sse([
                           (0.10, b'data: {"choices":[{"index":0,"text":"Hi"}]}\r\n\r'),
                           (0.40, b"\n" + usage_chunk(words_of(req)).replace(b"\n", b"\r\n")
                            + b"data: [DONE]\r\n\r\n")])})
    r, _ = await one_probe(srv)
    assert r.ok, r.error_message
    assert 0.09 <= r.ttft_s <= 0.3 and r.ttfb_s <= 0.3  # TTFT 0.10 s (was 0.402)
    assert r.total_s >= 0.39 and r.prompt_tokens == 50


# ------------------------------------------------------------- the end of a probe

KEEPALIVE_30S = [(0.12 + 0.5 * i, b": keep-alive\n\n") for i in range(1, 61)]


def done_then_keepalive(req):
    """[DONE] at 0.12 s, then `: keep-alive` every 0.5 s for 30 s."""
    return Reply.sse([(0.10, sse_text("Hi")), (0.11, usage_chunk(words_of(req))),
                      (0.12, sse_done())] + KEEPALIVE_30S)


def finished_then_comments(req):
    """Token, finish_reason and usage, then only comments (no [DONE]) for 30 s."""
    return Reply.sse([(0.10, sse_text("Hi", finish="length")), (0.11, usage_chunk(words_of(req)))]
                     + KEEPALIVE_30S)


def done_then_close(req):
    """`data: [DONE]` then the connection closes without the chunked terminator."""
    return Reply.sse([(0.10, sse_text("Hi")), (0.11, usage_chunk(words_of(req))),
                      (0.12, sse_done())], truncate=True)


ENDINGS = {"done_then_keepalive": (done_then_keepalive, "kept the stream open after [DONE]"),
           "finished_then_comments": (finished_then_comments,
                                      "kept the stream open after the finish_reason"),
           "done_then_close": (done_then_close, "without the chunked terminator")}


@pytest.mark.parametrize("name", list(ENDINGS))
async def test_what_follows_complete_data_never_fails_the_probe(fake_server, name):
    reply, note = ENDINGS[name]
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /tokenize": word_tokenize,
                       "POST /v1/completions": reply})
    r, wall = await one_probe(srv)
    assert r.ok, r.error_message
    assert 0.09 <= r.ttft_s <= 0.3  # TTFT 0.10 s
    assert r.prompt_tokens == 50 and r.prompt_tokens_source == "usage"
    assert r.total_s <= 0.35  # the data ended at 0.11-0.12 s
    assert wall < 2.0  # not the 8 s timeout, not the 30 s of comments
    assert note in r.notes.stream_end


async def test_an_error_after_the_finish_reason_is_a_note_not_a_failure(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /tokenize": word_tokenize,
                       "POST /v1/completions": lambda req: Reply.sse([
                           (0.10, sse_text("Hi", finish="length")),
                           (0.11, usage_chunk(words_of(req))),
                           (0.12, sse_data({"error": {"message": f"late failure {REAL_KEY}"}})),
                           (0.13, sse_done())])})
    r, _ = await one_probe(srv, api_key=REAL_KEY)
    assert r.ok and 0.09 <= r.ttft_s <= 0.3 and r.prompt_tokens == 50
    assert r.notes.after_complete == ["late failure ***"]


@pytest.mark.parametrize("name", list(ENDINGS))
def test_sweep_of_such_servers_has_4_of_4_and_a_fit(fake_server, tmp_path, capsys, name):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /tokenize": word_tokenize,
                       "POST /v1/completions": ENDINGS[name][0]})
    d, _, _ = sweep(srv.base_url, tmp_path, capsys)
    assert d["probes"]["ok"] == 4 and d["probes"]["failed"] == 0 and fitted(d) == 4


# ------------------------------------------------------------- rejected optional fields

GATEWAY_400 = {"error_code": "BAD_REQUEST", "message": "Bad request: ValidationException: "
               "extraneous key [include_usage] is not permitted"}


def gateway(req):
    """Rejects any request with stream_options; streams normally without it."""
    if "stream_options" in req.json:
        return Reply.json(GATEWAY_400, status=400)
    return Reply.sse([(0.002 + words_of(req) * 1e-5, sse_text("Hi")), (0.01, sse_done())])


def test_gateway_rejecting_a_sub_key_gives_4_of_4_and_says_so_once(fake_server, tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "x")  # a placeholder key must not mangle the message
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /tokenize": word_tokenize,
                       "POST /v1/completions": gateway})
    d, _, out = sweep(srv.base_url, tmp_path, capsys)
    assert d["probes"]["ok"] == 4 and d["probes"]["failed"] == 0 and fitted(d) == 4
    notes = [n for n in d["live"]["notes"] if "stream_options" in n]
    assert len(notes) == 1 and "ValidationException" in notes[0]
    posts = [q.json for q in srv.requests if q.path == "/v1/completions"]
    assert ["stream_options" in b for b in posts] == [True, False, False, False, False]
    back, _ = read_run(out)
    assert back[0].notes.rejected_field.field == "stream_options"
    text, _, _ = sweep(srv.base_url, tmp_path, capsys, fmt="text")
    assert text.count("rejected stream_options") == 1


@pytest.mark.parametrize("field,status,body", [
    ("stream_options", 422, {"error": {"message": "Unknown field: stream_options"}}),
    ("stream_options", 400, GATEWAY_400),
    ("stream_options", 400, {"message": "streamOptions.includeUsage is not allowed"}),
    ("ignore_eos", 422, {"detail": [{"type": "extra_forbidden", "loc": ["body", "ignore_eos"],
                                     "msg": "Extra inputs are not permitted"}]}),
    ("cache_prompt", 400, {"error": {"message": "unexpected property 'cache_prompt'"}}),
])
async def test_any_wording_naming_a_field_or_sub_key_drops_it(fake_server, field, status, body):
    def complete(req):
        if field in req.json:
            return Reply.json(body, status=status)
        return Reply.sse([(0.01, sse_text("Hi")), (0.02, sse_done())])
    routes = llama_routes() if field in ("ignore_eos", "cache_prompt") else {
        "GET /v1/models": models_reply("m")}
    routes["POST /v1/completions"] = complete
    srv = fake_server(routes)
    async with ProbeClient(srv.base_url, timeout=5) as c:
        await c.discover()
        r1, r2 = await c.probe(16), await c.probe(16)
        notices = dict(c.notices)
    assert r1.ok and r1.notes.rejected_field.field == field
    assert r2.ok and r2.notes.rejected_field is None
    assert f"sent without {field}" in notices


async def test_an_unrelated_400_is_not_retried(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": Reply.json(
        {"error": {"message": "model 'm' does not exist"}}, status=400)})
    async with ProbeClient(srv.base_url, timeout=5) as c:
        r = await c.probe(16, prompt="x y")
        assert not c.notices
    assert r.error_kind == "http" and sum(q.method == "POST" for q in srv.requests) == 1


async def test_a_400_that_only_quotes_the_field_is_not_taken_for_a_rejection(fake_server):
    echo = {"error": {"message": 'invalid request {"stream_options": {"include_usage": true}, '
                                 '"model": "nope"}: unknown model'}}
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       "POST /v1/completions": Reply.json(echo, status=400)})
    async with ProbeClient(srv.base_url, timeout=5) as c:
        r = await c.probe(16, prompt="x y")
        r2 = await c.probe(16, prompt="x y")
        assert not c.notices
    assert r.error_kind == "http" and r.notes.rejected_field is None
    posts = [q.json for q in srv.requests if q.method == "POST"]
    # one retry without it; the same answer, so the field stays, and is not retried again
    assert ["stream_options" in b for b in posts] == [True, False, True]
    assert r2.error_kind == "http"


# ------------------------------------------------------------- lengths on any server


def fake_count(text: str) -> int:
    """The fake servers' tokenizer: a BOS plus 1-3 tokens a word, by its length."""
    return 1 + sum(1 + len(w) // 5 for w in text.split())


def _text(req, key):
    try:
        return req.json[key]
    except (KeyError, TypeError):
        return None


TOKENIZE_STYLES = {
    "vllm": ("POST /tokenize", lambda req: None if _text(req, "prompt") is None else
             Reply.json({"count": fake_count(req.json["prompt"]), "max_model_len": 2048})),
    "sglang": ("POST /v1/tokenize", lambda req: None if _text(req, "prompt") is None else
               Reply.json({"tokens": [0] * fake_count(req.json["prompt"])})),
    "llama.cpp": ("POST /tokenize", lambda req: None if _text(req, "content") is None else
                  Reply.json({"tokens": [1] * fake_count(req.json["content"])})),
    "tgi": ("POST /tokenize", lambda req: None if _text(req, "inputs") is None else
            Reply.json([{"id": 1, "text": "t"}] * fake_count(req.json["inputs"]))),
}


@pytest.mark.parametrize("style", list(TOKENIZE_STYLES))
def test_tokenize_on_a_generic_server_puts_every_probe_within_2pct(fake_server, style):
    from prefilltui.measure.sweep import SweepRunner
    from prefilltui.measure.sweep import SweepConfig

    route, answer = TOKENIZE_STYLES[style]

    def tokenize(req):
        return answer(req) or Reply.json({"error": "bad request"}, status=400)

    def complete(req):
        n = fake_count(req.json["prompt"])
        return Reply.sse([(0.001, sse_text("Hi")), (0.002, usage_chunk(n)), (0.003, sse_done())])
    srv = fake_server({"GET /v1/models": models_reply("m"), route: tokenize,
                       "POST /v1/completions": complete})
    runner = SweepRunner(lambda: ProbeClient(srv.base_url, timeout=5),
                         SweepConfig([50, 400], warmup=0))
    runner.start()
    runner.join(30)
    info = runner.server_info
    assert info.kind == "openai" and info.has_tokenize and info.tokenize_url.endswith(route[5:])
    rs = list(runner.results)
    assert len(rs) == 2 and all(r.ok for r in rs)
    for r in rs:  # the first measured probe too (asked 400, not 333)
        assert abs(r.prompt_tokens - r.requested_tokens) <= 0.02 * r.requested_tokens
        assert r.prompt_tokens_source == "usage"
    if style == "vllm":
        assert info.context_tokens == 2048  # /tokenize's max_model_len


@pytest.mark.parametrize("later", [{"count": 10**30}, {"count": -4}, {"count": "many"},
                                   {"tokens": "abc"}, [1, "x"], "nonsense"])
async def test_a_nonsense_tokenize_count_never_becomes_a_length(fake_server, later):
    calls = {"n": 0}

    def tokenize(req):  # plausible during discovery, nonsense afterwards
        calls["n"] += 1
        if "prompt" not in req.json:
            return Reply.json({"error": "prompt is required"}, status=400)
        if calls["n"] <= 4:
            return Reply.json({"count": len(req.json["prompt"].split())})
        return Reply.json(later)
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /tokenize": tokenize,
                       "POST /v1/completions": Reply.sse([(0.01, sse_text("Hi")),
                                                          (0.02, sse_done())])})
    r, _ = await one_probe(srv, n=50)
    assert r.ok and r.prompt_tokens_source == "estimate" and 40 <= r.prompt_tokens <= 60


def test_without_tokenize_calibration_comes_before_the_first_probe(fake_server):
    from prefilltui.measure.sweep import SweepRunner
    from prefilltui.measure.sweep import SweepConfig

    def complete(req):  # one token a word plus a 3-token template
        return Reply.sse([(0.001, sse_text("Hi")), (0.002, usage_chunk(words_of(req) + 3)),
                          (0.003, sse_done())])
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": complete})
    runner = SweepRunner(lambda: ProbeClient(srv.base_url, timeout=5),
                         SweepConfig([400], warmup=0))
    runner.start()
    runner.join(30)
    (r,) = runner.results
    assert r.ok and abs(r.prompt_tokens - 400) <= 8  # uncalibrated: 336 (-16 %)


def test_no_count_at_all_still_fits_labelled_estimated(fake_server, tmp_path, capsys):
    def complete(req):  # no usage, no timings; no tokenize endpoint
        return Reply.sse([(0.002 + words_of(req) * 2e-5, sse_text("Hi", finish="length")),
                          (0.003, sse_done())])
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": complete})
    d, _, out = sweep(srv.base_url, tmp_path, capsys)
    assert d["probes"]["ok"] == 4 and d["probes"]["failed"] == 0
    assert fitted(d) == 4 and d["fit"]["lengths"] == "estimated"
    assert sum("estimates" in n for n in d["live"]["notes"] + d["notes"]) == 1
    back, _ = read_run(out)
    assert [r.prompt_tokens_source for r in back] == ["estimate"] * 4
    assert sorted(r.prompt_tokens for r in back) == [50, 100, 200, 400]
    text, _, _ = sweep(srv.base_url, tmp_path, capsys, fmt="text")
    assert "lengths are estimates" in text  # the note, once
    assert text.count("lengths are estimates") == 1
    assert "(50 estimated)" in text  # the progress line does not call it counted
    assert "Fit (robust, all-time, prompt lengths estimated)" in text
    # the run file says it too (two sweeps wrote to it: report them together)
    assert main(["report", str(out), "--no-plot", "--merge-sessions"]) == 0
    assert "prompt lengths estimated" in capsys.readouterr().out


def test_litellm_max_input_tokens_is_the_context(fake_server, tmp_path, capsys):
    srv = fake_server({"GET /v1/models": models_reply("m", max_input_tokens=8192),
                       "POST /v1/completions": lambda req: Reply.sse([
                           (0.001, sse_text("Hi")), (0.002, usage_chunk(words_of(req))),
                           (0.003, sse_done())])})
    text, _, _ = sweep(srv.base_url, tmp_path, capsys, fmt="text")
    assert "context 8192 tokens" in text


# ------------------------------------------------------------- API-key scrubbing

REAL_KEY = "sk-live-4f9a8B7c6d5e4f3a2b1c"


@pytest.mark.parametrize("key", ["x", "EMPTY", REAL_KEY])
def test_scrub_key_only_where_a_key_can_appear(key):
    words = ("Bad request: ValidationException: extraneous key [include_usage]; "
             "prompt is empty; EMPTY input; max_tokens must be > 0")
    assert scrub_secrets(words, key) == words  # the server's words, untouched
    echoed = (f"rejected header Authorization: Bearer {key}; x-api-key: {key}; "
              f"GET http://gw/v1/models?api_key={key}&x=1")
    got = scrub_secrets(echoed, key)
    assert got == ("rejected header Authorization: Bearer ***; x-api-key: ***; "
                   "GET http://gw/v1/models?api_key=***&x=1")
    if key == REAL_KEY:  # a real key as a whole token, any letter case
        got = scrub_secrets(f"invalid key {key}. Key {key.upper()} revoked ({key})", key)
        assert got == "invalid key ***. Key *** revoked (***)"


@pytest.mark.parametrize("key", ["x", "EMPTY", REAL_KEY])
def test_the_key_never_leaks_from_a_sweep(fake_server, tmp_path, capsys, monkeypatch, key):
    monkeypatch.setenv("OPENAI_API_KEY", key)
    msg = (f"ValidationException: header Authorization: Bearer {key} is not accepted "
           f"(see https://gw/keys?key={key}); the token {key} is empty")
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": Reply.json(
        {"error": {"message": msg}}, status=401)})
    out = tmp_path / "run.jsonl"
    main(["sweep", srv.base_url, "--lengths", "50", "--warmup", "0", "--no-telemetry",
          "--out", str(out), "--format", "json"])
    cap = capsys.readouterr()
    shown = cap.out + cap.err + out.read_text()
    assert "ValidationException" in shown and "is empty" in shown
    assert f"Bearer {key}" not in shown and f"key={key}" not in shown
    if key == REAL_KEY:
        assert key not in shown
    assert all(q.headers["authorization"] == f"Bearer {key}" for q in srv.requests)
