"""Held-out variants of field and hostile inputs that crashed the app or held a file whole:
JSON nested past the recursion limit (stream, error body, run file, TOML), a lone
surrogate or an invisible format character in a server's model id, and local files
without end (/dev/zero as a config, a run file with a line of many MiB).

Each test failed before the fix (a traceback, ``UnicodeEncodeError`` mid-sweep, raw
zero-width characters on the screen, a whole file read into memory)."""

from __future__ import annotations

import json

import pytest

from tests.fakeserver import Reply, models_reply, sse_data, sse_done, sse_text
from prefilltui.cli import main
from prefilltui.measure.probe import ProbeClient
from prefilltui.measure.runfile import read_run_sessions
from prefilltui.model.sanitize import clean

DEEP = "[" * 100_000  # 100 KB; json.loads raises RecursionError on it


def ok_stream(n: int = 12) -> Reply:
    return Reply.sse([(0.02, sse_text("Hi")),
                      (0.03, sse_data({"choices": [], "usage": {"prompt_tokens": n,
                                                                "completion_tokens": 1}})),
                      (0.04, sse_done())])


async def one_probe(srv, **kw):
    async with ProbeClient(srv.base_url, model="m", timeout=5, **kw) as c:
        await c.discover()
        return await c.probe(16, prompt="hello world")


# ------------------------------------------------ JSON nested past the recursion limit

@pytest.mark.parametrize("where", ["stream", "error body", "error event"])
async def test_deeply_nested_json_from_a_server_is_a_failed_probe_not_a_crash(fake_server, where):
    reply = {"stream": Reply.sse([(0.02, b"data: " + DEEP.encode() + b"\n\n"),
                                  (0.03, sse_done())]),
             "error body": Reply(400, {"Content-Type": "application/json"}, DEEP.encode()),
             "error event": Reply.sse([(0.02, b"event: error\ndata: " + DEEP.encode() + b"\n\n")]),
             }[where]
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": reply})
    r = await one_probe(srv)  # was: RecursionError out of probe()
    assert not r.ok and r.error_kind in ("protocol", "http", "stream_error"), r.error_message
    assert len(r.error_message) <= 1000


def test_a_run_file_with_a_deeply_nested_line_is_reported_line_by_line(tmp_path, capsys):
    good = {"seq": 1, "ok": True, "requested_tokens": 100, "prompt_tokens": 100,
            "prompt_tokens_source": "usage", "ttft_s": 0.05, "total_s": 0.06}
    lines = [json.dumps({**good, "seq": i, "requested_tokens": n, "prompt_tokens": n,
                         "ttft_s": 0.01 + n * 1e-4})
             for i, n in enumerate((100, 200, 400, 800, 100, 200), 1)]
    lines.insert(2, DEEP)
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rc = main(["report", str(path), "--no-plot"])  # was: a RecursionError traceback
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "line 3: JSON nested too deeply to read (skipped)" in cap.err
    assert "probes ok 6" in cap.out or "6 ok" in cap.out


@pytest.mark.parametrize("what", ["exporter", "theme"])
def test_a_toml_nested_past_the_recursion_limit_is_a_named_error(tmp_path, capsys, what):
    body = 'name = "t"\nprimary = "#4ea1f3"\n[variables]\nx = ' + "[" * 5000 + "]" * 5000 + "\n"
    if what == "theme":
        from prefilltui.tui.themes import load_themes

        d = tmp_path / "themes"
        d.mkdir()
        (d / "deep.toml").write_text(body)
        ts = load_themes(user_dir=d)  # was: RecursionError out of load_themes
        assert "t" not in ts.names()
        assert any("deep.toml" in p and "nested too deeply" in p for p in ts.problems)
        return
    path = tmp_path / "targets.toml"
    path.write_text('[[target]]\nurl = "http://127.0.0.1:1"\nlengths = '
                    + "[" * 5000 + "]" * 5000 + "\n")
    rc = main(["exporter", "--config", str(path), "--listen", "127.0.0.1:0"])
    err = capsys.readouterr().err
    assert rc == 2 and "targets.toml: nested too deeply to read" in err and "Traceback" not in err


