"""Running llama.cpp's ``llama-server`` on a free loopback port (``LlamaServer``),
and saying in words how it ended (``describe_exit``).

    with LlamaServer(binary, gguf, threads=2) as srv:
        run_sweep(args, srv.base_url)

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
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from typing import IO, Iterator, Sequence

from prefilltui.demo.steps import DemoSetupError

#: <linux/prctl.h>
PR_SET_PDEATHSIG = 1
#: Default context size in tokens: room for the demo's 1,024-token sweep and more.
DEFAULT_CTX = 4096


#: What a death by each signal most likely means for llama-server, for the message.
#: A ``-march=native`` build of ggml on a VM whose CPU advertises AMX died with
#: SIGILL (``tilezero``) on one machine and SIGSEGV (``ldtilecfg`` in
#: ``ggml_backend_amx_mul_mat``) on another, both at the first decode.
SIGNAL_MEANING = {
    signal.SIGILL: ("illegal instruction", "the binary uses CPU instructions this machine "
                    "does not allow"),
    signal.SIGSEGV: ("segmentation fault", "a bug in this build, a model it cannot read, or "
                     "CPU features this machine advertises but does not allow (AMX on some "
                     "VMs)"),
    signal.SIGBUS: ("bus error", "a truncated model file or a full disk"),
    signal.SIGFPE: ("arithmetic exception", "a bug in this build"),
    signal.SIGABRT: ("aborted", "llama.cpp hit an internal check (see the log)"),
    signal.SIGKILL: ("killed", "out of memory?"),
}


def describe_exit(returncode: int | None, when: str = "") -> str:
    """How a process ended, in words, with ``when`` (e.g. "during start-up") placed
    after the verb: ``"exited during start-up (exit code 1)"``; for a death by a
    signal (``returncode`` -N) ``"crashed during start-up with SIGILL (illegal
    instruction): the binary uses CPU instructions this machine does not allow"``;
    SIGKILL reads "was killed ... (SIGKILL): out of memory?"; SIGTERM/SIGINT/SIGHUP
    (a stop, not a crash) read "was stopped ... by SIGTERM"."""
    w = f" {when}" if when else ""
    if returncode is None:
        return f"ended{w} with no exit status"
    if returncode >= 0:
        return f"exited{w} (exit code {returncode})"
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"crashed{w} with signal {-returncode}"
    if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        return f"was stopped{w} by {sig.name}"
    what, why = SIGNAL_MEANING.get(sig, ("", ""))
    if sig == signal.SIGKILL:
        return f"was killed{w} (SIGKILL): {why}"
    return (f"crashed{w} with {sig.name}" + (f" ({what})" if what else "")
            + (f": {why}" if why else ""))


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


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (bound to 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


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

def _stop_ref(ref: "weakref.ref[ManagedServer]") -> None:
    srv = ref()
    if srv is not None:
        srv.stop()


class ManagedServer:
    """A server process prefilltui starts on a free 127.0.0.1 port and stops on every
    way out (context manager): the common interface of the demo targets
    (``LlamaServer`` here, ``prefilltui.demo.vllm.VllmServer``).

    ``start()`` spawns it and waits until ``ready()`` (``ready_path`` answers 200);
    ``stop()`` sends SIGTERM to its process group; ``facts()`` says what runs.
    Subclasses give ``label`` (for messages), ``ready_path``, ``build_command(port)``
    and ``env()``.

    Attributes once started: ``port``, ``base_url`` ("http://127.0.0.1:PORT"),
    ``pid``, ``log_path``, ``command`` (the argv), ``ready_s`` (seconds from spawn to
    ready).  Raises (from start/__enter__): ServerStartError with the log tail when
    the process exits or is not ready within ``startup_timeout`` seconds.
    """

    label = "server"
    ready_path = "/health"

    def __init__(self, *, startup_timeout: float = 120.0,
                 log_path: str | os.PathLike | None = None, host: str = "127.0.0.1"):
        self.startup_timeout = startup_timeout
        self.host = host
        self._log_given = log_path is not None
        self.log_path: Path | None = Path(log_path) if log_path else None
        self._log: IO[bytes] | None = None
        self._proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.command: list[str] = []
        self.returncode: int | None = None
        self.ready_s: float | None = None
        self._atexit = None

    # -- what a subclass gives
    def build_command(self, port: int) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str] | None:
        """The child's environment (None: inherit ours)."""
        return None

    def facts(self) -> dict[str, object]:
        """What runs: engine label, argv, pid, URL, start-up seconds, log path."""
        return {"engine": self.label, "command": list(self.command), "pid": self.pid,
                "base_url": self.base_url if self.port else None, "ready_s": self.ready_s,
                "log": str(self.log_path) if self.log_path else None}

    def compute_pids(self) -> dict[str, int]:
        """{name: pid} of the processes doing the server's work, for the CPU gauges
        (the server process itself; engines that compute in child processes name
        those)."""
        return {self.label: self.pid} if self.pid else {}

    # -- properties
    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError(f"{self.label} not started")
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
        self.command = self.build_command(self.port)
        if self.log_path is None:
            stem = self.label.lower().replace(" ", "-")
            fd, name = tempfile.mkstemp(prefix=f"prefilltui-{stem}-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self._log = open(self.log_path, "ab")
        self._log.write(f"$ {' '.join(self.command)}\n".encode())
        self._log.flush()
        self._t_spawn = time.monotonic()
        self._proc = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_make_preexec(os.getpid()), close_fds=True,
            env=self.env())
        if self._atexit is None:
            self._atexit = lambda ref=weakref.ref(self): _stop_ref(ref)
            atexit.register(self._atexit)

    def ready(self) -> bool:
        """True when ``ready_path`` answers HTTP 200 now (one 2 s request)."""
        if self.port is None:
            return False
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(self.base_url + self.ready_path, timeout=2.0) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def start(self) -> "ManagedServer":
        """Start and wait until ``ready()``.  Retries twice with a new port when the
        port was taken in between."""
        try:
            return self._start()
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C / SIGTERM while waiting
            self.stop()
            raise
        except BaseException:  # no server left behind; the log is kept for the user
            self.stop(keep_log=True)
            raise

    def _start(self) -> "ManagedServer":
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
                    raise ServerStartError(f"{self.label} {describe_exit(rc, 'during start-up')}"
                                           f"; log {self.log_path}:\n{tail}",
                                           self.log_path, rc)
                if self.ready():
                    self.ready_s = time.monotonic() - self._t_spawn
                    return self
                if time.monotonic() > deadline:
                    tail = self.log_tail()
                    self.stop(keep_log=True)
                    raise ServerStartError(
                        f"{self.label} did not become healthy within {self.startup_timeout:g} s "
                        f"({self.ready_path} never answered 200); log {self.log_path}:\n{tail}",
                        self.log_path)
                time.sleep(0.1 if self.startup_timeout <= 300 else 0.5)
        raise ServerStartError(f"{self.label} could not bind a free port", self.log_path)

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

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        # keep the log when leaving on an error, so the user can read it
        self.stop(keep_log=exc_type is not None and not issubclass(
            exc_type, (KeyboardInterrupt, SystemExit)))


