"""The exporter under hostile and heavy load, loopback only, bounded in
count and time.

    python -m tests.bench.bench_exporter_load [--only scrapes,slowloris,fleet]
                                              [--targets 500] [--scrapers 200] [--seconds 20]

``scrapes``   one target (the fast server); ``--scrapers`` concurrent clients (asyncio
              + aiohttp in this process, a new connection per scrape) scrape /metrics
              for ``--seconds``: scrapes done, failed or timed out (30 s), p50/p99/max.
``slowloris`` the exporter under ``--fd-limit`` (default 256) open files; 800
              connections send half a request and then a byte every 5 s; while they
              hang on, /metrics is scraped once a second and the healthy target's
              ``prefilltui_target_up`` read: scrapes answered, their worst time, up
              values seen, the exporter's threads and fds at the worst moment, and how
              long until the exporter has closed the half-sent requests.
``fleet``     ``--targets`` targets in a TOML file (all the fast server, distinct
              names, default interval): time from process start to the first /metrics
              answer and to every target being ready, then after ``--settle`` seconds
              RSS, threads and open fds, per target.
The exporter is a real process (``python -m prefilltui exporter``); its RSS, threads and
fds come from /proc (psutil).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from tests.bench.fastserver import FastServerProcess
from tests.procwait import stop

ROOT = Path(__file__).resolve().parents[2]


def start_exporter(args: list[str], tmp: Path, fd_limit: int | None = None
                   ) -> tuple[subprocess.Popen, int, float]:
    """Start the exporter; returns (process, port, seconds until it printed its port)."""
    def limit() -> None:
        if fd_limit:
            resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))

    err = open(tmp / "exporter.err", "w")
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "prefilltui", "exporter", *args,
                          "--listen", "127.0.0.1:0", "--run-dir", str(tmp / "runs")],
                         stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                         preexec_fn=limit, cwd=str(ROOT))
    while time.monotonic() - t0 < 300:
        m = re.search(r"serving http://127\.0\.0\.1:(\d+)/", (tmp / "exporter.err").read_text())
        if m:
            return p, int(m.group(1)), time.monotonic() - t0
        if p.poll() is not None:
            raise RuntimeError("exporter exited: " + (tmp / "exporter.err").read_text()[-2000:])
        time.sleep(0.05)
    p.kill()
    raise RuntimeError("exporter did not print its port in 300 s")


def scrape(port: int, timeout: float = 30.0) -> tuple[str, float]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        body = r.read().decode()
    return body, time.perf_counter() - t0


def footprint(pid: int) -> dict:
    pr = psutil.Process(pid)
    return {"rss_mib": pr.memory_info().rss / 2**20, "threads": pr.num_threads(),
            "fds": pr.num_fds()}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


# -- scrapes


async def _scrapers(port: int, n: int, seconds: float) -> dict:
    import aiohttp

    lat: list[float] = []
    fails = {"timeout": 0, "error": 0}
    end = time.monotonic() + seconds
    conn = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=conn,
                                     timeout=aiohttp.ClientTimeout(total=30)) as s:
        async def one() -> None:
            while time.monotonic() < end:
                t0 = time.perf_counter()
                try:
                    async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
                        await r.read()
                        if r.status != 200:
                            fails["error"] += 1
                            continue
                    lat.append(time.perf_counter() - t0)
                except asyncio.TimeoutError:
                    fails["timeout"] += 1
                except aiohttp.ClientError:
                    fails["error"] += 1
        await asyncio.gather(*(one() for _ in range(n)))
    return {"scrapes": len(lat), **fails, "p50_s": pct(lat, 0.5), "p99_s": pct(lat, 0.99),
            "max_s": max(lat) if lat else float("nan")}


def bench_scrapes(tmp: Path, scrapers: int, seconds: float) -> None:
    srv = FastServerProcess(a=0.002, b=5e-6).start()
    try:
        p, port, _ = start_exporter([srv.base_url, "--interval", "1"], tmp)
    except Exception:
        srv.stop()
        raise
    try:
        time.sleep(3)
        r = asyncio.run(_scrapers(port, scrapers, seconds))
        fp = footprint(p.pid)
    finally:
        stop(p)
        srv.stop()
    print(f"scrapes: {scrapers} scrapers x {seconds:g} s: {r['scrapes']} ok, "
          f"{r['timeout']} timed out (30 s), {r['error']} failed; p50 {r['p50_s']:.3f} s, "
          f"p99 {r['p99_s']:.3f} s, max {r['max_s']:.3f} s; after: {fp['threads']} threads, "
          f"{fp['fds']} fds, RSS {fp['rss_mib']:.0f} MiB")


# -- slowloris


def bench_slowloris(tmp: Path, conns: int, fd_limit: int, seconds: float) -> None:
    srv = FastServerProcess(a=0.002, b=5e-6).start()
    socks: list[socket.socket] = []
    worst = {"threads": 0, "fds": 0}
    answered, slow, ups, refused = 0, 0.0, [], 0
    times: list[float] = []
    p = None
    try:
        p, port, _ = start_exporter([srv.base_url, "--interval", "0.5", "--timeout", "5"],
                                    tmp, fd_limit=fd_limit)
        time.sleep(3)
        t_open = time.monotonic()
        for _ in range(conns):
            if time.monotonic() - t_open > 30:
                refused += 1
                continue
            s = socket.socket()
            s.settimeout(0.3)
            try:
                s.connect(("127.0.0.1", port))
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                socks.append(s)
            except OSError:
                refused += 1
                s.close()
        t_end = time.monotonic() + seconds
        last_drip = time.monotonic()
        while time.monotonic() < t_end:
            if time.monotonic() - last_drip > 5:
                for s in socks:
                    try:
                        s.send(b"X")
                    except OSError:
                        pass
                last_drip = time.monotonic()
            try:
                body, took = scrape(port, timeout=10)
                times.append(took)
                answered += 1
                slow = max(slow, took)
                m = re.search(r'prefilltui_target_up\{[^}]*\} (\S+)', body)
                ups.append(float(m.group(1)) if m else None)
            except OSError as e:
                ups.append("no answer")
                times.append(float("nan"))
                print("  scrape failed:", type(e).__name__, str(e)[:100])
            fp = footprint(p.pid)
            worst = {k: max(worst[k], fp[k]) for k in worst}
            time.sleep(1)
        # how many of the half-sent requests the exporter still holds open
        open_now = 0
        for s in socks:
            try:
                s.settimeout(0.01)
                open_now += 0 if s.recv(1) == b"" else 1
            except socket.timeout:
                open_now += 1
            except OSError:
                pass
    finally:
        for s in socks:
            s.close()
        if p is not None:
            stop(p)
        srv.stop()
        errors = [ln for ln in (tmp / "exporter.err").read_text().splitlines()
                  if "Traceback" in ln or "rror" in ln][:5]
    print(f"slowloris: {conns} half-sent requests ({refused} not accepted), fd limit "
          f"{fd_limit}, {seconds:g} s: /metrics answered {answered} of {int(seconds)} "
          f"(worst {slow:.2f} s); up seen {sorted(set(map(str, ups)))}; worst "
          f"{worst['threads']} threads, {worst['fds']} fds; half-sent still open at the end: "
          f"{open_now}; scrape times {' '.join(f'{t:.2f}' for t in times)}")
    for ln in errors:
        print(f"  exporter: {ln[:200]}")


# -- a fleet


def bench_fleet(tmp: Path, targets: int, settle: float) -> None:
    srv = FastServerProcess(a=0.002, b=5e-6).start()
    cfg = tmp / "targets.toml"
    cfg.write_text("".join(f'[[target]]\nname = "t{i:04d}"\nurl = "{srv.base_url}"\n\n'
                           for i in range(targets)))
    t0 = time.monotonic()
    try:
        p, port, t_port = start_exporter(["--config", str(cfg)], tmp)
    except Exception:
        srv.stop()
        raise
    first = ready = None
    try:
        while time.monotonic() - t0 < 300:
            try:
                body, _ = scrape(port, timeout=5)
            except OSError:
                time.sleep(0.2)
                continue
            first = first or time.monotonic() - t0
            n_info = len(re.findall(r"^prefilltui_target_info\{", body, re.M))
            n_ready = len(re.findall(r"^prefilltui_target_ready\{[^}]*\} 1", body, re.M))
            n_up = len(re.findall(r"^prefilltui_target_up\{[^}]*\} 1", body, re.M))
            if max(n_ready, n_up) >= targets:
                ready = time.monotonic() - t0
                break
            time.sleep(0.5)
        pr = psutil.Process(p.pid)
        c0, w0 = sum(pr.cpu_times()[:2]), time.monotonic()
        time.sleep(settle)
        cpu = (sum(pr.cpu_times()[:2]) - c0) / (time.monotonic() - w0)
        fp = footprint(p.pid)
        probes = sum(1 for _ in (tmp / "runs").glob("*.jsonl"))
        body, took = scrape(port)
    finally:
        stop(p)
        srv.stop()
    print(f"fleet: {targets} targets: port printed at {t_port:.1f} s, first /metrics "
          f"at {first:.1f} s ({n_info} targets listed), all ready at "
          f"{'%.1f s' % ready if ready else 'never (300 s)'}; after {settle:g} s more: RSS "
          f"{fp['rss_mib']:.0f} MiB ({fp['rss_mib'] / targets * 1024:.0f} KiB/target), "
          f"{fp['threads']} threads, {fp['fds']} fds ({fp['fds'] / targets:.1f}/target); "
          f"a scrape {took:.2f} s, {len(body) / 2**20:.1f} MiB; CPU {cpu * 100:.0f} % of a core "
          f"over the {settle:g} s ({probes} run files)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="scrapes,slowloris,fleet")
    ap.add_argument("--scrapers", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--conns", type=int, default=800)
    ap.add_argument("--fd-limit", type=int, default=256)
    ap.add_argument("--targets", type=int, default=500)
    ap.add_argument("--settle", type=float, default=30)
    opts = ap.parse_args(argv)
    only = set(opts.only.split(","))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "scrapes" in only:
            bench_scrapes(tmp, opts.scrapers, opts.seconds)
        if "slowloris" in only:
            bench_slowloris(tmp, opts.conns, opts.fd_limit, opts.seconds)
        if "fleet" in only:
            bench_fleet(tmp, opts.targets, opts.settle)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    sys.exit(main())
