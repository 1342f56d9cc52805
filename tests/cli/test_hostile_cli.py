"""Hostile inputs end to end through the CLI (in process, against the fake server): what a
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
    with _start_exporter([live, dead, "--interval", "0.05", "--lengths", "16,64",
                          "--run-dir", str(runs)], tmp_path=tmp_path) as (proc, port):
        assert port is not None
        assert _wait(lambda: sum(r.path == "/v1/completions" for r in srv.requests) >= 3)
        assert _wait(lambda: "is down" in (tmp_path / "stderr.txt").read_text())
        pages = [_get(f"http://127.0.0.1:{port}{p}")[1] for p in ("/metrics", "/")]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
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


# -- 8: settings by type and range, the key named


import pytest  # noqa: E402


@pytest.mark.parametrize("line, words", [
    ("gpu = 7", "gpu = 7: must be a non-empty string"),
    ('peak_tflops = "lots"', "peak_tflops = 'lots': must be a number > 0"),
    ("efficiency = -3", "efficiency = -3: must be a number > 0 and <= 1.5"),
    ('dtype = "int4"', "dtype = 'int4': must be one of 'bf16', 'fp16', 'fp8'"),
    ("lengths = [99999999999999]", "lengths = [99999999999999]: must be a list of integer "
                                   "prompt lengths >= 1 and <= 10,000,000 tokens"),
    ("timeout = inf", "timeout = inf: must be a number > 0"),
    ("window = 2.5", "window = 2.5: must be an integer >= 3"),
    ("insecure = 1", "insecure = 1: must be true or false"),
    ('gpu = "H999 Ultra"', "gpu = 'H999 Ultra' is not in the catalog"),
    ("layers = 0", "layers = 0: must be an integer >= 1"),
])
@pytest.mark.parametrize("table", ["[[target]]\nurl = \"http://a\"\n", "[defaults]\n"])
def test_exporter_config_values_by_type_and_range(tmp_path, capsys, line, words, table):
    f = tmp_path / "t.toml"
    body = table + line + "\n"
    if table.startswith("[defaults]"):
        body += '[[target]]\nurl = "http://a"\n'
    f.write_text(body)
    assert main(["exporter", "--config", str(f), "--run-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert words in err and str(f) in err and "Traceback" not in err


@pytest.mark.parametrize("argv, words", [
    (["--lengths", "50000000"], "lengths = [50000000]: must be"),
    (["--max-tokens", "50000000"], "expected a list of integer prompt lengths"),
    (["--peak-tflops", "1e308"], "expected a number > 0 and <= 1,000,000 TFLOP/s"),
    (["--efficiency", "-3"], "expected a number > 0 and <= 1.5"),
    (["--timeout", "nan"], "expected a number > 0 and <= 3,600 seconds"),
    (["--depth", "50000000"], "depths must be integers from 0 to 10,000,000"),
])
def test_cli_values_by_range_are_usage_errors(argv, words, capsys):
    import time

    t0 = time.monotonic()
    with pytest.raises(SystemExit) as ei:
        main(["sweep", "http://127.0.0.1:9", *argv])
    assert ei.value.code == 2 and time.monotonic() - t0 < 5
    assert words in capsys.readouterr().err


def test_unknown_context_caps_what_is_built(fake_server, tmp_path, capsys):
    """8: a server that does not say its context gets no prompt over 1,048,576 tokens
    (a 5 M-token prompt would take seconds and hundreds of MiB to build)."""
    srv = fake_server({"GET /v1/models": Reply.json({"data": [{"id": "m"}]}),
                       "POST /v1/completions": complete})
    rc = main(["sweep", srv.base_url, "--lengths", "16,5000000", "--warmup", "0",
               "--no-telemetry", "--timeout", "60", "--out", str(tmp_path / "r.jsonl")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "length 5000000 is over the longest prompt built" in out
    assert "capped to 1048576 tokens" in out
    words = max(len(r.json["prompt"].split()) for r in srv.requests
                if r.path == "/v1/completions")
    assert words <= 1_048_576


# -- 10: one run per run file at a time; report never merges runs silently


def test_a_second_run_on_the_same_out_is_refused_while_the_first_writes(tmp_path, capsys):
    import subprocess
    import sys

    out = tmp_path / "r.jsonl"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom prefilltui.measure.runfile.writer import "
         "RunWriter\nw = RunWriter(sys.argv[1])\nprint('held', flush=True)\ntime.sleep(60)",
         str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        rc = main(["sweep", "http://127.0.0.1:9", "--lengths", "16", "--no-telemetry",
                   "--out", str(out)])
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert rc == 2
    assert "is being written by another prefilltui run" in err and "another --out" in err


def test_two_writers_in_one_process_are_refused_too(tmp_path):
    from prefilltui.measure.runfile import RunFileBusy, RunWriter

    with RunWriter(tmp_path / "r.jsonl"):
        with pytest.raises(RunFileBusy):
            RunWriter(tmp_path / "r.jsonl")
    RunWriter(tmp_path / "r.jsonl").close()  # free again once the first is closed


def _two_runs(fake_server, tmp_path):
    srv = fake_server({"GET /v1/models": Reply.json({"data": [{"id": "m"}]}),
                       "POST /v1/completions": complete})
    out = tmp_path / "r.jsonl"
    for _ in range(2):
        assert main(["sweep", srv.base_url, "--lengths", "16,32,64", "--warmup", "0",
                     "--no-telemetry", "--out", str(out)]) == 0
    return out


def test_report_refuses_two_runs_in_one_file_unless_asked(fake_server, tmp_path, capsys):
    out = _two_runs(fake_server, tmp_path)
    capsys.readouterr()
    assert main(["report", str(out), "--no-plot"]) == 1
    err = capsys.readouterr().err
    assert "holds 2 runs (1: lines 1-" in err and "--merge-sessions" in err
    assert main(["report", str(out), "--no-plot", "--merge-sessions", "--format", "json"]) == 0
    import json
    assert json.loads(capsys.readouterr().out)["probes"]["total"] >= 6
    assert main(["report", str(out), "--no-plot", "--session", "2", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["probes"]["total"] < 6


def test_report_tells_runs_apart_in_files_without_session_ids(fake_server, tmp_path, capsys):
    """A file from before the ids: a ``seq`` that starts again starts another run."""
    import json

    out = _two_runs(fake_server, tmp_path)
    lines = [ln for ln in out.read_text().splitlines() if '"record":"session"' not in ln]
    old = tmp_path / "old.jsonl"
    old.write_text("\n".join(lines) + "\n")
    assert len({json.loads(ln)["seq"] for ln in lines}) < len(lines)  # duplicate seqs
    capsys.readouterr()
    assert main(["report", str(old), "--no-plot"]) == 1
    assert "holds 2 runs" in capsys.readouterr().err
