"""`prefilltui sweep URL` end to end against the fake server (in-process CLI)."""

import json

import pytest

from tests.fakeserver import Reply, models_reply, per_token_completion, sse_data, sse_done, sse_text
from prefilltui.cli import main
from prefilltui.measure.runfile import read_run

SECRET = "sk-test-SECRET-0123456789"


def server(fake_server, fail_every=0):
    calls = {"n": 0}

    def complete(req):
        calls["n"] += 1
        if fail_every and calls["n"] % fail_every == 0:
            return Reply.sse([(0, sse_data({"error": {"message": f"boom {SECRET}"}}))])
        words = len(req.json["prompt"].split())
        # 0.2 ms a token: a slope well above a loaded test machine's timing noise
        return Reply.sse([(0.001 + words * 2e-4, sse_text("x")),
                          (0.002 + words * 2e-4, sse_data({"choices": [],
                                                            "usage": {"prompt_tokens": words}})),
                          (0.003 + words * 2e-4, sse_done())])
    return fake_server({"GET /v1/models": models_reply("m", max_model_len=8192),
                        "GET /version": Reply.json({"version": "0.0"}),
                        "POST /v1/completions": complete})


def test_json_summary_and_key_never_leaks(fake_server, tmp_path, capsys, monkeypatch):
    srv = server(fake_server, fail_every=4)
    monkeypatch.setenv("MY_KEY", SECRET)
    out = tmp_path / "run.jsonl"
    rc = main(["sweep", srv.base_url + "/v1", "--lengths", "16,64,256", "--repeats", "2",
               "--warmup", "1", "--out", str(out), "--format", "json", "--api-key-env", "MY_KEY"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    d = json.loads(cap.out)
    assert d["schema"] == "prefilltui.summary/2"
    assert d["server"] == {"kind": "vllm", "model": "m", "context_tokens": 8192}
    assert d["live"]["base_url"] == srv.base_url
    p = d["probes"]
    assert p["total"] == p["ok"] + p["failed"] == 7 and p["errors"] == {"stream_error": p["failed"]}
    assert set(d["fit"]) >= {"intercept_s", "slope_s_per_token", "prefill_tokens_per_s", "r2", "n"}
    assert d["fit"]["slope_s_per_token"] > 0
    # the key was sent, and is nowhere else
    assert all(q.headers.get("authorization") == f"Bearer {SECRET}" for q in srv.requests)
    assert SECRET not in cap.out + cap.err + out.read_text()
    assert "***" in out.read_text()  # the echoed key was scrubbed from the error message
    # the run file's session line keeps what discovery learned, for `report`
    from prefilltui.measure.runfile import read_session
    assert read_session(out)["server"] == {"kind": "vllm", "model": "m", "context_tokens": 8192,
                                           "params": None, "hidden": None, "layers": None,
                                           "n_batch": None, "n_ubatch": None,
                                           "max_num_batched_tokens": None,
                                           "chunked_prefill_size": None, "config_path": None}


def test_text_output(fake_server, tmp_path, capsys):
    srv = server(fake_server)
    rc = main(["sweep", srv.base_url, "--min-tokens", "16", "--max-tokens", "128", "--points", "4",
               "--out", str(tmp_path / "r.jsonl")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "TTFT" in cap.out and "fit (" in cap.out and "run file" in cap.out
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    # session + the 2 calibration requests (no tokenize endpoint here) + 5 probes
    assert len(lines) == 8 and '"record":"session"' in lines[0]
    assert sum('"record":"calibration"' in x for x in lines) == 2


def test_unreachable_exit_3(tmp_path, capsys):
    rc = main(["sweep", "http://127.0.0.1:9", "--lengths", "8", "--out", str(tmp_path / "r.jsonl")])
    err = capsys.readouterr().err
    assert rc == 3 and err.startswith("prefilltui: cannot reach") and err.count("\n") == 1


def test_all_failed_exit_3(fake_server, tmp_path, capsys):
    srv = fake_server({"GET /v1/models": models_reply(),
                       "POST /v1/completions": Reply.json({"error": {"message": "nope"}}, status=500)})
    rc = main(["sweep", srv.base_url, "--lengths", "8,16", "--warmup", "0",
               "--out", str(tmp_path / "r.jsonl")])
    err = capsys.readouterr().err
    assert rc == 3 and "every probe failed (http 2)" in err


def test_always_rate_limited_one_pass_sweep_ends_exit_3(fake_server, tmp_path, capsys,
                                                       monkeypatch):
    from prefilltui.measure.sweep import config as sweep_mod
    monkeypatch.setattr(sweep_mod, "MIN_RATE_LIMIT_WAIT_S", 0.01)  # "-5" -> 0.01 s here
    srv = fake_server({"GET /v1/models": models_reply(),
                       "POST /v1/completions": Reply.json({"error": {"message": "slow"}},
                                                          status=429, headers={"Retry-After": "-5"})})
    rc = main(["sweep", srv.base_url, "--lengths", "8,16", "--warmup", "0",
               "--out", str(tmp_path / "r.jsonl")])
    cap = capsys.readouterr()
    # each probe gives up after MAX_RATE_LIMITED_TRIES (5) attempts: 2 probes, 10 attempts
    assert rc == 3 and "every probe failed (rate_limited 10)" in cap.err
    counters = [line.split("]")[0] for line in cap.out.splitlines() if line.startswith("[")]
    assert counters == ["[  1/  2"] * 5 + ["[  2/  2"] * 5  # never past its total
    assert "giving up on it" in cap.out
    rows = read_run(tmp_path / "r.jsonl")[0]
    assert [r.error_kind for r in rows] == ["rate_limited"] * 10


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["sweep", "http://x", "--lengths", "a,b"])
    assert e.value.code == 2
    assert main(["sweep", "http://x", "--min-tokens", "100", "--max-tokens", "10"]) == 2


def test_capped_lengths_are_said_never_promised(fake_server, tmp_path, capsys):
    """Lengths over a 4,096-token context: the header lists the lengths that run (after
    discovery), and a note in the header and the JSON summary says what was capped,
    to what and why; exactly the probes the header promises run."""
    srv = server(fake_server)
    srv.set("GET /v1/models", models_reply("m", max_model_len=4096))
    rc = main(["sweep", srv.base_url, "--lengths", "4500,5000", "--warmup", "0",
               "--out", str(tmp_path / "r.jsonl")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    head = cap.out.splitlines()[:2]
    assert head[0].startswith("sweeping") and "lengths 4007 x 1" in head[0]
    assert "(= 1 probes)" in head[0]
    assert "4500, 5000" in head[1] and "capped to 4007" in head[1] and "4096 tokens" in head[1]
    assert "1 lengths run, not 2" in head[1]
    assert len(read_run(tmp_path / "r.jsonl")[0]) == 1
    rc = main(["sweep", srv.base_url, "--lengths", "4500,5000", "--warmup", "0", "--format",
               "json", "--out", str(tmp_path / "r2.jsonl")])
    d = json.loads(capsys.readouterr().out)
    assert any("capped to 4007" in n for n in d["live"]["notes"])


def test_until_ci_stops_at_the_target_and_says_how_many_probes(fake_server, tmp_path, capsys):
    srv = server(fake_server)
    rc = main(["sweep", srv.base_url, "--lengths", "4,16,64,256", "--until-ci", "5",
               "--budget", "60", "--format", "json", "--out", str(tmp_path / "r.jsonl")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    d = json.loads(cap.out)
    u = d["live"]["until_ci"]
    assert u["target_pct"] == 5 and u["probes"] <= 60
    if u["reason"] == "target reached":
        assert u["half_width_pct"] <= 5
    assert u["probes"] == len(read_run(tmp_path / "r.jsonl")[0])


def test_budget_caps_a_sweep(fake_server, tmp_path, capsys):
    srv = server(fake_server)
    rc = main(["sweep", srv.base_url, "--lengths", "4,16,64,256", "--repeats", "5",
               "--budget", "6", "--out", str(tmp_path / "r.jsonl")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert len(read_run(tmp_path / "r.jsonl")[0]) == 6
    assert "until-ci  probe budget spent: 6 probes" in cap.out


@pytest.mark.parametrize("bad", ["0", "-3", "10x", "5m,6m", ""])
def test_budget_rejects_bad_values(bad, capsys):
    with pytest.raises(SystemExit) as e:
        main(["sweep", "http://127.0.0.1:9", "--budget", bad])
    assert e.value.code == 2


@pytest.mark.parametrize("url, why", [
    ("http://[::1", "not a valid URL"),
    ("http://127.0.0.1:99999", "not a valid URL"),
    ("http://127.0.0.1:abc", "not a valid URL"),
    ("", "an empty URL"),
    ("http://", "no host in the URL"),
    ("ftp://127.0.0.1/", "it must start with http:// or https://"),
])
def test_a_bad_url_is_a_usage_error_before_anything_is_sent(url, why, capsys):
    with pytest.raises(SystemExit) as ei:
        main(["sweep", url])
    err = capsys.readouterr().err
    assert ei.value.code == 2 and why in err and "internal error" not in err


def test_a_password_in_the_url_is_never_shown(fake_server, tmp_path, capsys):
    srv = server(fake_server)
    url = srv.base_url.replace("http://", "http://user:hunter2secretpw@")
    rc = main(["sweep", url, "--lengths", "16,64", "--format", "json",
               "--out", str(tmp_path / "r.jsonl")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "hunter2secretpw" not in cap.out + cap.err + (tmp_path / "r.jsonl").read_text()
    # the credentials left the URL where it entered: what is shown has none at all
    d = json.loads(cap.out)
    assert d["live"]["base_url"] == srv.base_url
    # with no API key they are sent as Basic auth, and the summary says so
    assert srv.requests[0].headers["authorization"].startswith("Basic ")
    assert any("sent as HTTP Basic auth" in n for n in d["live"]["notes"])
    rc = main(["sweep", "http://user:hunter2secretpw@127.0.0.1:9", "--lengths", "16"])
    err = capsys.readouterr().err
    assert rc == 3 and "hunter2secretpw" not in err and "cannot reach http://127.0.0.1:9" in err


def test_default_lengths_are_capped_by_time_and_said_once(fake_server, tmp_path, capsys,
                                                          monkeypatch):
    """A slow target (1 ms a token, 4,096-token context): `sweep URL` with the default
    lengths never sends a probe expected over the time cap (here 0.3 s; 5 s by default,
    where a CPU's 4,007-token probe took 47 s); the header says lengths are capped by time,
    one note says which, to what and why, once, in the header's place, not again in the
    summary; the JSON summary keeps it.  --lengths runs every length given."""
    import prefilltui.session as session_mod
    monkeypatch.setattr(session_mod, "TIME_CAP_S", 0.3)

    srv = fake_server({"GET /v1/models": models_reply("m", max_model_len=4096),
                       "POST /v1/completions": per_token_completion()})
    rc = main(["sweep", srv.base_url, "--seed", "1", "--no-telemetry",
               "--out", str(tmp_path / "r.jsonl")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    rows = [r for r in read_run(tmp_path / "r.jsonl")[0] if not r.warmup]
    longest = max(r.requested_tokens for r in rows)
    assert 87 < longest < 406 and max(r.ttft_s for r in rows) < 0.3 * 1.5
    assert "a length whose probe is expected over 0.3 s is capped" in cap.out.splitlines()[0]
    notes = [x for x in cap.out.splitlines() if "over the longest prompt expected within" in x]
    assert len(notes) == 1 and notes[0].startswith("  note: lengths 406, 878, 1896, 4007 ")
    assert f"capped to {longest} tokens" in notes[0]
    # the context cap's note: once too (it was printed again under the run file)
    assert sum("over the longest prompt the server takes" in x
               for x in cap.out.splitlines()) == 1
    rc = main(["sweep", srv.base_url, "--seed", "1", "--no-telemetry", "--format", "json",
               "--out", str(tmp_path / "r2.jsonl")])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and sum("over the longest prompt expected within 0.3 s" in n
                           for n in d["live"]["notes"]) == 1
    rc = main(["sweep", srv.base_url, "--lengths", "4,600", "--warmup", "0",
               "--out", str(tmp_path / "r3.jsonl")])
    out = capsys.readouterr().out
    assert rc == 0 and "expected over" not in out and "expected within" not in out
    assert sorted(r.requested_tokens for r in read_run(tmp_path / "r3.jsonl")[0]) == [4, 600]
