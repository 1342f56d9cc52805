"""`report` on a run file written by an older version (tests/fixtures/runfile_3cadfd7.jsonl,
made by tests/fixtures/make_runfile_3cadfd7.py at commit 3cadfd7): it still loads, its
probes' notes (depth, ignored values, stream end) are read, and the summary holds."""

from __future__ import annotations

import json
from pathlib import Path

from prefilltui.cli import main
from prefilltui.measure.runfile import read_run

OLD = Path(__file__).parents[1] / "fixtures" / "runfile_3cadfd7.jsonl"


def test_old_run_file_loads_with_every_line():
    results, problems = read_run(OLD)
    assert problems == [] and len(results) == 38


def test_report_json_of_an_old_run_file(capsys):
    assert main(["report", str(OLD), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["probes"]["total"] == 13 and d["probes"]["fit_eligible"] == 11
    assert d["probes"]["errors"] == {"context_length": 1}
    assert d["fit"]["n"] == 11 and 3000 < d["fit"]["prefill_tokens_per_s"] < 3800
    rows = d["depth"]["rows"]
    assert [r["depth"] for r in rows] == [0, 400]
    assert [(r["verified"], r["probes"]) for r in rows] == [(12, 12), (9, 12)]


def test_report_text_of_an_old_run_file(capsys):
    assert main(["report", str(OLD), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert "Probes: 13 total, 12 ok, 1 failed, 1 warm-up" in out
    assert "Prefill at context depth" in out and "9/12" in out
