"""Telemetry benchmark: sampler cost, memory over an hour, CPU spike in a prefill.

Run:  python -m tests.bench.bench_telemetry [--quick] [--no-prefill]

``run(quick=False, prefill=True) -> dict`` returns the figures for the benchmark suite:
  tick_us_8gpu          -- CPU microseconds for one tick of 8 fake GPUs (thread_time)
  cost_core_frac_10hz   -- CPU seconds per wall second of the real sampler thread at
                           10 Hz with 8 fake GPUs (process CPU while main sleeps); target <= 0.01
  snapshot_us_8gpu      -- CPU microseconds for one fresh snapshot (8 GPUs, 60 s history)
  ring_bytes            -- bytes held by the rings (allocated once)
  rss_mb_after_s        -- {simulated seconds: RSS MiB} while stepping a fake clock through 1 h
  rss_growth_mb_1h      -- RSS after 1 simulated hour minus after 10 simulated minutes
  prefill               -- CPU fallback during a real llama-server prefill (or a busy loop
                           when no binary is found): baseline/during/peak utilization, etc.
Fake NVML calls cost ~1 us of Python each; real NVML calls cost more (driver ioctls), so the
per-tick figure is the sampler's own overhead, not NVML's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from prefilltui.demo.server import free_port
from prefilltui.measure.telemetry import Sampler, make_sampler
from prefilltui.model.types import ProbeResult

from tests.unit import fake_nvml as fk

LLAMA_SERVER = [Path("/tmp/llb/build/bin/llama-server")]
GGUF = [Path("/tmp/llb/gguf/SmolLM2-135M-Instruct.Q4_1.gguf")]


def _fake8(clock=None, hz: float = 10.0) -> Sampler:
    nv = fk.fake_gpus(8, util=lambda: 50, power_mw=lambda: 300_000,
                      energy_mj=lambda: int(time.perf_counter() * 1e6))
    return make_sampler(nvml_module=nv, hz=hz, clock=clock, env={})


def tick_cost(n: int = 2000) -> float:
    """CPU microseconds per tick with 8 fake GPUs."""
    clock = fk.FakeClock()
    s = _fake8(clock)
    t0 = time.thread_time()
    fk.run_ticks(s, clock, range(1, n + 1))
    return (time.thread_time() - t0) / n * 1e6


def snapshot_cost(n: int = 50) -> float:
    """CPU microseconds per fresh snapshot (8 GPUs, full 60 s history)."""
    clock = fk.FakeClock()
    s = _fake8(clock)
    fk.run_ticks(s, clock, range(1, 700))
    t0 = time.thread_time()
    for _ in range(n):
        clock.t += 0.1
        s.tick()
        s.snapshot()
    per = (time.thread_time() - t0) / n * 1e6
    return per - tick_cost(200)


def thread_cost(seconds: float = 5.0) -> float:
    """Process CPU seconds per wall second with the 10 Hz thread running, main idle."""
    s = _fake8()
    s.start()
    time.sleep(0.3)
    c0, w0 = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    c1, w1 = time.process_time(), time.perf_counter()
    s.stop()
    return (c1 - c0) / (w1 - w0)


def memory_hour(quick: bool = False) -> dict:
    """Step a fake clock through 1 h at 10 Hz (8 GPUs); RSS at checkpoints."""
    clock = fk.FakeClock()
    s = _fake8(clock)
    proc = psutil.Process()
    total = 600 if quick else 3600
    marks = {60, 600, 1800, 3600} & set(range(total + 1))
    rss, rb0 = {}, s.ring_bytes()
    for i in range(1, total * 10 + 1):
        clock.t = i * 0.1
        s.tick()
        if i % 10 == 0 and i // 10 in marks:
            s.snapshot()
            rss[i // 10] = round(proc.memory_info().rss / 2**20, 1)
    return {"ring_bytes": rb0, "ring_bytes_end": s.ring_bytes(),
            "ring_rows_per_gpu": len(s.devices[0].ring), "rss_mb_after_s": rss,
            "rss_growth_mb_1h": round(rss[max(rss)] - rss.get(600, rss[min(rss)]), 1)}


# ---- real CPU fallback during a prefill ------------------------------------------------
def _get(url: str, timeout: float = 2.0) -> int:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status


def _post(url: str, body: dict, timeout: float = 300.0) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _window_util(s: Sampler, t0: float, t1: float, dev: int = 0) -> list[float]:
    rows = s.devices[dev].ring.ordered()
    return [float(u) for t, u, _p, _e in rows if t0 <= t <= t1 and u == u]


def _process_figures(s: Sampler, t_send: float, t_end: float) -> dict:
    """The sampler's own "llama-server (pid N)" device: idle vs prefill utilization."""
    if len(s.devices) < 2:
        return {}
    idle = _window_util(s, t_send - 2.0, t_send - 0.1, dev=1)
    busy = _window_util(s, t_send + 0.1, t_end, dev=1)
    mean = (lambda v: round(sum(v) / len(v), 1) if v else None)
    return {"server_device": s.devices[1].label,
            "server_util_idle_mean_pct": mean(idle),
            "server_util_prefill_mean_pct": mean(busy),
            "server_util_prefill_peak_pct": round(max(busy), 1) if busy else None}


