"""Inputs from the field, each with its right value: a server that streams past
max_tokens 1, one that rejects max_tokens and temperature 0, escape codes in text the
server controls, and a server reachable only through the user's proxy."""

from __future__ import annotations

import json
import logging
import time

from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from tests.fakeserver import Reply, models_reply, sse_data, sse_delta, sse_done, sse_text
from tests.forwardproxy import ForwardProxy
from prefilltui.cli import _setup_logging, main
from prefilltui.measure.probe import ProbeClient
from prefilltui.measure.runfile import read_run

LENGTHS = "50,100,200,400"


def usage_chunk(n: int) -> bytes:
    return sse_data({"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": 1}})


def word_tokenize(req):
    n = len(str(req.json.get("prompt", "")).split())
    return Reply.json({"count": n, "tokens": list(range(n))})


def sweep(url, tmp_path, capsys, *extra, fmt="json", rc_want=0):
    out = tmp_path / "run.jsonl"
    rc = main(["sweep", url, "--lengths", LENGTHS, "--warmup", "0", "--no-telemetry",
               "--out", str(out), "--format", fmt, *extra])
    cap = capsys.readouterr()
    assert rc == rc_want, cap.err
    return cap, out


# ------------------------------------------------ 1. max_tokens 1 ignored, stream goes on

def endless(req):
    """Token at 0.10 s, then one more every 0.1 s for 20 s; no finish_reason, no [DONE]."""
    return Reply.sse([(0.10 + 0.1 * i, sse_text(" tok")) for i in range(200)])


async def test_cap_ignored_probe_is_ok_ttft_010_closed_at_second_token(fake_server):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": endless})
    async with ProbeClient(srv.base_url, timeout=5) as c:
        await c.discover()
        await c.warm()
        t = time.perf_counter()
        r = await c.probe(50, prompt="hello world")
        wall = time.perf_counter() - t
    assert r.ok and r.error_kind is None, r.error_message
    assert 0.09 <= r.ttft_s <= 0.3  # TTFT 0.10 s (was: thrown away as a timeout after 5 s)
    assert "ignored max_tokens 1" in r.notes.cap_ignored
    assert r.total_s < 0.45  # closed at the second token (0.20 s)
    assert wall < 1.5
    assert "max_tokens ignored" in c.notices


def test_cap_ignored_sweep_says_it_once_and_every_probe_line_has_it(fake_server, tmp_path,
                                                                    capsys):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /tokenize": word_tokenize,
                       "POST /v1/completions": endless})
    t = time.perf_counter()
    cap, out = sweep(srv.base_url, tmp_path, capsys, "--timeout", "5")
    assert time.perf_counter() - t < 15  # 4 probes of ~0.2 s, not 4 x 5 s
    d = json.loads(cap.out)
    assert d["probes"]["ok"] == 4 and d["probes"]["failed"] == 0 and d["fit"]["n"] >= 3
    said = [n for n in d["live"]["notes"] if "streams past max_tokens 1" in n]
    assert len(said) == 1
    probes = [r for r in read_run(out)[0] if not r.warmup]
    assert len(probes) == 4 and all(r.notes.cap_ignored is not None for r in probes)
    assert all(0.09 <= r.ttft_s <= 0.4 for r in probes)


# ------------------------------------------------ 2. max_tokens and temperature rejected

MAX_TOKENS_400 = {"error": {"param": "max_tokens", "code": "unsupported_parameter",
                            "message": "Unsupported parameter: 'max_tokens' is not supported "
                                       "with this model. Use 'max_completion_tokens' instead."}}
TEMPERATURE_400 = {"error": {"param": "temperature", "code": "unsupported_value",
                             "message": "Unsupported value: 'temperature' does not support 0 "
                                        "with this model. Only the default (1) value is "
                                        "supported."}}


def strict_chat(req):
    b = req.json
    if "max_tokens" in b:
        return Reply.json(MAX_TOKENS_400, status=400)
    if "temperature" in b:
        return Reply.json(TEMPERATURE_400, status=400)
    assert b["max_completion_tokens"] == 1
    n = len(b["messages"][0]["content"].split())
    return Reply.sse([(0.02, sse_delta(role="assistant")), (0.10, sse_delta(content="Hi")),
                      (0.11, sse_delta(finish="length")), (0.12, usage_chunk(n)),
                      (0.13, sse_done())])


def test_max_tokens_and_temperature_rejected_are_replaced_and_dropped_once(fake_server, tmp_path,
                                                                        capsys):
    srv = fake_server({"GET /v1/models": models_reply("o-model"),
                       "POST /v1/chat/completions": strict_chat})
    cap, out = sweep(srv.base_url, tmp_path, capsys, "--api", "chat")
    d = json.loads(cap.out)
    assert d["probes"]["ok"] >= 3 and d["fit"] is not None and d["fit"]["n"] >= 3  # was 0 of 4
    posts = [r for r in srv.requests if r.path == "/v1/chat/completions"]
    rejected = [r for r in posts if "max_tokens" in r.json or "temperature" in r.json]
    assert len(rejected) == 2  # each said once, then remembered for every later probe
    assert all(r.json.get("max_completion_tokens") == 1 and "temperature" not in r.json
               for r in posts[2:])
    notes = " | ".join(d["live"]["notes"])
    assert notes.count("rejected max_tokens") == 1 and notes.count("rejected temperature") == 1
    assert "send max_completion_tokens: 1 instead" in notes
    assert sum(r.ok for r in read_run(out)[0]) == 4  # the 400s came in calibration


