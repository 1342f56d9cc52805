"""The real components the slower tests run against, obtained one way and missed one way.

    python -m tests.components obtain    # what `make test` runs between its two phases
    python -m tests.components status    # what is here, and the line that installs the rest

Components (what each costs was measured on this project's 2-core machines; README):

  llama-server   built from source into the cache by `prefilltui demo --prepare-only`
  vllm           vLLM 0.32.0 installed into its own venv by
                 `prefilltui demo --engine vllm --prepare-only`
  prometheus     Debian's ``prometheus`` (the server and promtool)
  alertmanager   Debian's ``prometheus-alertmanager`` (alertmanager and amtool)
  chromium       Debian's ``chromium`` (headless screenshots of the figures)
  tmux           Debian's ``tmux`` (the TUI run as a person runs it)
  yamllint       Debian's ``yamllint`` (the Helm chart's YAML and its rendering)
  podman         Debian's ``podman``, ``mmdebstrap``, ``runc`` and ``slirp4netns`` (the
                 exporter's image built from Debian's packages and run:
                 deploy/build-image.sh), as root

A test needs one through ``require(name)``: when it is missing, the test skips with
the exact install line, for every component the same way, except where
``PREFILLTUI_REQUIRE_COMPONENTS=1`` (``.ci/run`` sets it): there a missing component
fails the test.  Such tests carry the ``component`` marker, so ``make test`` runs them
after the fast tests, once ``obtain`` has run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable

REQUIRE_ENV = "PREFILLTUI_REQUIRE_COMPONENTS"


def _which(*names: str) -> Callable[[], str | None]:
    def find() -> str | None:
        for n in names:
            p = shutil.which(n)
            if p:
                return p
        return None
    return find


def _llama_server() -> str | None:
    from prefilltui.demo import build

    p = os.environ.get("PREFILLTUI_LLAMA_SERVER") or shutil.which("llama-server")
    if p:
        return p
    c = build.cached_llama_server()
    return str(c) if c.is_file() else None


def _vllm() -> str | None:
    from prefilltui.demo import vllm

    return str(vllm.vllm_python()) if vllm.installed() else None


def _prometheus() -> str | None:
    return shutil.which("prometheus") if shutil.which("promtool") else None


def _alertmanager() -> str | None:
    # Debian names the server prometheus-alertmanager
    found = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    return found if shutil.which("amtool") else None


def _podman() -> str | None:
    # the image's base root is made by mmdebstrap's root mode and run by rootful podman;
    # runc for cgroups crun refuses (v1 beside a v2 mount), slirp4netns for a network of
    # the container's own that still reaches the host's loopback (both podman's
    # Recommends, which CI's --no-install-recommends leaves out)
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("mmdebstrap", "runc",
                                                               "slirp4netns")):
        return None
    return shutil.which("podman")


@dataclass(frozen=True)
class Component:
    name: str
    find: Callable[[], str | None]
    install: str  # the exact line that obtains it
    apt: tuple[str, ...] = ()  # Debian packages, when it is one


COMPONENTS = {c.name: c for c in (
    Component("llama-server", _llama_server,
              "make target  (= .venv/bin/prefilltui demo --prepare-only; needs cmake, make, g++)"),
    Component("vllm", _vllm, ".venv/bin/prefilltui demo --engine vllm --prepare-only"),
    Component("prometheus", _prometheus, "apt-get install prometheus", ("prometheus",)),
    Component("alertmanager", _alertmanager, "apt-get install prometheus-alertmanager",
              ("prometheus-alertmanager",)),
    Component("chromium", _which("chromium", "chromium-browser", "google-chrome"),
              "apt-get install chromium", ("chromium",)),
    Component("tmux", _which("tmux"), "apt-get install tmux", ("tmux",)),
    Component("yamllint", _which("yamllint"), "apt-get install yamllint", ("yamllint",)),
    Component("podman", _podman,
              "apt-get install podman mmdebstrap runc slirp4netns",
              ("podman", "mmdebstrap", "runc", "slirp4netns")),
)}


def required() -> bool:
    return os.environ.get(REQUIRE_ENV) == "1"


def missing(name: str, detail: str = "") -> None:
    """Skip (or, with PREFILLTUI_REQUIRE_COMPONENTS=1, fail) the calling test for a
    missing component, naming the line that installs it."""
    import pytest

    c = COMPONENTS[name]
    msg = (f"{name} is not available{': ' + detail if detail else ''}; "
           f"install it with `{c.install}`")
    if required():
        pytest.fail(f"{msg} ({REQUIRE_ENV}=1: every component must be here)")
    pytest.skip(msg)


def require(name: str) -> str:
    """The component's path, else ``missing(name)``."""
    path = COMPONENTS[name].find()
    if path is None:
        missing(name)
    return path  # type: ignore[return-value]


# ------------------------------------------------------------------------- obtain

def _run(cmd: list[str]) -> int:
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, stdin=subprocess.DEVNULL).returncode


def obtain() -> int:
    """Obtain every missing component; returns how many are still missing.  Never
    stops at the first failure: each missing one is said with its install line."""
    apt = [p for c in COMPONENTS.values() if c.apt and c.find() is None for p in c.apt]
    if COMPONENTS["llama-server"].find() is None:  # its build needs these
        apt += [pkg for tool, pkg in (("cmake", "cmake"), ("g++", "g++"), ("make", "make"))
                if shutil.which(tool) is None]
    if apt:
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            print("components: not root or no apt-get: cannot install "
                  + " ".join(apt), flush=True)
        else:
            t0 = time.monotonic()
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            # the packages' services are not started (the tests start their own)
            rc_d = "/usr/sbin/policy-rc.d"
            own = not os.path.exists(rc_d)
            if own:
                with open(rc_d, "w") as fh:
                    fh.write("#!/bin/sh\nexit 101\n")
                os.chmod(rc_d, 0o755)
            try:
                print("$ apt-get update && apt-get install -y " + " ".join(apt), flush=True)
                subprocess.run(["apt-get", "update", "-qq"], env=env, stdin=subprocess.DEVNULL)
                subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                                *apt], env=env, stdin=subprocess.DEVNULL)
            finally:
                if own:
                    os.unlink(rc_d)
            print(f"components: apt-get took {time.monotonic() - t0:.0f} s", flush=True)
    py = sys.executable
    for name, cmd in (("llama-server", [py, "-m", "prefilltui", "demo", "--prepare-only"]),
                      ("vllm", [py, "-m", "prefilltui", "demo", "--engine", "vllm",
                                "--prepare-only"])):
        if COMPONENTS[name].find() is None:
            t0 = time.monotonic()
            rc = _run(cmd)
            print(f"components: {name} {'obtained' if rc == 0 else f'FAILED (exit {rc})'} "
                  f"in {time.monotonic() - t0:.0f} s", flush=True)
    return status()


def status() -> int:
    """Print each component's path or install line; returns how many are missing."""
    gone = 0
    for c in COMPONENTS.values():
        p = c.find()
        gone += p is None
        print(f"  {c.name:<13} {p or 'MISSING: ' + c.install}", flush=True)
    return gone


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "status"
    n = obtain() if what == "obtain" else status()
    # missing components are not an error here: their tests skip (or fail in CI)
    sys.exit(0)
