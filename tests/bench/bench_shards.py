"""Sharding measured: N exporter replicas split a file_sd list of many fake
targets, a real Prometheus scrapes them all, loopback only, bounded in count and time.

    python -m tests.bench.bench_shards [--targets 3000] [--replicas 3] [--servers 4]
                                       [--interval 600] [--settle 60] [--timeout 420]

``--servers`` fast fake servers (tests/bench/fastserver.py) answer every target: target
i is ``http://127.0.0.1:PORT/t/NNNN`` (a path prefix per target, so one process serves
hundreds).  One file_sd JSON lists them all; replica r runs ``prefilltui exporter
--file-sd FILE --shard r/N --interval S``.  Prometheus (Debian's, as the tests find it)
scrapes each replica's /metrics (job ``prefilltui``) and, through the same file_sd file,
every target's ``/probe?target=`` page routed by its own ``hashmod`` relabelling
(job ``prefilltui-probe``: the replica Prometheus picks must be the one that holds it).

Printed: targets per replica (and the exporters' own count), time until every target is
ready, per replica RSS, threads, fds and CPU over ``--settle`` seconds; from Prometheus'
API: distinct targets scraped, targets seen in more than one replica (must be 0),
targets missing (must be 0), /probe scrapes up (must be every target).  Then replica 1
is restarted: its targets' windows start empty, the others' windows are unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import psutil

from prefilltui.demo.server import free_port
from prefilltui.exporter.discovery import hashmod
from tests.procwait import stop

ROOT = Path(__file__).resolve().parents[2]


def _fastserver(log: Path) -> tuple[subprocess.Popen, int]:
    out = open(log, "w")
    p = subprocess.Popen([sys.executable, "-m", "tests.bench.fastserver", "--port", "0"],
                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         cwd=str(ROOT))
    for _ in range(200):
        m = re.search(r"PORT (\d+)", log.read_text())
        if m:
            return p, int(m.group(1))
        time.sleep(0.05)
    p.kill()
    raise RuntimeError("fast server did not start")


def _exporter(sd: Path, shard: str, interval: float, tmp: Path, port: int) -> subprocess.Popen:
    err = open(tmp / f"exporter-{shard.replace('/', 'of')}.err", "a")
    return subprocess.Popen(
        [sys.executable, "-m", "prefilltui", "exporter", "--file-sd", str(sd), "--shard", shard,
         "--interval", f"{interval:g}", "--listen", f"127.0.0.1:{port}",
         "--run-dir", str(tmp / f"runs-{shard.replace('/', 'of')}")],
        stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, cwd=str(ROOT))


def _get(url: str, timeout: float = 30, tries: int = 5) -> str:
    """The page; a connection reset is retried (``tries`` in all): with the /probe job,
    Prometheus holds a connection per target, over the exporter's cap of 256, so the
    exporter closes idle ones to make room and a new one may be among them."""
    for k in range(tries):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return r.read().decode()
        except ConnectionError:
            if k == tries - 1:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def _query(prom: str, expr: str) -> list[dict]:
    d = json.loads(_get(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    assert d["status"] == "success", d
    return d["data"]["result"]


def _scalar(prom: str, expr: str) -> float:
    r = _query(prom, expr)
    return float(r[0]["value"][1]) if r else 0.0


def prometheus_config(replicas: list[int], sd: Path) -> str:
    """Two jobs: every replica's /metrics, and each target's /probe routed by hashmod."""
    n = len(replicas)
    route = "".join(
        f"      - source_labels: [__tmp_shard]\n        regex: '{i}'\n"
        f"        target_label: __address__\n        replacement: 127.0.0.1:{port}\n"
        for i, port in enumerate(replicas))
    return (
        "global:\n  scrape_interval: 30s\n  scrape_timeout: 25s\n"
        "scrape_configs:\n"
        "  - job_name: prefilltui\n    static_configs:\n"
        f"      - targets: [{', '.join(repr(f'127.0.0.1:{p}') for p in replicas)}]\n"
        "  - job_name: prefilltui-probe\n    metrics_path: /probe\n"
        "    scrape_interval: 60s\n    scrape_timeout: 25s\n"
        f"    file_sd_configs:\n      - files: ['{sd}']\n"
        "    relabel_configs:\n"
        "      - source_labels: [__address__]\n        target_label: __param_target\n"
        "      - source_labels: [__param_target]\n        target_label: instance\n"
        f"      - source_labels: [__param_target]\n        modulus: {n}\n"
        "        target_label: __tmp_shard\n        action: hashmod\n"
        + route)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", type=int, default=3000)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--servers", type=int, default=4)
    ap.add_argument("--interval", type=float, default=600)
    ap.add_argument("--settle", type=float, default=60)
    ap.add_argument("--timeout", type=float, default=420)
    ap.add_argument("--keep", metavar="DIR", help="keep logs and configs here")
    opts = ap.parse_args(argv)
    from tests.components import COMPONENTS

    prom_bin = COMPONENTS["prometheus"].find()
    if not prom_bin:
        print("prometheus is not installed: " + COMPONENTS["prometheus"].install)
        return 1
    tmp = Path(opts.keep or tempfile.mkdtemp(prefix="bench-shards-"))
    tmp.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    try:
        servers = [_fastserver(tmp / f"fast-{k}.log") for k in range(opts.servers)]
        procs += [p for p, _ in servers]
        names = [f"http://127.0.0.1:{servers[i % opts.servers][1]}/t/{i:04d}"
                 for i in range(opts.targets)]
        groups = [{"targets": names[k::opts.servers],
                   "labels": {"__prefilltui_model": "fast-model", "rack": f"r{k}"}}
                  for k in range(opts.servers)]
        sd = tmp / "targets.json"
        sd.write_text(json.dumps(groups))
        expected = [sum(1 for t in names if hashmod([t], opts.replicas) == r)
                    for r in range(opts.replicas)]
        ports = [free_port() for _ in range(opts.replicas)]
        t0 = time.monotonic()
        ex = [_exporter(sd, f"{r}/{opts.replicas}", opts.interval, tmp, ports[r])
              for r in range(opts.replicas)]
        procs += ex
        prom_port = free_port()
        conf = tmp / "prometheus.yml"
        conf.write_text(prometheus_config(ports, sd))
        prom = f"http://127.0.0.1:{prom_port}"
        plog = open(tmp / "prometheus.log", "w")
        procs.append(subprocess.Popen(
            [prom_bin, f"--config.file={conf}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=plog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        ready_at = None
        while time.monotonic() - t0 < opts.timeout:
            try:
                n = _scalar(prom, 'count(prefilltui_target_ready{job="prefilltui"} == 1)')
            except OSError:
                n = 0
            if n >= opts.targets:
                ready_at = time.monotonic() - t0
                break
            time.sleep(5)
        print(f"  all ready after {'%.0f s' % ready_at if ready_at else 'never'}", flush=True)
        pr = [psutil.Process(p.pid) for p in ex]
        c0 = [sum(p.cpu_times()[:2]) for p in pr]
        w0 = time.monotonic()
        time.sleep(opts.settle)
        wall = time.monotonic() - w0
        cpu = [(sum(p.cpu_times()[:2]) - c) / wall for p, c in zip(pr, c0)]
        fps = [(p.memory_info().rss / 2**20, p.num_threads(), p.num_fds()) for p in pr]
        own = [int(float(re.search(r"^prefilltui_shard_targets\{[^}]*\} (\S+)",
                                   _get(f"http://127.0.0.1:{port}/metrics"), re.M).group(1)))
               for port in ports]
        time.sleep(35)  # one more scrape of each job after the settle
        distinct = _scalar(prom, 'count(count by (target) (prefilltui_target_info{job="prefilltui"}))')
        twice = _query(prom, 'count by (target) (prefilltui_target_info{job="prefilltui"}) > 1')
        seen = {r["metric"]["target"] for r in _query(
            prom, 'group by (target) (prefilltui_target_info{job="prefilltui"})')}
        missing = sorted(set(names) - seen)
        probe_up = _scalar(prom, 'count(up{job="prefilltui-probe"} == 1)')
        probe_down = _scalar(prom, 'count(up{job="prefilltui-probe"} == 0)')
        by_replica = {r["metric"]["instance"]: float(r["value"][1]) for r in _query(
            prom, 'count by (instance) (prefilltui_target_info{job="prefilltui"})')}
        load = os.getloadavg()
        print(f"shards: {opts.targets} targets, {opts.replicas} replicas, interval "
              f"{opts.interval:g} s, {opts.servers} fake servers; load {load[0]:.1f} "
              f"{load[1]:.1f} {load[2]:.1f}")
        print(f"  targets per replica: hashmod {expected}, the exporters say {own}, "
              f"Prometheus counts {[by_replica.get(f'127.0.0.1:{p}') for p in ports]}")
        for r, ((rss, thr, fds), c) in enumerate(zip(fps, cpu)):
            print(f"  replica {r}: RSS {rss:.0f} MiB ({rss / max(1, own[r]) * 1024:.0f} KiB/"
                  f"target), {thr} threads, {fds} fds, CPU {c * 100:.1f} % of a core over "
                  f"{wall:.0f} s")
        print(f"  Prometheus: {distinct:.0f} distinct targets, {len(twice)} in two replicas, "
              f"{len(missing)} missing{' e.g. ' + missing[0] if missing else ''}; /probe "
              f"routed by hashmod: {probe_up:.0f} up, {probe_down:.0f} down")
        # a restart loses only that replica's windows
        def windows(port: int) -> dict[str, float]:
            """Probes each target of a replica has made (what its window holds, at
            this interval: at most the window's size)."""
            body = _get(f"http://127.0.0.1:{port}/metrics")
            out: dict[str, float] = {}
            for m in re.finditer(r'^prefilltui_probes_total\{([^}]*)\} (\S+)', body, re.M):
                t = re.search(r'target="([^"]+)"', m.group(1)).group(1)
                out[t] = out.get(t, 0.0) + float(m.group(2))
            return out
        before = [windows(p) for p in ports]
        stop(ex[1], 30)
        ex[1] = _exporter(sd, f"1/{opts.replicas}", opts.interval, tmp, ports[1])
        procs.append(ex[1])
        for _ in range(60):
            try:
                after1 = windows(ports[1])
                break
            except OSError:
                time.sleep(0.5)
        after = [windows(ports[0]), after1, windows(ports[2]) if opts.replicas > 2 else {}]
        kept = [sum(1 for k, v in before[r].items() if after[r].get(k, -1) >= v)
                for r in (0, 2) if r < opts.replicas]
        print(f"  restart of replica 1: its {len(before[1])} windows held "
              f"{sum(before[1].values()):.0f} probes before, {sum(after1.values()):.0f} after; "
              f"replicas 0 and 2 kept {kept} of {[len(before[0]), len(before[2])]} windows")
        ok = not twice and not missing and probe_up == opts.targets
        return 0 if ok else 1
    finally:
        for p in reversed(procs):
            stop(p, 30)


if __name__ == "__main__":
    sys.exit(main())
