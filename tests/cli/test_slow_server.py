"""A server slow to say what it is: a model list that never completes (a busy server,
the moment someone asks why TTFT is high) and metadata endpoints that hang.  With
``--model`` the sweep goes on without the list; a slow step is said while it lasts,
not after seconds of silence."""

from __future__ import annotations

import threading

from prefilltui.cli import main
from prefilltui.commands.sweep import SlowSteps
from prefilltui.measure.runfile import read_run
from tests.fakeserver import Reply, models_reply, per_token_completion

#: longer than any --timeout below: the answer never completes within the test
HANG_S = 30.0


def _hanging(body: bytes = b"{}") -> Reply:
    """Headers at once, the body HANG_S later (the connection is taken)."""
    return Reply(200, {"Content-Type": "application/json"}, chunks=[(HANG_S, body)])


def test_a_model_list_that_never_completes_is_no_reason_to_stop_with_model(
        fake_server, tmp_path, capsys):
    srv = fake_server({"GET /v1/models": _hanging(b'{"data": []}'),
                       "POST /v1/completions": per_token_completion(b=2e-4)})
    out = tmp_path / "run.jsonl"
    rc = main(["sweep", srv.base_url, "--model", "m", "--lengths", "16,32", "--repeats", "2",
               "--warmup", "0", "--timeout", "2", "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "/v1/models gave no complete answer within 2 s" in cap.out
    results, _ = read_run(out)
    assert len(results) == 4 and all(r.ok for r in results)
    assert all(req.json["model"] == "m" for req in srv.requests
               if req.path.startswith("/v1/completions"))


def test_without_model_the_message_says_how_to_go_on(fake_server, tmp_path, capsys):
    srv = fake_server({"GET /v1/models": _hanging(b'{"data": []}')})
    rc = main(["sweep", srv.base_url, "--lengths", "16", "--timeout", "2",
               "--out", str(tmp_path / "run.jsonl")])
    err = capsys.readouterr().err
    assert rc == 3
    assert "no complete answer from /v1/models within 2 s" in err
    assert "pass --model NAME" in err


def test_a_dead_port_is_unreachable_with_model_too(tmp_path, capsys):
    rc = main(["sweep", "http://127.0.0.1:9", "--model", "m", "--lengths", "16",
               "--out", str(tmp_path / "run.jsonl")])
    err = capsys.readouterr().err
    assert rc == 3 and "cannot reach" in err and "--model" not in err


def test_a_slow_discovery_is_said_while_it_lasts(fake_server, tmp_path, capsys):
    script = {"GET /v1/models": models_reply("m"),
              "POST /v1/completions": per_token_completion(b=2e-4)}
    for path in ("/props", "/version", "/metrics", "/info", "/api/version", "/model_info",
                 "/get_model_info"):
        script["GET " + path] = _hanging()
    srv = fake_server(script)
    rc = main(["sweep", srv.base_url, "--lengths", "16,32", "--repeats", "1", "--warmup", "0",
               "--timeout", "3", "--out", str(tmp_path / "run.jsonl")])
    out = capsys.readouterr().out
    assert rc == 0
    said = out.index(f"{srv.base_url}: discovering the server (up to 3 s a request)")
    assert said < out.index("sweeping ")  # before the sweep's first line, not after


def test_a_quick_step_stays_silent_and_a_slow_one_is_said_once():
    said: list[str] = []
    done = threading.Event()

    def say(text: str) -> None:
        said.append(text)
        done.set()

    slow = SlowSteps(say, after_s=0.2)
    slow.state("connecting", "discovering")
    slow.state("probing", "")  # over before 0.2 s: nothing
    assert not done.wait(0.4) and said == []
    slow.state("connecting", "calibrating (up to 120 s)")
    assert done.wait(5)
    slow.close()
    assert said == ["  calibrating (up to 120 s)"]
