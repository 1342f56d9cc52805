"""A hostile server at the sweep level: a trickling /metrics cannot hold a
probe past its deadlines, the state says what the runner waits for and how long, and a
failed calibration request is said at once, never a silent extra timeout."""

from __future__ import annotations

import time

from prefilltui.options import (ProbeOptions, RunFileOptions, SessionOptions, SweepDesign,
                                TelemetryOptions)
from prefilltui.session import build_session
from tests.fakeserver import Reply, llama_routes, models_reply, sse_data, sse_done, sse_text


def _options(tmp_path, timeout: float = 2.0, lengths=(16,)) -> SessionOptions:
    return SessionOptions(probe=ProbeOptions(timeout_s=timeout),
                          design=SweepDesign(lengths=tuple(lengths), warmup=0),
                          telemetry=TelemetryOptions(enabled=False),
                          run_file=RunFileOptions(path=str(tmp_path / "run.jsonl")))


def _ok_stream(req) -> Reply:
    words = len(req.json["prompt"].split())
    return Reply.sse([(0.0, sse_text("x")),
                      (0.0, sse_data({"choices": [], "usage": {"prompt_tokens": words}})),
                      (0.0, sse_done())])


def _run(session, limit_s: float = 60.0):
    states: list[tuple[float, str, str]] = []
    t0 = time.monotonic()
    runner = session.new_runner(on_state=lambda s, d: states.append((time.monotonic() - t0, s, d)))
    runner.start()
    runner.join(limit_s)
    took = time.monotonic() - t0
    alive = runner.alive
    session.close()
    assert not alive, f"the runner was still running after {limit_s} s: {states[-3:]}"
    return runner, states, took


def test_a_trickling_metrics_cannot_hold_a_one_probe_sweep(fake_server, tmp_path):
    """1 and 4: /metrics sending a byte every 0.2 s for 60 s; ``--timeout 2``."""
    trickle = Reply(200, {"Content-Type": "text/plain"},
                    chunks=[(0.2 * i, b"#") for i in range(1, 300)])
    srv = fake_server({**llama_routes(), "GET /metrics": trickle,
                       "POST /tokenize": Reply.json({"tokens": list(range(16))}),
                       "POST /v1/completions": _ok_stream})
    runner, states, took = _run(build_session(_options(tmp_path), srv.base_url), 60)
    assert runner.state == "done" and runner.results[0].ok
    # discovery (2 s for the /metrics sniff) + the first scrape's 2 s deadline + the
    # probe; the scrape after it is skipped (backing off)
    assert took < 2 + 2 + 3, f"took {took:.1f} s; states {states}"
    # while the first scrape waits the state is the probe's, not the calibration's
    probing = [s for s in states if s[1] == "probing"]
    assert probing and probing[0][0] < took - 1.5


def test_calibration_says_what_it_waits_for_and_a_failure_is_noted(fake_server, tmp_path):
    """4 and 11: no tokenize endpoint, so two calibration requests; the server never
    sends a token (a stuck queue)."""
    stuck = Reply.sse([(30.0, sse_done())])
    srv = fake_server({"GET /v1/models": models_reply("m", max_model_len=4096),
                       "POST /v1/completions": stuck})
    opts = _options(tmp_path, timeout=1.0, lengths=(16, 8000))  # 8000: over the context
    runner, states, took = _run(build_session(opts, srv.base_url), 60)
    waits = [d for _, s, d in states if s == "connecting" and d.startswith("calibrating")]
    assert waits and "(request 1 of 2, ~58 tokens, up to 1 s)" in waits[0]
    assert "learning the server's token count" in waits[0]
    # one failed calibration request stops calibrating (no second request) and is said,
    # without disturbing the other notes (the context cap's stays as it was)
    assert len(waits) == 1
    said = [n for n in runner.notes if "calibration request" in n]
    assert said and "timeout" in said[0] and "failed after 1." in said[0]
    cap = [n for n in runner.notes if "capped to" in n]
    assert len(cap) == 1 and "(the server's context is 4096 tokens;" in cap[0], runner.notes
    assert "calibration failed" in runner.notices
    # the connecting state names what it does and its limit
    assert any(s == "connecting" and "discovering the server (up to 1 s a request)" in d
               for _, s, d in states)