# ------------------------------------------------ 3. escape codes in server text

MODEL = "llama\x1b[2J\x1b]0;pwned\x07-8b"
BAD_400 = {"error": {"message": f"model {MODEL} \x1b[31mfailed\x1b[0m: see "
                                "\x1b]8;;http://evil.example/\x07here\x1b]8;;\x07"}}


def test_escape_codes_never_reach_the_terminal_and_the_run_file_keeps_them(fake_server, tmp_path,
                                                                         capsys):
    ok = Reply.sse([(0.05, sse_text("Hi")), (0.06, usage_chunk(50)), (0.07, sse_done())])
    srv = fake_server({"GET /v1/models": models_reply(MODEL), "POST /tokenize": word_tokenize,
                       "POST /v1/completions": [ok, Reply.json(BAD_400, status=400), ok]})
    cap, out = sweep(srv.base_url, tmp_path, capsys, fmt="text")
    shown = cap.out + cap.err
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown
    assert "llama\\x1b[2J\\x1b]0;pwned\\x07-8b" in shown  # the server line, escaped
    assert "FAILED http" in shown and "\\x1b[31mfailed" in shown  # the progress line
    rows = read_run(out)[0]
    assert any(r.error_message and "\x1b[31m" in r.error_message for r in rows)  # raw, as JSON
    raw = out.read_text()
    assert "\x1b" not in raw and "\\u001b[2J" in raw  # JSON escapes it: cat-safe
    assert any(json.loads(ln).get("server", {}).get("model") == MODEL
               for ln in raw.splitlines() if '"record"' in ln)
    # the report of that run file
    assert main(["report", str(out), "--no-plot"]) == 0
    rep = capsys.readouterr()
    assert "\x1b" not in rep.out + rep.err and "\x07" not in rep.out + rep.err


def test_escape_codes_are_escaped_in_tui_logs_and_exporter_labels(capsys):
    from prefilltui.exporter.collector import HealthCollector
    from prefilltui.exporter.snapshot import TargetSnapshot
    from prefilltui.model.types import ProbeResult
    from prefilltui.model.summary import ProbeCounts
    from prefilltui.tui.viewmodel import status_line
    from prefilltui.tui.widgets.probe_log import probe_message

    r = ProbeResult(requested_tokens=50, error_kind="http", http_status=400,
                    error_message=BAD_400["error"]["message"])
    for text in (probe_message(r),
                 status_line("failed", r.error_message, ProbeCounts(), (4, 400), "all", False,
                             (f"model {MODEL}",))):
        assert "\x1b" not in text and "\x07" not in text
        assert "\\x1b" in text and "pwned" in text  # shown as visible text
    _setup_logging()
    logging.getLogger("prefilltui.test").error("server said %s", BAD_400["error"]["message"])
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[31mfailed" in err

    class Source:
        snapshot = TargetSnapshot(target="t", model=MODEL, server_kind="vllm", api="chat",
                                  interval_s=10.0)

    reg = CollectorRegistry()
    reg.register(HealthCollector([Source()], with_build_info=False))
    text = generate_latest(reg).decode()
    assert "\x1b" not in text and "\x07" not in text
    assert 'model="llama\\\\x1b[2J' in text  # the exposition escapes the backslash again


# ------------------------------------------------ 4. a server reachable only through a proxy

def proxied_routes():
    return {"GET /v1/models": models_reply("m"), "POST /tokenize": word_tokenize,
            "GET /metrics": Reply.text("vllm:num_requests_running 0\n"),
            "POST /v1/completions": lambda req: Reply.sse([
                (0.05, sse_text("Hi")), (0.06, usage_chunk(len(req.json["prompt"].split()))),
                (0.07, sse_done())])}


def test_http_proxy_reaches_an_invalid_host_for_every_request(fake_server, tmp_path, capsys,
                                                              monkeypatch):
    srv = fake_server(proxied_routes())
    with ForwardProxy({"llm.holdout.invalid": srv.base_url}) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        for v in ("http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(v, raising=False)
        cap, _ = sweep("http://llm.holdout.invalid/v1", tmp_path, capsys, fmt="text")
        seen = list(proxy.seen)
    assert "probes ok 4, failed 0" in cap.out  # was: cannot reach ... Name or service not known
    assert f"via proxy {proxy.url}" in cap.out  # the summary says so
    assert "TTFT includes the proxy's hop" in cap.out
    for what in ("GET http://llm.holdout.invalid/v1/models", "GET http://llm.holdout.invalid/metrics",
                 "POST http://llm.holdout.invalid/tokenize",
                 "POST http://llm.holdout.invalid/v1/completions"):
        assert what in seen, (what, seen)


def test_loopback_goes_direct_and_the_flag_overrides_the_environment(fake_server, tmp_path,
                                                                     capsys, monkeypatch):
    srv = fake_server(proxied_routes())
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    cap, _ = sweep(srv.base_url, tmp_path, capsys, fmt="text")
    assert "probes ok 4" in cap.out and "via proxy" not in cap.out
    with ForwardProxy({"llm.holdout.invalid": srv.base_url}) as proxy:
        cap, _ = sweep("http://llm.holdout.invalid", tmp_path, capsys, "--proxy", proxy.url,
                       fmt="text")
        assert proxy.seen
    assert "probes ok 4" in cap.out and f"via proxy {proxy.url}" in cap.out
    rc = main(["sweep", "http://llm.holdout.invalid", "--proxy", "ftp://x", "--no-telemetry"])
    assert rc == 2 and "not a proxy URL" in capsys.readouterr().err