class LlamaServer(ManagedServer):
    """A running ``llama-server`` on 127.0.0.1 (context manager; see ManagedServer).

    Args:
        binary, gguf: paths from ``find_llama_server`` / ``ensure_gguf``.
        threads: ``-t`` CPU threads (default: os.cpu_count()).
        ctx: ``-c`` context size in tokens (default 4096).
        extra_args: passed to llama-server after ours (``--llama-arg``).
        startup_timeout: seconds to wait for ``/health`` to answer 200.
        log_path: where the server's stdout+stderr go (default: a temp file,
            deleted on a clean stop, kept when start-up fails).
    """

    label = "llama-server"
    ready_path = "/health"

    def __init__(self, binary: str | os.PathLike, gguf: str | os.PathLike, *,
                 threads: int | None = None, ctx: int = DEFAULT_CTX,
                 extra_args: Sequence[str] = (), startup_timeout: float = 120.0,
                 log_path: str | os.PathLike | None = None, host: str = "127.0.0.1"):
        super().__init__(startup_timeout=startup_timeout, log_path=log_path, host=host)
        self.binary = Path(binary)
        self.gguf = Path(gguf)
        self.threads = threads or os.cpu_count() or 1
        self.ctx = ctx
        self.extra_args = list(extra_args)

    def build_command(self, port: int) -> list[str]:
        return [str(self.binary), "-m", str(self.gguf), "--host", self.host,
                "--port", str(port), "--metrics", "-c", str(self.ctx),
                "-t", str(self.threads), *self.extra_args]
