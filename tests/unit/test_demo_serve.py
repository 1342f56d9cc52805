"""``prefilltui demo --serve`` with the server start faked: the URL and
the commands to try are printed, the target runs until Ctrl-C or SIGTERM and is then
stopped, for both engines; a target that dies by itself ends it with its log; and the
live TUI shows the demo server's URL on screen.  tests/integration/test_demo_serve.py
runs it against the real llama-server."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from prefilltui.cli import main
from prefilltui.demo import serve
from prefilltui.exit_codes import ExitCode

URL = "http://127.0.0.1:45678"


class FakeTarget:
    """Stands for LlamaServer / VllmServer: started by ``with``, stopped on the way out."""

    label = "llama-server"
    made: list["FakeTarget"] = []

    def __init__(self, *args, **kw) -> None:
        self.args, self.kw = args, kw
        self.base_url, self.pid, self.log_path = URL, 4242, Path("/tmp/fake-server.log")
        self.ready_s = 1.0
        self.alive = True
        self.entered = self.stopped = False
        FakeTarget.made.append(self)

    def __enter__(self) -> "FakeTarget":
        self.entered = True
        return self

    def __exit__(self, *exc) -> None:
        self.stopped = True
        self.alive = False

    @property
    def running(self) -> bool:
        return self.alive

    def log_tail(self, lines: int = 20) -> str:
        return "main: server is listening\nsegfault in ggml"

    def compute_pids(self) -> dict[str, int]:
        return {self.label: self.pid}


class FakeVllm(FakeTarget):
    label = "vLLM"


@pytest.fixture
def faked(monkeypatch, tmp_path):
    """The targets' preparation and start faked; returns the waits serve makes."""
    import prefilltui.demo.server as server_mod
    import prefilltui.demo.target as target_mod
    import prefilltui.demo.vllm as vllm_mod

    FakeTarget.made.clear()
    gguf = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    monkeypatch.setattr(target_mod, "prepare_target",
                        lambda *a, **k: (tmp_path / "llama-server", gguf))
    monkeypatch.setattr(server_mod, "LlamaServer", FakeTarget)

    class Target:
        python = tmp_path / "venv/bin/python"
        model_dir = tmp_path / "smollm2-135m-random"

    monkeypatch.setattr(vllm_mod, "prepare_vllm", lambda **k: Target())
    monkeypatch.setattr(vllm_mod, "VllmServer", FakeVllm)
    waits: list[float] = []
    return waits


def stop_after(monkeypatch, waits, n: int, exc: BaseException) -> None:
    """serve's n-th wait raises ``exc`` (what Ctrl-C or a signal does to the sleep)."""
    def sleep(s: float) -> None:
        waits.append(s)
        if len(waits) >= n:
            raise exc
    monkeypatch.setattr(serve, "_sleep", sleep)


@pytest.mark.parametrize("engine,label", [(None, "llama-server"), ("llama", "llama-server"),
                                          ("vllm", "vLLM")])
def test_serve_prints_the_url_and_commands_and_runs_until_ctrl_c(faked, monkeypatch, capsys,
                                                                 engine, label):
    stop_after(monkeypatch, faked, 3, KeyboardInterrupt())
    argv = ["demo", "--serve"] + (["--engine", engine] if engine else [])
    rc = main(argv)
    cap = capsys.readouterr()
    assert rc == ExitCode.OK, cap.err
    out = cap.out.splitlines()
    assert out[0].startswith("prefilltui: demo target (") and out[0].endswith(
        f"serving at {URL}")
    cmd = serve.prefilltui_command()  # "prefilltui" when on PATH, else its path
    assert f"  {cmd} {URL}" in out
    assert f"  {cmd} sweep {URL}" in out
    assert f"  {cmd} cache-check {URL}" in out
    assert any(line.startswith("Ctrl-C stops it") for line in out)
    assert f"prefilltui: stopping {label}" in out
    srv, = FakeTarget.made
    assert srv.label == label and srv.entered and srv.stopped  # stopped on the way out
    assert len(faked) == 3  # it kept running until the interrupt


