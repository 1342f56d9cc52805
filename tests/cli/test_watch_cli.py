"""The watch command's CLI surface: parsing, error exits without a traceback."""

from __future__ import annotations

from prefilltui.cli import build_parser, main


def test_url_form_and_theme_flag():
    p = build_parser()
    from prefilltui.cli import _normalise_argv

    args = p.parse_args(_normalise_argv(["http://127.0.0.1:9", "--theme", "light",
                                         "--max-tokens", "512"]))
    assert args.command == "watch" and args.urls == ["http://127.0.0.1:9"]
    assert args.theme == "light" and args.max_tokens == 512
    # several URLs, or a target file: the fleet overview (same command)
    args = p.parse_args(_normalise_argv(["http://a:1", "http://b:2", "--fleet-rate", "1"]))
    assert args.command == "watch" and args.urls == ["http://a:1", "http://b:2"]
    assert args.fleet_rate == 1.0
    args = p.parse_args(_normalise_argv(["--config", "targets.toml"]))
    assert args.command == "watch" and args.config == "targets.toml" and args.urls == []


def test_no_target_is_usage_error(capsys):
    assert main(["watch"]) == 2
    assert "no target" in capsys.readouterr().err


def test_unwritable_run_file_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = main(["watch", "http://127.0.0.1:9", "--out", str(blocker / "run.jsonl"),
                 "--no-telemetry"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("prefilltui: cannot write the run file") and "Traceback" not in err


def test_bad_sweep_range_is_usage_error(tmp_path, capsys):
    code = main(["watch", "http://127.0.0.1:9", "--out", str(tmp_path / "r.jsonl"),
                 "--min-tokens", "500", "--max-tokens", "20", "--no-telemetry"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("prefilltui: sweep range") and "Traceback" not in err
