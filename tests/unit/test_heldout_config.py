"""Held-out variants of "config values are validated by type and range with
the key named": the sweep design flags a typo can blow up (a 1.6 GB plan for
--repeats 99999999, minutes of planning for --points 100000000, an endless --pause),
and config files as editors save them (a byte-order mark, Latin-1)."""

from __future__ import annotations

import pytest

from prefilltui.cli import main


@pytest.mark.parametrize("flag, value, words", [
    ("--repeats", "99999999", "--repeats: expected an integer >= 1 and <= 100,000"),
    ("--points", "100000000", "--points: expected an integer >= 1 and <= 1,000 lengths"),
    ("--warmup", "1000000000", "--warmup: expected an integer >= 0 and <= 10,000 probes"),
    ("--pause", "1e300", "--pause: expected a number >= 0 and <= 86,400 seconds"),
    ("--pause", "-1", "--pause: expected a number >= 0"),
])
def test_a_sweep_design_typo_is_refused_before_any_plan(capsys, flag, value, words):
    with pytest.raises(SystemExit) as e:
        main(["sweep", "http://127.0.0.1:9", flag, value, "--no-telemetry"])
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_an_exporter_file_with_a_byte_order_mark_is_read(tmp_path, capsys):
    """Windows Notepad saves UTF-8 with a BOM: tomllib refused it ("Invalid statement
    (at line 1, column 1)")."""
    from prefilltui.exporter.config import load_toml

    path = tmp_path / "targets.toml"
    path.write_bytes(b"\xef\xbb\xbf[[target]]\nurl = \"http://127.0.0.1:1\"\nname = \"a\"\n")
    (t,) = load_toml(str(path))
    assert t.name == "a"


def test_an_exporter_file_not_in_utf8_names_itself_and_the_byte(tmp_path, capsys):
    """Latin-1 "café": the message was "'utf-8' codec can't decode byte 0xe9 in position
    49", without the file."""
    path = tmp_path / "targets.toml"
    path.write_bytes(b"[[target]]\nurl = \"http://127.0.0.1:1\"\nname = \"caf\xe9\"\n")
    rc = main(["exporter", "--config", str(path), "--listen", "127.0.0.1:0"])
    err = capsys.readouterr().err
    assert rc == 2 and "targets.toml: not UTF-8 text (byte 49" in err and "save it as UTF-8" in err


def test_a_fifo_named_like_a_theme_does_not_block_the_tui_start(tmp_path):
    """Reading a FIFO in the themes directory blocked ``load_themes`` (the TUI never
    started); a directory named *.toml is skipped too."""
    import os
    import threading

    from prefilltui.tui.themes import load_themes

    d = tmp_path / "themes"
    d.mkdir()
    (d / "dir.toml").mkdir()
    if hasattr(os, "mkfifo"):
        os.mkfifo(d / "pipe.toml")
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("ts", load_themes(user_dir=d)),
                         daemon=True)
    t.start()
    t.join(10)
    assert "ts" in out, "load_themes blocked on the FIFO"
    problems = "\n".join(out["ts"].problems)
    assert "dir.toml: not a regular file" in problems
