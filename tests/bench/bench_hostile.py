"""Hostile-server figures: peak RSS of ``sweep`` and the exporter against
decompression bombs and huge bodies, and how long a trickling ``/metrics`` holds a
probe.  Loopback only; every child is time-bounded and its peak RSS read exactly
from ``wait4`` (``ru_maxrss``).

    python -m tests.bench.bench_hostile [--only sweep-gzip,sweep-plain,exporter-gzip,trickle]

Each case prints one line: case, wall seconds, peak RSS (MiB), exit code, and what
the command printed last.  A child past its time limit is killed (SIGKILL) and
reported as such; a child may be given an address-space cap (``--as-cap-gb``) so a
before-the-fix run cannot take the shared machine's memory.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

PY = sys.executable


@contextmanager
def hostile(*args: str):
    p = subprocess.Popen([PY, "-m", "tests.bench.hostile_server", *args],
                         stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"hostile server did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        p.kill()
        p.wait()


def measure(cmd: list[str], *, limit_s: float, term_after_s: float | None = None,
            as_cap_gb: float | None = None, env: dict | None = None) -> dict:
    """Run ``cmd``; SIGTERM it after ``term_after_s`` (the exporter), SIGKILL it past
    ``limit_s``.  Returns wall seconds, peak RSS (MiB), exit status, output tail."""
    def cap() -> None:
        if as_cap_gb:
            n = int(as_cap_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (n, n))

    out = tempfile.TemporaryFile()
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=cap,
                         env={**os.environ, **(env or {})})
    killed = termed = False
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        el = time.monotonic() - t0
        if term_after_s is not None and el > term_after_s and not termed:
            p.send_signal(signal.SIGTERM)
            termed = True
        if el > limit_s and not killed:
            p.kill()
            killed = True
        time.sleep(0.05)
    wall = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    tail = out.read().decode(errors="replace").strip().splitlines()[-3:]
    return {"wall_s": wall, "peak_rss_mib": ru.ru_maxrss / 1024, "rc": p.returncode,
            "killed": killed, "tail": tail}


def _show(name: str, r: dict) -> None:
    print(f"{name:<16} {r['wall_s']:6.1f} s  peak RSS {r['peak_rss_mib']:8.1f} MiB  "
          f"rc {r['rc']}{' (killed at the limit)' if r['killed'] else ''}")
    for line in r["tail"]:
        print(f"{'':<18}| {line[:160]}")


def sweep_cmd(url: str, out: Path, *extra: str) -> list[str]:
    return [PY, "-m", "prefilltui", "sweep", url, "--lengths", "64", "--warmup", "0",
            "--timeout", "10", "--no-telemetry", "--out", str(out), *extra]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="sweep-gzip,sweep-plain,exporter-gzip,trickle")
    ap.add_argument("--paths", default="get", help="hostile_server --paths for the bodies")
    ap.add_argument("--as-cap-gb", type=float, default=6.0)
    opts = ap.parse_args(argv)
    only = set(opts.only.split(","))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "sweep-gzip" in only:
            with hostile("--gzip-kb", "1536", "--paths", opts.paths) as url:
                _show("sweep-gzip", measure(sweep_cmd(url, tmp / "a.jsonl"), limit_s=60,
                                            as_cap_gb=opts.as_cap_gb))
        if "sweep-plain" in only:
            with hostile("--plain-mb", "300", "--paths", opts.paths) as url:
                _show("sweep-plain", measure(sweep_cmd(url, tmp / "b.jsonl"), limit_s=60,
                                             as_cap_gb=opts.as_cap_gb))
        if "exporter-gzip" in only:
            with hostile("--gzip-kb", "815", "--paths", opts.paths) as url:
                cmd = [PY, "-m", "prefilltui", "exporter", url, "--listen", "127.0.0.1:0",
                       "--interval", "1", "--timeout", "10", "--run-dir", str(tmp / "runs")]
                _show("exporter-gzip", measure(cmd, limit_s=40, term_after_s=25,
                                               as_cap_gb=opts.as_cap_gb))
        if "trickle" in only:
            with hostile("--trickle-metrics", "2") as url:
                _show("trickle", measure(sweep_cmd(url, tmp / "c.jsonl"), limit_s=120))
    return 0


if __name__ == "__main__":
    sys.exit(main())