def prefill_spike(tokens: int = 1000) -> dict:
    """Run the CPU sampler (10 Hz) while a real llama-server prefills ~``tokens`` tokens.

    Falls back to a 1.5 s busy loop in a child process when no binary/model is found."""
    binary = next((p for p in LLAMA_SERVER if p.is_file() and os.access(p, os.X_OK)), None)
    gguf = next((p for p in GGUF if p.is_file()), None)
    s: Sampler | None = None
    out: dict = {}
    srv = None
    try:
        if binary and gguf:
            port = free_port()
            srv = subprocess.Popen(
                [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
                 "--metrics", "-c", "4096", "-t", "2"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            base = f"http://127.0.0.1:{port}"
            deadline = time.time() + 60
            while True:
                try:
                    if _get(base + "/health") == 200:
                        break
                except Exception:  # noqa: BLE001 - not up yet
                    pass
                if time.time() > deadline or srv.poll() is not None:
                    raise RuntimeError("llama-server did not become healthy")
                time.sleep(0.2)
            s = make_sampler(hz=10.0, env={}, processes={"llama-server": srv.pid})
            s.start()
            time.sleep(1.0)  # idle baseline (2 s with the server-CPU second below)
            prompt = " ".join(f"w{i} tok{(i * 7919) % 1000}" for i in range(tokens // 7))
            sp = psutil.Process(srv.pid)
            c_idle0, t_idle0 = sum(sp.cpu_times()[:2]), time.perf_counter()
            time.sleep(1.0)
            c0, t_send = sum(sp.cpu_times()[:2]), time.perf_counter()
            resp = _post(base + "/v1/completions", {"prompt": prompt, "max_tokens": 1,
                                                     "cache_prompt": False, "temperature": 0})
            t_end = time.perf_counter()
            c1 = sum(sp.cpu_times()[:2])
            # the server's own CPU (cores busy), which the system-wide figure mixes
            # with every other process on a shared machine
            out["server_cores_idle"] = round((c0 - c_idle0) / (t_send - t_idle0), 2)
            out["server_cores_prefill"] = round((c1 - c0) / (t_end - t_send), 2)
            out["target"] = "llama-server"
            out["prompt_tokens"] = (resp.get("usage") or {}).get("prompt_tokens")
            out["server_prompt_ms"] = (resp.get("timings") or {}).get("prompt_ms")
        else:
            s = make_sampler(hz=10.0, env={})
            s.start()
            time.sleep(2.0)
            t_send = time.perf_counter()
            subprocess.run([sys.executable, "-c",
                            "import time\nt=time.time()\nwhile time.time()-t<1.5: pass"])
            t_end = time.perf_counter()
            out["target"] = "busy loop (no llama-server binary found)"
        out.update(sampler=s.kind, reason=s.snapshot().reason,
                   rapl=s.devices[0].na.get("power") or "readable")
        time.sleep(0.3)  # the sample after t_end
        r = ProbeResult(t_send=t_send, t_end=t_end)
        s.attribute(r)
        base_u = _window_util(s, t_send - 2.0, t_send - 0.1)
        out.update(
            window_s=round(t_end - t_send, 3),
            baseline_util_mean_pct=round(sum(base_u) / len(base_u), 1) if base_u else None,
            util_mean_pct=None if r.util_mean_pct is None else round(r.util_mean_pct, 1),
            util_peak_pct=None if r.util_peak_pct is None else round(r.util_peak_pct, 1),
            power_peak_w=r.power_peak_w, energy_j=r.energy_j,
            samples_around=[round(u) for u in _window_util(s, t_send - 0.5, t_end + 0.3)][:40],
            **_process_figures(s, t_send, t_end),
            host_load_avg_1m=round(os.getloadavg()[0], 2), host_cores=psutil.cpu_count())
    finally:
        if s is not None:
            s.stop()
        if srv is not None:
            srv.terminate()
            try:
                srv.wait(10)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()
    return out


def run(quick: bool = False, prefill: bool = True) -> dict:
    """All figures as one JSON-ready dict (see the module docstring)."""
    res: dict = {"tick_us_8gpu": round(tick_cost(500 if quick else 2000), 1)}
    res["cost_core_frac_10hz"] = round(thread_cost(2.0 if quick else 5.0), 4)
    res["cost_core_frac_10hz_from_tick"] = round(res["tick_us_8gpu"] * 10 / 1e6, 5)
    res["snapshot_us_8gpu"] = round(snapshot_cost(), 1)
    res.update(memory_hour(quick))
    if prefill:
        res["prefill"] = prefill_spike()
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs (10 simulated minutes)")
    ap.add_argument("--no-prefill", action="store_true", help="skip the llama-server part")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args(argv)
    res = run(quick=a.quick, prefill=not a.no_prefill)
    if a.json:
        print(json.dumps(res))
        return 0
    print(f"tick, 8 fake GPUs:            {res['tick_us_8gpu']:.1f} us CPU")
    print(f"sampler thread at 10 Hz:      {res['cost_core_frac_10hz'] * 100:.3f} % of a core "
          f"(from tick cost: {res['cost_core_frac_10hz_from_tick'] * 100:.3f} %; target <= 1 %)")
    print(f"fresh snapshot, 8 GPUs:       {res['snapshot_us_8gpu']:.0f} us CPU")
    print(f"rings:                        {res['ring_bytes'] / 1024:.0f} KiB "
          f"(after 1 h: {res['ring_bytes_end'] / 1024:.0f} KiB, "
          f"{res['ring_rows_per_gpu']} rows/GPU)")
    print(f"RSS MiB at simulated seconds: {res['rss_mb_after_s']} "
          f"(growth 10 min -> end: {res['rss_growth_mb_1h']} MiB)")
    if "prefill" in res:
        print("prefill:", json.dumps(res["prefill"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