def test_sigterm_stops_it_cleanly(faked, monkeypatch, capsys):
    stop_after(monkeypatch, faked, 2, SystemExit(128 + signal.SIGTERM))
    rc = main(["demo", "--serve"])
    cap = capsys.readouterr()
    assert rc == ExitCode.OK, cap.err
    assert f"stopping llama-server (signal {int(signal.SIGTERM)})" in cap.out
    assert FakeTarget.made[0].stopped


def test_a_target_that_dies_ends_serving_with_its_log(faked, monkeypatch, capsys):
    def sleep(s: float) -> None:
        faked.append(s)
        FakeTarget.made[0].alive = False  # the server crashed

    monkeypatch.setattr(serve, "_sleep", sleep)
    rc = main(["demo", "--serve"])
    cap = capsys.readouterr()
    assert rc == ExitCode.FAILURE
    assert "llama-server exited by itself" in cap.err and "segfault in ggml" in cap.err


@pytest.mark.parametrize("extra", [["--headless"], ["--prepare-only"]])
def test_serve_goes_alone(faked, capsys, extra):
    assert main(["demo", "--serve", *extra]) == ExitCode.USAGE
    assert "--serve runs the target alone" in capsys.readouterr().err
    assert not FakeTarget.made


def test_the_tui_demo_is_given_its_servers_url(faked, monkeypatch):
    """Without --serve the TUI runs with the demo server's URL as its subtitle."""
    import prefilltui.commands.watch as watch

    seen = {}
    monkeypatch.setattr(watch, "run_tui",
                        lambda opts, display, url, **kw: seen.update(url=url, **kw) or 0)
    assert main(["demo"]) == ExitCode.OK
    assert seen["url"] == URL
    assert seen["sub_title"].startswith(f"demo target {URL} (llama.cpp, ")


async def test_the_subtitle_is_on_screen_at_80x24():
    from tests.tui.fakes import FAKE_RANGE, NOW, FakeRunner, FakeSampler, fixed_results
    from prefilltui.tui.app import build_app
    from prefilltui.tui.widgets.probe_log import ProbeLog

    app = build_app(lambda r, s: FakeRunner(r, s, preload=fixed_results()), FakeSampler(),
                    clock=lambda: NOW, sweep_range=FAKE_RANGE,
                    sub_title=f"demo target {URL} (llama.cpp, SmolLM2)")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.pause()
        assert app.query_one("#log", ProbeLog).border_subtitle.startswith(
            f"demo target {URL}")
        assert "127.0.0.1:45678" in app.export_screenshot()
        await pilot.press("q")


def test_serve_prints_a_command_the_user_can_run(faked, monkeypatch, capsys, tmp_path):
    """After `make demo` prefilltui is .venv/bin/prefilltui, not on PATH: the commands
    to try name that script (it printed a bare `prefilltui`, "command not found")."""
    import sys

    venv = tmp_path / "clone" / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("")
    script = venv / "prefilltui"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    elsewhere = tmp_path / "usr-bin"
    elsewhere.mkdir()
    monkeypatch.setattr(sys, "executable", str(venv / "python"))
    monkeypatch.setenv("PATH", str(elsewhere))
    stop_after(monkeypatch, faked, 1, KeyboardInterrupt())
    assert main(["demo", "--serve"]) == ExitCode.OK
    out = capsys.readouterr().out.splitlines()
    assert f"  {script} {URL}" in out and f"  {script} sweep {URL}" in out, out
    assert f"  prefilltui {URL}" not in out
    # on PATH (an activated venv, pip install --user): the name is enough
    monkeypatch.setenv("PATH", f"{elsewhere}:{venv}")
    assert serve.prefilltui_command() == "prefilltui"
    # another prefilltui first on PATH: this one's path, the one that is running
    other = elsewhere / "prefilltui"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    assert serve.prefilltui_command() == str(script)
    # no script beside the interpreter (python -m prefilltui from a checkout)
    script.unlink()
    monkeypatch.setenv("PATH", str(tmp_path))
    assert serve.prefilltui_command() == f"{venv / 'python'} -m prefilltui"
