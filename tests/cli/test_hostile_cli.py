"""Issue 25 end to end through the CLI (in process, against the fake server): what a
hostile server or a careless operator sends never crashes a command, never leaks a
secret, and is said plainly."""

from __future__ import annotations

from prefilltui.cli import main
from tests.fakeserver import Reply, sse_data, sse_done, sse_text


def complete(req):
    words = len(req.json["prompt"].split())
    return Reply.sse([(0.001, sse_text("x")),
                      (0.002, sse_data({"choices": [], "usage": {"prompt_tokens": words}})),
                      (0.003, sse_done())])


def test_a_model_list_over_the_cap_is_said_never_model_none(fake_server, tmp_path, capsys):
    """11: a model list too big to read says so; the summary never prints 'model None'."""
    many = {"data": [{"id": f"model-{i:07d}", "object": "model", "pad": "x" * 80}
                     for i in range(100_000)]}  # ~11 MB
    srv = fake_server({"GET /v1/models": Reply.json(many), "POST /v1/completions": complete})
    rc = main(["sweep", srv.base_url, "--lengths", "16,32,64", "--warmup", "0",
               "--no-telemetry", "--out", str(tmp_path / "r.jsonl")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "model None" not in out
    assert "model ?" in out and "/v1/models answered over 8 MiB: not read" in out


# -- 2 and 11: URL credentials


def test_sweep_never_shows_url_secrets_and_sends_them(fake_server, tmp_path, capsys,
                                                      monkeypatch):
    """2: a ``?api-key=`` value is sent on every request, never shown; 11: with an API
    key set, ``user:pass@`` is not sent (the Bearer key is), and the summary says so."""
    srv = fake_server({"GET /v1/models": Reply.json({"data": [{"id": "m"}]}),
                       "POST /v1/completions": complete})
    monkeypatch.setenv("K", "sk-the-REAL-key-0123456789")
    url = srv.base_url.replace("http://", "http://alice:PASSWORD123@") + "/v1?api-key=QSECRET99"
    out = tmp_path / "r.jsonl"
    rc = main(["sweep", url, "--lengths", "16,32,64", "--warmup", "0", "--no-telemetry",
               "--api-key-env", "K", "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    shown = cap.out + cap.err + out.read_text()
    for secret in ("PASSWORD123", "QSECRET99", "REAL-key"):
        assert secret not in shown
    assert "api-key=***" in cap.out  # the header says a key is in the URL
    assert srv.requests and all(r.query == "api-key=QSECRET99" for r in srv.requests)
    assert all(r.headers["authorization"] == "Bearer sk-the-REAL-key-0123456789"
               for r in srv.requests)
    assert "user:password is not sent: the API key is" in cap.out


def test_a_bad_url_with_a_password_is_refused_without_showing_it(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["sweep", "ftp://alice:PASSWORD123@127.0.0.1/"])
    err = capsys.readouterr().err
    assert "PASSWORD123" not in err and "alice:***@" in err


def test_exporter_labels_pages_logs_and_files_never_hold_url_secrets(fake_server, tmp_path):
    """2: ``target`` labels on /metrics, the / page, start-up and 'is down' log lines,
    run-file names and contents."""
    import signal

    from tests.cli.test_exporter_cli import _start_exporter
    from tests.unit.test_exporter import _get, _wait, prefill_server

    srv = prefill_server(fake_server)
    live = srv.base_url.replace("http://", "http://alice:PASSWORD123@") + "?api_key=QSECRET99"
    dead = "http://bob:DEADPASS77@127.0.0.1:9/?token=TOKSECRET55"
    runs = tmp_path / "runs"
    proc, port, err = _start_exporter([live, dead, "--interval", "0.05", "--lengths", "16,64",
                                       "--run-dir", str(runs)], tmp_path=tmp_path)
    try:
        assert port is not None
        assert _wait(lambda: sum(r.path == "/v1/completions" for r in srv.requests) >= 3)
        assert _wait(lambda: "is down" in (tmp_path / "stderr.txt").read_text())
        pages = [_get(f"http://127.0.0.1:{port}{p}")[1] for p in ("/metrics", "/")]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        err.close()
    stderr = (tmp_path / "stderr.txt").read_text()
    files = sorted(runs.iterdir())
    everything = "\n".join([stderr, *pages, *(f.name for f in files),
                            *(f.read_text() for f in files)])
    for secret in ("PASSWORD123", "QSECRET99", "DEADPASS77", "TOKSECRET55"):
        assert secret not in everything
    assert 'target="http://alice:***@127.0.0.1' in pages[0] and "api_key=***" in pages[0]
    assert "bob:***@127.0.0.1:9/?token=***" in stderr
    # the live target's credentials were still sent: Basic auth (no key set) and the query
    assert all(r.query == "api_key=QSECRET99" for r in srv.requests)
    assert all(r.headers["authorization"].startswith("Basic ") for r in srv.requests)
