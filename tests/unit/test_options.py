"""Options are typed records built once at the edge, with one default each.

The command line's defaults and the records' own defaults are the same values (a flag
not given builds the record's default), so a default lives in one place
(``model.defaults``); the exporter's TOML keys build the same records."""

from __future__ import annotations

import dataclasses
import json

import pytest

from prefilltui.cli import build_parser
from prefilltui.commands.common import analysis_options, session_options
from prefilltui.commands.exporter import targets_from_args
from prefilltui.exporter.config import check, load_toml, target
from prefilltui.options import (AnalysisOptions, ProbeOptions, RooflineSpec, RunFileOptions,
                                SessionOptions, SweepDesign, TelemetryOptions)

URL = "http://127.0.0.1:9"


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("command", ["sweep", "watch"])
def test_no_flags_build_the_records_defaults(command):
    assert session_options(parse(command, URL)) == SessionOptions()


def test_report_without_flags_analyses_with_the_defaults():
    assert analysis_options(parse("report", "run.jsonl")) == AnalysisOptions()


def test_exporter_targets_take_the_same_probe_defaults():
    (t,) = targets_from_args(parse("exporter", URL))
    assert t.probe == ProbeOptions() and t.roofline == RooflineSpec()
    assert t.probe.timeout_s == 120.0  # the sweep's cap, not a shorter exporter one


def test_flags_land_in_typed_fields():
    o = session_options(parse("sweep", URL, "--timeout", "7", "--api", "chat", "--insecure",
                              "--lengths", "64,16,64", "--repeats", "3", "--warmup", "0",
                              "--pause", "0.5", "--duty", "0.25", "--seed", "4",
                              "--until-ci", "2%", "--budget", "200,10m", "--no-telemetry",
                              "--gpus", "0", "--sample-hz", "5", "--out", "r.jsonl",
                              "--fit", "ols", "--window", "9", "--gpu", "h100-sxm",
                              "--efficiency", "0.4", "--dtype", "fp8", "--depth", "512,0"),
                        depths=[0, 512])
    assert o.probe == ProbeOptions(api="chat", insecure=True, timeout_s=7.0)
    assert o.design == SweepDesign(lengths=(64, 16, 64), repeats=3, warmup=0, pause_s=0.5,
                                   duty=0.25, seed=4, until_ci_pct=2.0, budget_probes=200,
                                   budget_s=600.0, depths=(0, 512))
    assert o.telemetry == TelemetryOptions(enabled=False, gpus="0", sample_hz=5.0)
    assert o.run_file == RunFileOptions(path="r.jsonl")
    assert o.analysis == AnalysisOptions(fit="ols", window=9, roofline=RooflineSpec(
        gpu="h100-sxm", efficiency=0.4, dtype="fp8"))


def test_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ProbeOptions().timeout_s = 1.0  # type: ignore[misc]


def test_model_config_is_read_once_at_the_edge(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 576, "num_hidden_layers": 30,
                               "num_attention_heads": 9, "num_key_value_heads": 3,
                               "intermediate_size": 1536, "vocab_size": 49152}))
    spec = analysis_options(parse("report", "r.jsonl", "--model-config", str(cfg))).roofline
    assert spec.config_shape is not None and spec.config_shape.layers == 30
    bad = analysis_options(parse("report", "r.jsonl", "--model-config",
                                 str(tmp_path / "missing.json"))).roofline
    assert bad.config_shape is None and "missing.json" in bad.config_problem


def test_exporter_reads_a_model_config_once_per_target(tmp_path):
    """The file is read when the target is checked; the window analysis after every
    probe uses that shape (before, analyze re-read config.json after every probe)."""
    from prefilltui.exporter.target import window_health
    from prefilltui.model.types import ProbeResult

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 576, "num_hidden_layers": 30,
                               "vocab_size": 49152, "intermediate_size": 1536}))
    (tmp_path / "t.toml").write_text(f'[[target]]\nurl = "{URL}"\nmodel_config = "{cfg}"\n'
                                     'peak_tflops = 2\n')
    (t,) = load_toml(str(tmp_path / "t.toml"))
    cfg.unlink()  # never read again
    window = [ProbeResult(seq=i, ok=True, requested_tokens=n, prompt_tokens=n,
                          ttft_s=0.01 + n / 3000) for i, n in enumerate([64, 256, 1024] * 3)]
    s = window_health(window, None, t)
    assert s.fit is not None and s.roofline.mfu is not None and s.verdict.level != "unknown-model"


def test_toml_keys_build_the_same_records():
    t = check(target(URL, name="a", timeout=30, model="m", gpu="h100-sxm", interval=2))
    assert t.probe == ProbeOptions(model="m", timeout_s=30)
    assert t.roofline == RooflineSpec(model="m", gpu="h100-sxm")
    assert t.interval_s == 2
    with pytest.raises(ValueError, match="unknown key 'intervall'"):
        target(URL, intervall=3)
