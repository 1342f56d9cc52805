"""prefilltui beside vllmstat on one real vLLM: CPU and RSS of each, alone and together.

    python -m tests.bench.vllmstat_side [--vllmstat PATH] [--seconds 60]

Not part of ``make bench`` (vllmstat is no dependency of prefilltui): install it in a
venv of its own first, e.g. ``python3 -m venv /tmp/vs && /tmp/vs/bin/pip install
vllmstat==0.9.1``, and pass ``--vllmstat /tmp/vs/bin/vllmstat``.  Starts the vLLM demo
target (``demo.vllm.VllmServer``: installed by ``prefilltui demo --engine vllm
--prepare-only``), then runs vllmstat (``-u URL --no-gpu``, its default 1-s scrape)
alone, prefilltui (``prefilltui URL``, its default pacing) alone, and both, each in
tmux at 80x24; after ``--warmup`` seconds it reads each process's user+system CPU
seconds over ``--seconds`` (psutil), and its RSS at the end.  Prints one line a run
with the load average at its start.  Figures: docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import psutil


def _find(pattern: str) -> psutil.Process:
    """The Python process running ``pattern`` (not the shell tmux started it from)."""
    for p in psutil.process_iter(["cmdline"]):
        argv = p.info["cmdline"] or []
        if (len(argv) > 1 and os.path.basename(argv[0]).startswith("python")
                and argv[1] == pattern):  # the script run by its interpreter
            return p
    raise RuntimeError(f"no process running {pattern!r}")


def run(cmds: dict[str, str], seconds: float, warmup: float) -> tuple[tuple, dict]:
    """Each command in a tmux session of its own at 80x24; (load, {name: (cpu %, MiB)})."""
    subprocess.run(["tmux", "kill-server"], stderr=subprocess.DEVNULL)
    for name, cmd in cmds.items():
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "80", "-y", "24", cmd],
                       check=True)
    try:
        time.sleep(warmup)
        procs = {name: _find(cmd.split()[0]) for name, cmd in cmds.items()}
        load = os.getloadavg()
        c0 = {n: sum(p.cpu_times()[:2]) for n, p in procs.items()}
        t0 = time.perf_counter()
        time.sleep(seconds)
        wall = time.perf_counter() - t0
        out = {n: (100 * (sum(p.cpu_times()[:2]) - c0[n]) / wall, p.memory_info().rss / 2**20)
               for n, p in procs.items()}
    finally:
        subprocess.run(["tmux", "kill-server"], stderr=subprocess.DEVNULL)
        time.sleep(2)
    return load, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllmstat", default="vllmstat", help="the vllmstat script")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=8.0)
    opts = ap.parse_args(argv)
    from prefilltui.demo.vllm import VllmServer, prepare_vllm

    app = os.path.join(os.path.dirname(sys.executable), "prefilltui")
    with VllmServer(prepare_vllm(), startup_timeout=600) as srv:
        vs = f"{opts.vllmstat} -u {srv.base_url} --no-gpu"
        pf = f"{app} {srv.base_url}"
        for cmds in ({"vllmstat": vs}, {"prefilltui": pf}, {"vllmstat": vs, "prefilltui": pf}):
            load, out = run(cmds, opts.seconds, opts.warmup)
            figures = "  ".join(f"{n} {c:.1f} % / {r:.0f} MiB" for n, (c, r) in out.items())
            print(f"{' + '.join(cmds):22s} load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}  "
                  f"{figures}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
