"""Run file: round trip, bad lines reported, each line flushed (kill -9 safe)."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from prefilltui.measure.runfile import RunWriter, default_run_path
from prefilltui.measure.runfile import read_run
from prefilltui.model.probe_notes import DepthInfo
from prefilltui.model.types import ProbeResult


def test_round_trip(tmp_path):
    p = tmp_path / "sub" / "run.jsonl"
    rs = [ProbeResult(seq=i, requested_tokens=64 * i, prompt_tokens=64 * i, ttft_s=0.01 * i, ok=True,
                      extra={"from_a_newer_version": [1]} if i == 3 else {}) for i in range(1, 4)]
    rs[1].notes.n_ctx = 4096
    rs[1].notes.ignored.append("cached tokens '9' is more than the 8 prompt tokens")
    rs[1].queue_source = "idle"
    rs[2].depth = DepthInfo(depth=512, role="probe", prefix_tokens=515, new_tokens=64,
                            verified=False, flag="no cached-token count")
    with RunWriter(p) as w:
        for r in rs:
            w.append(r)
    back, problems = read_run(p)
    assert problems == [] and back == rs
    # the declared notes keep the run file's keys under "extra" (docs/runfile.md)
    lines = [json.loads(x) for x in p.read_text().splitlines() if '"record"' not in x]
    assert "extra" not in lines[0]
    assert lines[1]["extra"] == {"n_ctx": 4096, "queue_source": "idle",
                                 "ignored": ["cached tokens '9' is more than the 8 prompt tokens"]}
    assert lines[2]["extra"] == {"depth": 512, "depth_role": "probe", "depth_prefix_tokens": 515,
                                 "depth_new_tokens": 64, "depth_verified": False,
                                 "depth_flag": "no cached-token count",
                                 "from_a_newer_version": [1]}


def test_notes_of_the_wrong_type_are_kept_untyped_and_the_line_loads():
    r = ProbeResult.from_json({"seq": 1, "ok": True, "ttft_s": 0.1,
                               "extra": {"n_ctx": "big", "queue_source": "guessed",
                                         "ignored": "x", "depth_role": "probe", "depth": 64}})
    assert r.notes.n_ctx is None and r.queue_source is None and r.notes.ignored == []
    assert r.depth.depth == 64 and r.depth.verified is None
    assert r.extra == {"n_ctx": "big", "queue_source": "guessed", "ignored": "x"}


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
        from prefilltui.measure.runfile.writer import RunWriter
        from prefilltui.model.types import ProbeResult
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
    from prefilltui.measure.runfile import RunWriter
    p = tmp_path / "empty.jsonl"
    RunWriter(p).close()
    assert not p.exists()
    kept = tmp_path / "kept.jsonl"
    kept.write_text("")
    RunWriter(kept).close()
    assert kept.exists()


def test_impossible_durations_and_foreign_objects_never_enter_the_analysis(tmp_path):
    """A negative or absurd TTFT (hand-edited or foreign lines) once dragged a robust
    fit from ~30k to 103k tok/s with an intercept of -487 ms: such lines are skipped
    and named, as is a JSON object that is no probe at all."""
    import json

    from prefilltui.measure.runfile import read_run
    from prefilltui.model.types import ProbeResult

    good = ProbeResult(seq=1, requested_tokens=64, prompt_tokens=64, ok=True, ttft_s=0.05)
    lines = [json.dumps(good.to_json())]
    for field, value in (("ttft_s", -5.0), ("ttft_s", 0.0), ("ttft_s", 1e308),
                         ("server_prefill_s", -1.0), ("total_s", 1e9)):
        bad = good.to_json()
        bad[field] = value
        lines.append(json.dumps(bad))
    lines += ["{}", '{"a": 1}']
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    results, problems = read_run(path)
    assert [r.ttft_s for r in results] == [0.05]
    assert len(problems) == 7
    assert problems[0].startswith("line 2: ttft_s is '-5.0', not a duration from 0 to 86400 s")
    assert problems[-1] == "line 8: not a probe record (no ok / requested_tokens)"


def test_calibration_requests_are_kept_apart_from_results(tmp_path):
    """Every request the server was sent is in the file; calibration lines are no results."""
    from prefilltui.measure.runfile import RotatingRunWriter, RunWriter
    from prefilltui.measure.runfile import read_run
    from prefilltui.model.probe_notes import ProbeNotes

    for w in (RunWriter(tmp_path / "a.jsonl"), RotatingRunWriter(tmp_path / "b.jsonl", max_bytes=10**6)):
        w.append_calibration(ProbeResult(requested_tokens=48, ok=True, ttft_s=0.01, warmup=True,
                                         notes=ProbeNotes(calibration=True, request_id="x-1")))
        w.append(ProbeResult(seq=1, requested_tokens=64, prompt_tokens=64, ok=True, ttft_s=0.02))
        w.close()
        assert w.count == 1
        cal: list = []
        results, problems = read_run(w.path, calibration=cal)
        assert problems == [] and [r.seq for r in results] == [1]
        assert len(cal) == 1 and cal[0].notes.request_id == "x-1" and cal[0].warmup
        assert cal[0].notes.calibration
        assert read_run(w.path)[0] == results  # skipped when not asked for
