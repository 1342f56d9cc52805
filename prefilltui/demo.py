"""The local demo target: llama.cpp's ``llama-server`` with SmolLM2-135M on the CPU.

``prepare_target()`` obtains the two pieces (``find_llama_server()`` and
``ensure_gguf()``: building or downloading them once into the user cache, see
``demo_build``) and smoke-tests the pair once per binary, model and CPU;
``LlamaServer`` runs the server on a free loopback port for as long as a ``with``
block lasts::

    binary, gguf = prepare_target()
    with LlamaServer(binary, gguf, threads=2) as srv:
        run_sweep(args, srv.base_url)

A binary that dies by a signal is named ("crashed with SIGILL (illegal
instruction): ..."), never shown as a bare negative exit code.  A cached binary
prefilltui built that crashes is marked and rebuilt once with the next, more
conservative profile (native -> x86-64-v3 -> x86-64-v2; see
``demo_build.fallback_profile``); a user's own binary gets advice instead.

No orphan, ever: the server runs in its own session (its own process group, so a
terminal's Ctrl-C reaches only prefilltui, which then stops it in order), is
stopped on ``with`` exit (normal end or exception), at interpreter exit
(``atexit``), on SIGTERM/SIGHUP (``exit_on_signals`` turns them into SystemExit),
and, for the cases no Python code sees (``kill -9`` of prefilltui, a crash), the
kernel sends it SIGTERM when its parent dies (Linux ``PR_SET_PDEATHSIG``, set
between fork and exec).  PR_SET_PDEATHSIG fires when the *thread* that started the
server ends, so start it from a thread that outlives it (the main thread).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from typing import IO, Iterator, Sequence

from prefilltui import demo_build
from prefilltui.demo_build import (
    NATIVE,
    BuildProfile,
    DemoSetupError,
    build_llama_server,
    cached_gguf,
    cached_llama_server,
    fetch_gguf,
    portable_profile,
)

__all__ = [
    "DemoSetupError", "ServerStartError", "LlamaServer", "find_llama_server",
    "ensure_gguf", "exit_on_signals", "free_port", "describe_exit", "smoke_test",
    "prepare_target",
]

#: <linux/prctl.h>
PR_SET_PDEATHSIG = 1
#: Default context size in tokens: room for the demo's 1,024-token sweep and more.
DEFAULT_CTX = 4096


#: What a death by each signal most likely means for llama-server, for the message.
SIGNAL_MEANING = {
    signal.SIGILL: ("illegal instruction", "the binary uses CPU instructions this machine "
                    "does not allow"),
    signal.SIGSEGV: ("segmentation fault", "a bug in this build, or a model it cannot read"),
    signal.SIGBUS: ("bus error", "a truncated model file or a full disk"),
    signal.SIGFPE: ("arithmetic exception", "a bug in this build"),
    signal.SIGABRT: ("aborted", "llama.cpp hit an internal check (see the log)"),
    signal.SIGKILL: ("killed", "out of memory?"),
}


def describe_exit(returncode: int | None) -> str:
    """A process exit status in words: ``"exit code 1"``, or for a death by a signal
    (``returncode`` -N) ``"crashed with SIGILL (illegal instruction): the binary uses
    CPU instructions this machine does not allow"``; SIGKILL reads "was killed".
    SIGTERM/SIGINT (a stop, not a crash) read "stopped by SIGTERM"."""
    if returncode is None:
        return "no exit status"
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"crashed with signal {-returncode}"
    if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        return f"stopped by {sig.name}"
    what, why = SIGNAL_MEANING.get(sig, ("", ""))
    if sig == signal.SIGKILL:
        return f"was killed (SIGKILL): {why}"
    return f"crashed with {sig.name}" + (f" ({what})" if what else "") + (f": {why}" if why else "")


class ServerStartError(DemoSetupError):
    """llama-server did not become healthy, or died in the smoke test; the message
    ends with its log tail.  ``returncode`` is the process's exit status when it
    exited (negative: killed by that signal), else None."""

    def __init__(self, message: str, log_path: Path | None = None,
                 returncode: int | None = None):
        super().__init__(message, log_path)
        self.returncode = returncode

    @property
    def crashed(self) -> bool:
        """True when the process died by a signal other than a stop request."""
        return self.returncode is not None and self.returncode < 0 and -self.returncode not in (
            signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


# --------------------------------------------------------------------- the pieces

def find_llama_server(path: str | os.PathLike | None = None, *, build: bool = True,
                      stream: IO[str] | None = None,
                      profile: BuildProfile | None = None) -> Path:
    """The ``llama-server`` binary to run (not smoke-tested: see ``prepare_target``).

    Order: ``path`` (the --llama-server flag), ``llama-server`` on PATH, the cached
    build of ``profile`` (default ``portable_profile()``), else build it now (about
    7-15 minutes on 2 cores, with progress on ``stream``) unless ``build`` is False.
    Raises: DemoSetupError when ``path`` is not an executable file, when nothing is
    found and ``build`` is False, or when the build fails (naming the missing tool).
    """
    if path is not None:
        p = Path(path).expanduser()
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise DemoSetupError(f"--llama-server {path}: not an executable file")
        return p.resolve()
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    return _cached_or_built(profile or portable_profile(), build=build, stream=stream)


def _cached_or_built(profile: BuildProfile, *, build: bool, stream: IO[str] | None) -> Path:
    cached = cached_llama_server(profile=profile)
    if cached.is_file() and os.access(cached, os.X_OK):
        return cached
    if not build:
        raise DemoSetupError(f"llama-server not found on PATH nor at {cached}; "
                             "run `prefilltui demo --prepare-only` to build it")
    return build_llama_server(stream=stream, profile=profile)


def ensure_gguf(path: str | os.PathLike | None = None, *, fetch: bool = True,
                stream: IO[str] | None = None) -> Path:
    """The model file: ``path`` (the --gguf flag), else the cached
    SmolLM2-135M-Instruct Q4_1 GGUF, else download and cache it (~93 MB).
    Raises: DemoSetupError when ``path`` is not a file or the download fails."""
    if path is not None:
        p = Path(path).expanduser()
        if not p.is_file():
            raise DemoSetupError(f"--gguf {path}: no such file")
        return p.resolve()
    cached = cached_gguf()
    if cached.is_file() and cached.stat().st_size == demo_build.GGUF_SIZE:
        return cached
    if not fetch:
        raise DemoSetupError(f"model not cached at {cached}")
    return fetch_gguf(stream=stream)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (bound to 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ smoke test

#: The smoke test's request: llama-server's native completion endpoint, one token.
SMOKE_REQUEST = {"prompt": "Hello", "n_predict": 1, "cache_prompt": False}
#: Seconds to wait for the smoke test's completion (a 135M model answers in < 1 s).
SMOKE_TIMEOUT_S = 60.0


def _smoke_stamp(binary: Path, gguf: Path) -> Path:
    """Where a passed smoke test of this binary + model on this CPU is recorded:
    keyed by both files' real paths, sizes and mtimes and ``cpu_fingerprint()``."""
    parts = []
    for f in (binary, gguf):
        st = f.stat()
        parts += [str(f.resolve()), str(st.st_size), str(st.st_mtime_ns)]
    parts.append(demo_build.cpu_fingerprint())
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]
    return demo_build.cache_root() / "smoke-ok" / f"{key}.json"


