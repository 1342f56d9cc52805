"""Run file: round trip, bad lines reported, each line flushed (kill -9 safe)."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from prefilltui.core.runfile import RunWriter, default_run_path, read_run
from prefilltui.core.types import ProbeResult


def test_round_trip(tmp_path):
    p = tmp_path / "sub" / "run.jsonl"
    rs = [ProbeResult(seq=i, requested_tokens=64 * i, prompt_tokens=64 * i, ttft_s=0.01 * i, ok=True,
                      extra={"n_ctx": 4096} if i == 2 else {}) for i in range(1, 4)]
    with RunWriter(p) as w:
        for r in rs:
            w.append(r)
    back, problems = read_run(p)
    assert problems == [] and back == rs


def test_bad_lines_reported(tmp_path):
    p = tmp_path / "run.jsonl"
    good = ProbeResult(seq=1, ok=True)
    import json
    p.write_text(json.dumps(good.to_json()) + "\nnot json\n[1,2]\n\n" + '{"seq": 2, "ok": tr')
    back, problems = read_run(p)
    assert [r.seq for r in back] == [1]
    assert [x.split(":")[0] for x in problems] == ["line 2", "line 3", "line 5"]
    assert "truncated" in problems[-1]
    with pytest.raises(FileNotFoundError):
        read_run(tmp_path / "missing.jsonl")


def test_each_line_survives_kill_9(tmp_path):
    p = tmp_path / "run.jsonl"
    code = textwrap.dedent(f"""
        import sys, time
        from prefilltui.core.runfile import RunWriter
        from prefilltui.core.types import ProbeResult
        w = RunWriter({str(p)!r})
        for i in range(3):
            w.append(ProbeResult(seq=i + 1, ok=True))
        print("written", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "written"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(10)
    back, problems = read_run(p)
    assert [r.seq for r in back] == [1, 2, 3] and problems == []


def test_default_run_path_in_user_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    p = default_run_path()
    assert str(p).startswith(str(tmp_path)) and p.suffix == ".jsonl" and "runs" in p.parts


def test_empty_run_file_is_not_left_behind_but_existing_files_are_kept(tmp_path):
    from prefilltui.core.runfile import RunWriter
    p = tmp_path / "empty.jsonl"
    RunWriter(p).close()
    assert not p.exists()
    kept = tmp_path / "kept.jsonl"
    kept.write_text("")
    RunWriter(kept).close()
    assert kept.exists()
