"""One run summary: ``sweep --format json`` at the end of a run and ``report --format
json`` of its run file print the same ``RunSummary`` (schema prefilltui.summary/2),
field for field; only ``live`` (what the run file cannot hold) differs."""

from __future__ import annotations

import json

from prefilltui.cli import main
from prefilltui.model.summary.run import SCHEMA
from tests.fakeserver import llama_routes
from tests.unit.test_depth import AttentionLlama


def test_sweep_and_report_json_of_one_run_are_the_same_summary(fake_server, tmp_path, capsys):
    srv = fake_server({**llama_routes(), "POST /v1/completions": AttentionLlama()})
    out = tmp_path / "run.jsonl"
    assert main(["sweep", srv.base_url, "--lengths", "20,60,120,240", "--repeats", "2",
                 "--depth", "0,250", "--out", str(out), "--format", "json", "--no-telemetry",
                 "--seed", "3", "--peak-tflops", "2"]) == 0
    swept = json.loads(capsys.readouterr().out)
    assert main(["report", str(out), "--format", "json", "--peak-tflops", "2"]) == 0
    reported = json.loads(capsys.readouterr().out)
    assert swept["schema"] == reported["schema"] == SCHEMA
    assert swept["live"] is not None and reported["live"] is None
    assert swept["live"]["base_url"] == srv.base_url
    swept.pop("live")
    reported.pop("live")
    assert swept == reported
    # and it is a full summary: a fit, the per-length table, the depth table, a diagnosis
    assert swept["fit"]["n"] >= 3 and len(swept["percentiles"]["by_length"]) == 4
    assert [r["depth"] for r in swept["depth"]["rows"]] == [0, 250]
    assert swept["diagnosis"]["breakdown"]["available"]
    assert swept["roofline"]["mfu"] is not None and swept["verdict"]["level"]


def test_text_views_of_the_same_summary_agree(fake_server, tmp_path, capsys):
    """The sweep prints the analysis as report does (the same lines, from the same
    summary); the sweep adds its per-length table, report its percentile table."""
    srv = fake_server({**llama_routes(), "POST /v1/completions": AttentionLlama()})
    out = tmp_path / "run.jsonl"
    assert main(["sweep", srv.base_url, "--lengths", "20,60,120,240", "--repeats", "2",
                 "--out", str(out), "--no-telemetry", "--seed", "3"]) == 0
    swept = capsys.readouterr().out
    assert main(["report", str(out), "--no-plot"]) == 0
    reported = capsys.readouterr().out
    start = reported.index("Probes:")
    shared = [ln for ln in reported[start:].splitlines()
              if ln and not ln.startswith(("TTFT percentiles", "     tokens")) and
              not ln.lstrip()[:1].isdigit() and not ln.lstrip().startswith("all ")]
    for line in shared:
        assert line in swept, line