def smoke_test(binary: str | os.PathLike, gguf: str | os.PathLike, *,
               threads: int | None = None, startup_timeout: float = 120.0) -> float:
    """Start ``binary`` with ``gguf`` (``-c 512``) and ask it for a 1-token completion.

    Returns the seconds the whole check took.
    Raises: ServerStartError when the server exits during start-up or while answering
    (``.crashed`` is True for a death by a signal; the message names it, see
    ``describe_exit``), or answers the completion with an error.
    """
    t0 = time.monotonic()
    with LlamaServer(binary, gguf, threads=threads, ctx=512,
                     startup_timeout=startup_timeout) as srv:
        req = urllib.request.Request(srv.base_url + "/completion",
                                     data=json.dumps(SMOKE_REQUEST).encode(),
                                     headers={"Content-Type": "application/json"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=SMOKE_TIMEOUT_S) as r:
                json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise ServerStartError(f"llama-server answered HTTP {e.code} to a 1-token "
                                   f"completion (smoke test); log {srv.log_path}:\n"
                                   f"{srv.log_tail()}", srv.log_path)
        except (urllib.error.URLError, OSError, ValueError) as e:
            rc = srv.wait_exit(2.0)
            if rc is None:
                raise ServerStartError(f"llama-server gave no answer to a 1-token completion "
                                       f"(smoke test: {e}); log {srv.log_path}:\n"
                                       f"{srv.log_tail()}", srv.log_path)
            raise ServerStartError(f"llama-server {describe_exit(rc)} while answering a "
                                   f"1-token completion (smoke test); log {srv.log_path}:\n"
                                   f"{srv.log_tail()}", srv.log_path, rc)
        rc = srv.wait_exit(0.2)
        if rc is not None:
            raise ServerStartError(f"llama-server {describe_exit(rc)} right after a 1-token "
                                   f"completion (smoke test); log {srv.log_path}:\n"
                                   f"{srv.log_tail()}", srv.log_path, rc)
    return time.monotonic() - t0


def _smoke_once(binary: Path, gguf: Path, *, threads: int | None, stream: IO[str]) -> None:
    """``smoke_test`` unless this binary + model already passed on this CPU."""
    stamp = _smoke_stamp(binary, gguf)
    if stamp.is_file():
        return
    print(f"prefilltui: smoke test of {binary} (a 1-token completion)", file=stream, flush=True)
    took = smoke_test(binary, gguf, threads=threads)
    print(f"prefilltui: smoke test passed in {took:.1f} s", file=stream, flush=True)
    with contextlib.suppress(OSError):
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps({"binary": str(binary), "gguf": str(gguf),
                                     "cpu": demo_build.cpu_fingerprint(),
                                     "seconds": round(took, 3), "at": time.time()}) + "\n")


