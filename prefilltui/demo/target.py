"""The demo target, ready to run: the ``llama-server`` binary and the model,
smoke-tested together once per binary, model and CPU.

``prepare_target()`` obtains the binary (``find_llama_server``: a flag, PATH, the
cache, else a build, see ``prefilltui.demo.build``) and the model
(``prefilltui.demo.model.ensure_gguf``) and runs ``smoke_test`` the first time
they meet on this CPU.  A binary that dies by a signal is named ("crashed with
SIGILL (illegal instruction): ..."), never shown as a bare negative exit code.
A cached binary prefilltui built that crashes is marked and rebuilt once with the
next, more conservative profile (native -> x86-64-v3 -> x86-64-v2; see
``build.fallback_profile``); a user's own binary gets advice instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from prefilltui.demo import build as _build
from prefilltui.demo.steps import DemoSetupError, cache_root
from prefilltui.demo.build import (NATIVE, BuildProfile, build_llama_server, cached_llama_server,
                                   portable_profile)
from prefilltui.demo.model import ensure_gguf
from prefilltui.demo.server import LlamaServer, ServerStartError, describe_exit


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
    parts.append(_build.cpu_fingerprint())
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]
    return cache_root() / "smoke-ok" / f"{key}.json"


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
            raise ServerStartError(f"llama-server "
                                   f"{describe_exit(rc, 'while answering a 1-token completion')}"
                                   f" (smoke test); log {srv.log_path}:\n"
                                   f"{srv.log_tail()}", srv.log_path, rc)
        rc = srv.wait_exit(0.2)
        if rc is not None:
            raise ServerStartError(f"llama-server "
                                   f"{describe_exit(rc, 'right after a 1-token completion')}"
                                   f" (smoke test); log {srv.log_path}:\n"
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
                                     "cpu": _build.cpu_fingerprint(),
                                     "seconds": round(took, 3), "at": time.time()}) + "\n")


def _headline(e: Exception) -> str:
    """The first line of an error, without the colon that introduces its log tail."""
    return str(e).partition("\n")[0].rstrip(":")


def prepare_target(llama_server: str | os.PathLike | None = None,
                   gguf: str | os.PathLike | None = None, *, native: bool = False,
                   threads: int | None = None, build: bool = True,
                   stream: IO[str] | None = None) -> tuple[Path, Path]:
    """The demo target's binary and model, smoke-tested together on this machine.

    The binary comes from ``llama_server`` (the --llama-server flag), PATH, or
    prefilltui's cache/build: the portable profile, or with ``native`` the
    ``-march=native`` one.  The first use of each binary + model on this CPU runs
    ``smoke_test``.  When a cached binary that prefilltui built dies by a signal, it
    is marked (``build.mark_crashed``) and the next profile of
    ``build.fallback_profile`` is built once and tested; a profile is never
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
        reason = _build.crashed_here(cached) if cached.is_file() else None
        if reason is None:
            binary = _cached_or_built(profile, build=build, stream=stream)
            try:
                _smoke_once(binary, model, threads=threads, stream=stream)
                return binary, model
            except ServerStartError as e:
                if not e.crashed:
                    raise
                reason = _headline(e)
                _build.mark_crashed(binary, reason)
        nxt = _build.fallback_profile(profile)
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


