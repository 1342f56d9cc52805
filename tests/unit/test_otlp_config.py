"""``otlp_listen`` / ``otlp_service`` in a targets file and ``--otlp-listen`` on the
command line: checked where they are read, and turned into the session's options."""

from __future__ import annotations

import pytest

from prefilltui.cli import build_parser
from prefilltui.exporter.config import load_toml, otlp_options


def test_toml_keys(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('[defaults]\notlp_listen = "127.0.0.1:4318"\n'
                 '[[target]]\nurl = "http://127.0.0.1:8001"\nname = "a"\notlp_service = "vllm-a"\n'
                 '[[target]]\nurl = "http://127.0.0.1:8002"\n')
    a, b = load_toml(str(f))
    assert a.otlp_listen == b.otlp_listen == "127.0.0.1:4318"
    assert otlp_options(a).names == ("a", "vllm-a")
    assert otlp_options(b).listen == "127.0.0.1:4318"


@pytest.mark.parametrize("line,why", [('otlp_listen = "4318"', "HOST:PORT"),
                                      ("otlp_listen = 4318", "HOST:PORT"),
                                      ('otlp_service = ""', "otlp_service")])
def test_bad_toml_values_are_refused(tmp_path, line, why):
    f = tmp_path / "t.toml"
    f.write_text(f'[[target]]\nurl = "http://127.0.0.1:8001"\n{line}\n')
    with pytest.raises(ValueError, match=why):
        load_toml(str(f))


def test_flag_checked_by_the_parser(capsys):
    args = build_parser().parse_args(["sweep", "http://127.0.0.1:9", "--otlp-listen", ":4318"])
    assert args.otlp_listen == ":4318"
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["watch", "http://127.0.0.1:9", "--otlp-listen", "nope"])
    assert e.value.code == 2 and "HOST:PORT" in capsys.readouterr().err
