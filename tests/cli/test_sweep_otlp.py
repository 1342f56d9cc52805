"""`prefilltui sweep URL --otlp-listen HOST:PORT` end to end: a fake vLLM posts one
``llm_request`` span per request to the receiver a moment after answering (as vLLM's
batch exporter does), with ``gen_ai.request.id`` = "cmpl-" + X-Request-Id + "-0", plus
users' requests of its own; the probes get the server's TTFT from their own span (in the
run file too, read back) and the users are summarised apart."""

from __future__ import annotations

import json
import threading
import time

import httpx

from prefilltui.demo.server import free_port
from prefilltui.cli import main
from prefilltui.measure.runfile import read_run
from tests.fakeserver import Reply, models_reply, sse_data, sse_done, sse_text
from tests.unit.otlp_bodies import export


def test_probes_get_their_spans_and_users_are_counted(fake_server, tmp_path, capsys,
                                                     monkeypatch):
    from prefilltui.commands import sweep

    # the sweep returns as soon as every span is in; a loaded machine may need longer
    # than the 10 s it gives a real server
    monkeypatch.setattr(sweep, "SPAN_WAIT_S", 60.0)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/v1/traces"
    posted: list[threading.Thread] = []
    server_ttft: dict[str, float] = {}

    answers: list[object] = []

    def post_later(body: bytes) -> None:
        def go():
            time.sleep(0.3)
            try:  # straight to the loopback receiver, whatever proxy variables say
                answers.append(httpx.post(endpoint, content=body, timeout=10, trust_env=False,
                                          headers={"Content-Type": "application/x-protobuf"}
                                          ).status_code)
            except httpx.HTTPError as e:
                answers.append(repr(e))
        t = threading.Thread(target=go, daemon=True)
        t.start()
        posted.append(t)

    def complete(req):
        words = len(req.json["prompt"].split())
        rid = req.headers.get("x-request-id", "")
        ttft = 0.001 + words * 2e-4
        server_ttft[rid] = ttft * 0.9
        spans = [{"rid": f"cmpl-{rid}-0", "prompt": words, "ttft": ttft * 0.9, "queue": 1e-4,
                  "prefill": ttft * 0.8, "e2e": ttft, "start_s": time.time()},
                 # a user's request beside each probe: 3000 tokens, 50 ms TTFT, ended
                 # before its span is posted
                 {"rid": f"cmpl-user{len(server_ttft)}-0", "prompt": 3000, "ttft": 0.05,
                  "queue": 0.02, "prefill": 0.03, "e2e": 0.06, "start_s": time.time()}]
        post_later(export(*spans).SerializeToString())
        return Reply.sse([(ttft, sse_text("x")),
                          (ttft + 0.001, sse_data({"choices": [],
                                                   "usage": {"prompt_tokens": words}})),
                          (ttft + 0.002, sse_done())])

    srv = fake_server({"GET /v1/models": models_reply("m", max_model_len=8192),
                       "GET /version": Reply.json({"version": "0.0"}),
                       "POST /v1/completions": complete})
    out = tmp_path / "run.jsonl"
    rc = main(["sweep", srv.base_url, "--lengths", "16,64,256", "--repeats", "2", "--warmup", "1",
               "--out", str(out), "--format", "json", "--otlp-listen", f"127.0.0.1:{port}"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    live = json.loads(cap.out)["live"]
    assert answers and all(a == 200 for a in answers), (answers, cap.err)
    assert live["spans"]["probes_matched"] == 7 and live["spans"]["probes_expired"] == 0
    assert live["spans"]["match_rate"] == 1.0
    assert 0 < live["spans"]["latency_p50_s"] < 5
    users = live["users"]
    # one user per completion the server answered (the probes, and discovery's requests)
    assert users["source"] == "traces" and users["requests"] == len(server_ttft) >= 7
    assert users["prompt_tokens_p50"] == 3000 and abs(users["ttft_p50_s"] - 0.05) < 1e-9
    assert abs(users["queue_share"] - 0.4) < 1e-9
    results, problems = read_run(out)
    assert problems == []
    assert len(results) == 7
    for r in results:
        assert r.span is not None and r.queue_source == "span"
        assert abs(r.server_ttft_s - server_ttft[r.notes.request_id]) < 1e-9
        assert r.server_ttft_s < r.ttft_s
    for t in posted:
        t.join(5)