def _headline(e: Exception) -> str:
    return str(e).partition("\n")[0]


def prepare_target(llama_server: str | os.PathLike | None = None,
                   gguf: str | os.PathLike | None = None, *, native: bool = False,
                   threads: int | None = None, build: bool = True,
                   stream: IO[str] | None = None) -> tuple[Path, Path]:
    """The demo target's binary and model, smoke-tested together on this machine.

    The binary comes from ``llama_server`` (the --llama-server flag), PATH, or
    prefilltui's cache/build: the portable profile, or with ``native`` the
    ``-march=native`` one.  The first use of each binary + model on this CPU runs
    ``smoke_test``.  When a cached binary that prefilltui built dies by a signal, it
    is marked (``demo_build.mark_crashed``) and the next profile of
    ``demo_build.fallback_profile`` is built once and tested; a profile is never
    tried twice, so this never loops.

    Returns: (binary, gguf).
    Raises: DemoSetupError / ServerStartError with a one-line reason (the signal
    named, and what to do) when no binary passes.
    """
    stream = stream if stream is not None else sys.stderr
    if llama_server is not None or shutil.which("llama-server"):
        binary = find_llama_server(llama_server, stream=stream)  # a bad flag fails first
        model = ensure_gguf(gguf, stream=stream)
        where = "--llama-server" if llama_server is not None else "PATH"
        try:
            _smoke_once(binary, model, threads=threads, stream=stream)
        except ServerStartError as e:
            if e.crashed:
                e.args = (_headline(e) + f"\n{binary} (from {where}) was not built by "
                          "prefilltui: rebuild it for this CPU (cmake -DGGML_NATIVE=OFF), or "
                          "run without --llama-server and with no llama-server on PATH to "
                          "let prefilltui build a portable one", )
            raise
        return binary, model
    model = ensure_gguf(gguf, stream=stream)
    profile: BuildProfile | None = NATIVE if native else portable_profile()
    tried: list[str] = []
    while profile is not None and profile.name not in tried:
        tried.append(profile.name)
        cached = cached_llama_server(profile=profile)
        reason = demo_build.crashed_here(cached) if cached.is_file() else None
        if reason is None:
            binary = _cached_or_built(profile, build=build, stream=stream)
            try:
                _smoke_once(binary, model, threads=threads, stream=stream)
                return binary, model
            except ServerStartError as e:
                if not e.crashed:
                    raise
                reason = _headline(e)
                demo_build.mark_crashed(binary, reason)
        nxt = demo_build.fallback_profile(profile)
        if nxt is None or nxt.name in tried:
            raise DemoSetupError(
                f"the {profile.name} build of llama-server {reason.removeprefix('llama-server ')}"
                f"\nno more conservative build to try (tried: {', '.join(tried)}); use your own "
                "with --llama-server PATH")
        then = (f"using the portable {nxt.name} build instead"
                if cached_llama_server(profile=nxt).is_file()
                else f"rebuilding it once with the portable {nxt.name} configuration")
        print(f"prefilltui: the {profile.name} build of llama-server "
              f"{reason.removeprefix('llama-server ')}\nprefilltui: {then}",
              file=stream, flush=True)
        profile = nxt
    raise DemoSetupError(f"no llama-server build runs on this machine (tried: {', '.join(tried)})")