# ------------------------------------------------ what a server's text holds

def test_clean_escapes_surrogates_and_invisible_format_characters():
    mid = "lla\ud800ma\u200b\u200d\u2060\ufeff\u00ad\U000e0041-8b"
    shown = clean(mid)
    shown.encode("utf-8")  # was: UnicodeEncodeError (surrogates not allowed)
    assert shown == "lla\\ud800ma\\u200b\\u200d\\u2060\\ufeff\\xad\\U000e0041-8b"
    assert clean("Qwen2.5-7B-Instruct — 7 × 10⁹ “params” é") == \
        "Qwen2.5-7B-Instruct — 7 × 10⁹ “params” é"  # visible text is left alone
    assert clean(shown) == shown  # idempotent


def test_a_lone_surrogate_and_zero_width_model_id_sweeps_and_reports(fake_server, tmp_path,
                                                                    capsys):
    model = "lla\ud800ma\u200b[/]"
    seen = []

    def complete(req):
        seen.append(req.body)
        n = len(req.json["prompt"].split())
        if n > 300:
            return Reply(400, {"Content-Type": "application/json"},
                         b'{"error": {"message": "bad \\ud800 model \\u200b"}}')
        return ok_stream(n)

    srv = fake_server({"GET /v1/models": Reply(200, {"Content-Type": "application/json"},
                                                json.dumps({"data": [{"id": model}]}).encode()),
                       "POST /v1/completions": complete})
    out = tmp_path / "run.jsonl"
    rc = main(["sweep", srv.base_url, "--lengths", "50,100,200,800", "--repeats", "1",
               "--warmup", "0", "--no-telemetry", "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err  # was: "sweep runner crashed: UnicodeEncodeError"
    shown = cap.out + cap.err
    assert "lla\\ud800ma\\u200b[/]" in shown and "\u200b" not in shown
    assert b'"model":"lla\\ud800ma\\u200b[/]"' in seen[0]  # the server's own id, sent back
    for args in ([], ["--format", "json"], ["--html", str(tmp_path / "r.html")],
                 ["--svg", str(tmp_path / "r.svg")]):
        assert main(["report", str(out), "--no-plot", *args]) == 0, args
        rep = capsys.readouterr()
        (rep.out + rep.err).encode("utf-8")
        assert "\u200b" not in rep.out + rep.err
    (tmp_path / "r.html").read_text(encoding="utf-8")


# ------------------------------------------------ local files without end

def test_a_config_file_that_never_ends_is_refused_unread(tmp_path):
    from prefilltui.model.roofline import model_from_config

    big = tmp_path / "config.json"
    with open(big, "wb") as f:  # sparse: 64 MiB of zeros, no disk used
        f.truncate(64 * 2**20)
    with pytest.raises(ValueError, match="larger than 4 MiB"):
        model_from_config(big)  # was: read whole (/dev/zero: until memory ran out)


def test_a_run_file_line_of_many_mib_is_skipped_and_the_rest_read(tmp_path):
    from prefilltui.measure.runfile import reader as runfile

    good = {"seq": 1, "ok": True, "requested_tokens": 100, "prompt_tokens": 100,
            "prompt_tokens_source": "usage", "ttft_s": 0.05, "total_s": 0.06}
    path = tmp_path / "run.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps(good) + "\n")
        f.write("x" * (runfile.MAX_LINE_CHARS + 10) + "\n")
        f.write(json.dumps({**good, "seq": 2}) + "\n")
    sessions, problems = read_run_sessions(path)
    assert [r.seq for s in sessions for r in s.results] == [1, 2]
    assert problems == [f"line 2: longer than {runfile.MAX_LINE_CHARS:,} characters "
                        "(skipped unread)"]


def test_a_line_without_end_stops_the_reading_with_bounded_memory(tmp_path, monkeypatch):
    """/dev/zero as a run file: one line that never ends.  A sparse file of 256 MiB of
    zeros stands for it (with the limits scaled down, the reader gives up after 1 MiB)."""
    from prefilltui.measure.runfile import reader as runfile

    monkeypatch.setattr(runfile, "MAX_LINE_CHARS", 2**16)
    monkeypatch.setattr(runfile, "_SKIP_CHARS", 2**16)
    monkeypatch.setattr(runfile, "_MAX_SKIP_PIECES", 16)
    zeros = tmp_path / "zeros.jsonl"
    with open(zeros, "wb") as f:
        f.truncate(256 * 2**20)
    sessions, problems = read_run_sessions(zeros)
    assert sessions == [] and len(problems) == 1 and "longer than 65,536" in problems[0]


def test_an_exporter_series_labelled_with_a_surrogate_model_id_renders():
    """The exposition is UTF-8: a lone surrogate in the ``model`` label raised
    UnicodeEncodeError in every /metrics render."""
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from prefilltui.exporter.collector import HealthCollector
    from prefilltui.exporter.snapshot import TargetSnapshot

    class Source:
        snapshot = TargetSnapshot(target="t", model="lla\ud800ma\u200b\U000e0041",
                                  server_kind="vllm", api="chat", interval_s=10.0)

    reg = CollectorRegistry()
    reg.register(HealthCollector([Source()], with_build_info=False))
    text = generate_latest(reg).decode("utf-8")
    assert 'model="lla\\\\ud800ma\\\\u200b\\\\U000e0041"' in text


def test_a_run_file_saved_with_a_byte_order_mark_keeps_its_first_line(tmp_path):
    """An editor on Windows saves UTF-8 with a BOM: the session line (line 1) was
    skipped as "Unexpected UTF-8 BOM", and with it the run's server facts."""
    from prefilltui.measure.runfile import read_session

    good = {"seq": 1, "ok": True, "requested_tokens": 100, "prompt_tokens": 100,
            "prompt_tokens_source": "usage", "ttft_s": 0.05, "total_s": 0.06}
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(
        {"record": "session", "session_id": "s1", "server": {"kind": "vllm"}},
        separators=(",", ":")).encode()
        + b"\n" + json.dumps(good).encode() + b"\n")
    sessions, problems = read_run_sessions(path)
    assert problems == [] and [s.session_id for s in sessions] == ["s1"]
    assert read_session(path)["server"]["kind"] == "vllm"


def test_a_run_file_joined_to_itself_counts_each_probe_once(tmp_path, capsys):
    """``cat run.jsonl run.jsonl > all.jsonl``: the second copy's session line has the
    same session id, so both copies were one run: 8 probes for 4, and a fit whose
    interval collapsed to zero width ("95% [51.03 to 51.03] ms")."""
    good = {"ok": True, "prompt_tokens_source": "usage", "total_s": 0.2}
    lines = ['{"record":"session","session_id":"s1","server":{"kind":"vllm"}}']
    for i, n in enumerate((100, 200, 400, 800), 1):
        lines.append(json.dumps({**good, "seq": i, "requested_tokens": n, "prompt_tokens": n,
                                 "ttft_s": 0.05 + n * 1e-4 + i * 1e-4,
                                 "started_at": 1.7e9 + i,
                                 "extra": {"request_id": f"prefilltui-ab-{i}"}}))
    one = "\n".join(lines) + "\n"
    path = tmp_path / "all.jsonl"
    path.write_text(one + one)
    sessions, problems = read_run_sessions(path)
    assert [len(s.results) for s in sessions] == [4]
    assert problems == [f"line {i + 5}: the same probe as line {i} (the file holds it twice)"
                        for i in range(2, 6)]