# ---------------------------------------------------------------- child set-up

def _prctl():
    """libc's prctl, resolved in the parent (no dlopen between fork and exec)."""
    if not os.uname().sysname == "Linux":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


def _make_preexec(parent_pid: int):
    prctl = _prctl()

    def preexec() -> None:  # runs in the child between fork and exec
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took hold
            os._exit(1)

    return preexec


@contextlib.contextmanager
def exit_on_signals(signals: Sequence[int] = (signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """Within the block, SIGTERM/SIGHUP raise ``SystemExit(128 + signum)`` in the main
    thread, so ``with`` blocks (LlamaServer) unwind and clean up.  A second signal
    gets the default action.  A no-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, _frame):
        for s in signals:
            signal.signal(s, signal.SIG_DFL)
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, handler) for s in signals}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# ------------------------------------------------------------------ the server

def _stop_ref(ref: "weakref.ref[LlamaServer]") -> None:
    srv = ref()
    if srv is not None:
        srv.stop()


class LlamaServer:
    """A running ``llama-server`` on 127.0.0.1 (context manager).

    Args:
        binary, gguf: paths from ``find_llama_server`` / ``ensure_gguf``.
        threads: ``-t`` CPU threads (default: os.cpu_count()).
        ctx: ``-c`` context size in tokens (default 4096).
        extra_args: passed to llama-server after ours (``--llama-arg``).
        startup_timeout: seconds to wait for ``/health`` to answer 200.
        log_path: where the server's stdout+stderr go (default: a temp file,
            deleted on a clean stop, kept when start-up fails).

    Attributes once started: ``port``, ``base_url`` ("http://127.0.0.1:PORT"),
    ``pid``, ``log_path``, ``command``.
    Raises (from start/__enter__): ServerStartError with the log tail when the
    process exits or /health stays unhealthy past ``startup_timeout``.
    """

    def __init__(self, binary: str | os.PathLike, gguf: str | os.PathLike, *,
                 threads: int | None = None, ctx: int = DEFAULT_CTX,
                 extra_args: Sequence[str] = (), startup_timeout: float = 120.0,
                 log_path: str | os.PathLike | None = None, host: str = "127.0.0.1"):
        self.binary = Path(binary)
        self.gguf = Path(gguf)
        self.threads = threads or os.cpu_count() or 1
        self.ctx = ctx
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self.host = host
        self._log_given = log_path is not None
        self.log_path: Path | None = Path(log_path) if log_path else None
        self._log: IO[bytes] | None = None
        self._proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.command: list[str] = []
        self.returncode: int | None = None
        self._atexit = None

    # -- properties
    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("LlamaServer not started")
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait_exit(self, timeout: float) -> int | None:
        """The process's exit status if it exits within ``timeout`` s, else None."""
        if self._proc is None:
            return self.returncode
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path:
            return ""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- lifecycle
    def _spawn(self) -> None:
        self.port = free_port(self.host)
        self.command = [str(self.binary), "-m", str(self.gguf), "--host", self.host,
                        "--port", str(self.port), "--metrics", "-c", str(self.ctx),
                        "-t", str(self.threads), *self.extra_args]
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="prefilltui-llama-server-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self._log = open(self.log_path, "ab")
        self._log.write(f"$ {' '.join(self.command)}\n".encode())
        self._log.flush()
        self._proc = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_make_preexec(os.getpid()), close_fds=True)
        if self._atexit is None:
            self._atexit = lambda ref=weakref.ref(self): _stop_ref(ref)
            atexit.register(self._atexit)

    def _health(self) -> int | None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(self.base_url + "/health", timeout=2.0) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except (urllib.error.URLError, OSError):
            return None

    def start(self) -> "LlamaServer":
        """Start and wait until ``/health`` answers 200.  Retries twice with a new
        port when the port was taken in between."""
        try:
            return self._start()
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C / SIGTERM while waiting
            self.stop()
            raise
        except BaseException:  # no server left behind; the log is kept for the user
            self.stop(keep_log=True)
            raise

    def _start(self) -> "LlamaServer":
        for attempt in range(3):
            self._spawn()
            deadline = time.monotonic() + self.startup_timeout
            while True:
                assert self._proc is not None
                if self._proc.poll() is not None:
                    tail = self.log_tail()
                    rc = self._proc.returncode
                    self._close(keep_log=True)
                    low = tail.lower()
                    if attempt < 2 and ("couldn't bind" in low or "address already in use" in low):
                        break  # port race: try another
                    verb = describe_exit(rc)
                    verb = f"exited during start-up ({verb})" if rc is not None and rc >= 0 \
                        else f"{verb} during start-up"
                    raise ServerStartError(f"llama-server {verb}; log {self.log_path}:\n{tail}",
                                           self.log_path, rc)
                if self._health() == 200:
                    return self
                if time.monotonic() > deadline:
                    tail = self.log_tail()
                    self.stop(keep_log=True)
                    raise ServerStartError(
                        f"llama-server did not become healthy within {self.startup_timeout:g} s; "
                        f"log {self.log_path}:\n{tail}", self.log_path)
                time.sleep(0.1)
        raise ServerStartError("llama-server could not bind a free port", self.log_path)

    def stop(self, timeout: float = 10.0, *, keep_log: bool = False) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``timeout`` s; reaps
        it.  Idempotent; safe from atexit."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5.0)
        self._close(keep_log=keep_log)

    def _close(self, *, keep_log: bool) -> None:
        if self._proc is not None:
            with contextlib.suppress(Exception):
                self._proc.wait(0.1)
            self.returncode = self._proc.returncode
        if self._log is not None:
            self._log.close()
            self._log = None
            if not keep_log and not self._log_given and self.log_path:
                self.log_path.unlink(missing_ok=True)
        if self._atexit is not None:
            atexit.unregister(self._atexit)
            self._atexit = None

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        # keep the log when leaving on an error, so the user can read it
        self.stop(keep_log=exc_type is not None and not issubclass(
            exc_type, (KeyboardInterrupt, SystemExit)))
