"""Soak: a continuous sweep against a server that misbehaves on purpose.

    python -m tests.bench.bench_soak [--soak-seconds S]   (default 120; up to 600)

The fast server (tests/bench/fastserver.py) runs in fault mode in its own process:
about one POST in four is a fault -- connection dropped before any byte or in the
middle of an event, a stall past the client's 1 s timeout, a malformed JSON event,
an error event inside a 200 stream, a stream with no token, bursts of three 503s
with Retry-After: 0.3 -- and every ``RESTART_EVERY_S`` seconds the server crashes on
a request (exits without answering) and is restarted on the same port after 1 s,
so probes in between meet a refused connection.  Healthy answers take a simulated
5 ms + 20 us x tokens (true prefill throughput 50,000 tokens/s).

prefilltui side: the real SweepRunner (continuous, 10 probes/s at most), a RunWriter,
and a RunningFit fed from ``on_result`` as the TUI feeds it.  Checks:
  * no crash: the runner thread ends "stopped" when asked, never "failed";
  * every request accounted for: run-file lines == probes reported == runner results,
    seq 1..N without gaps, no unreadable line; the server's own log of the POSTs it
    saw, outcome by outcome, matches the run file's results (503 -> rate_limited,
    stall -> timeout, ...), and refused connections make up the rest;
  * none of the failed probes in the fit: the fit holds exactly the ok, non-warm-up
    probes, and its throughput (robust fit, as shown) is within 5 % of the same fit
    over the server's own times (``timings.prompt_ms``) of those probes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from tests.bench import Row
from tests.bench.fastserver import EXPECTED_KIND, FastServerProcess

SECTION = "6 soak"
A_S, B_S = 0.005, 20e-6
RESTART_EVERY_S = 30.0
DOWNTIME_S = 1.0


class Supervisor(threading.Thread):
    """Restarts the server on its port ``DOWNTIME_S`` after it crashes."""

    def __init__(self, srv: FastServerProcess) -> None:
        super().__init__(daemon=True, name="bench-supervisor")
        self.srv = srv
        self.done = threading.Event()
        self.restarts = 0
        self.error: str | None = None

    def run(self) -> None:
        while not self.done.is_set():
            p = self.srv.proc
            if p is not None and p.poll() is not None:
                time.sleep(DOWNTIME_S)
                try:
                    self.srv.restart()
                    self.restarts += 1
                except Exception as e:  # report, don't hang the soak
                    self.error = str(e)
                    return
            self.done.wait(0.05)


def soak(seconds: float, tmp: str) -> dict:
    from prefilltui.measure.probe import ProbeClient
    from prefilltui.model.fit import RunningFit
    from prefilltui.measure.runfile import RunWriter
    from prefilltui.measure.runfile import read_run
    from prefilltui.measure.sweep import SweepRunner
    from prefilltui.measure.sweep import SweepConfig, make_lengths

    log = Path(tmp) / "server.log"
    runpath = Path(tmp) / "soak.jsonl"
    srv = FastServerProcess(a=A_S, b=B_S, faults=1, log=str(log),
                            restart_every=RESTART_EVERY_S, stall_s=3.0, retry_after=0.3)
    srv.start()
    sup = Supervisor(srv)
    sup.start()
    fit = RunningFit(window=50)
    reported: list = []
    states: Counter = Counter()
    lock = threading.Lock()

    def on_result(r) -> None:
        with lock:
            reported.append(r)
            fit.add(r)

    writer = RunWriter(runpath)
    url = srv.base_url
    runner = SweepRunner(lambda: ProbeClient(url, timeout=1.0),
                         SweepConfig(make_lengths(32, 2048, 8), warmup=1, pause_s=0.05,
                                     seed=1, continuous=True),
                         on_result=on_result, on_state=lambda s, d: states.update([s]),
                         runfile=writer)
    t0 = time.monotonic()
    try:
        runner.start()
        time.sleep(seconds)
        runner.pause()  # let the probe in flight finish, so the server log and file agree
        deadline = time.monotonic() + 15
        while runner.state != "paused" and time.monotonic() < deadline:
            time.sleep(0.05)
        paused = runner.state == "paused"
        runner.stop(timeout=10)
        alive = runner.alive
    finally:
        sup.done.set()
        sup.join(5)
        writer.close()
        srv.stop()
    wall = time.monotonic() - t0

    calibration: list = []
    results, problems = read_run(runpath, calibration=calibration)
    server_log = [tuple(x.split(" ", 1)) for x in log.read_text().splitlines() if x.strip()]
    outcomes = Counter(o for o, _ in server_log)
    seqs = [r.seq for r in results]
    issues: list[str] = []
    if problems:
        issues.append(f"{len(problems)} unreadable run-file lines")
    if not (len(results) == len(reported) == len(runner.results) == writer.count):
        issues.append(f"counts differ: file {len(results)}, reported {len(reported)}, "
                      f"runner {len(runner.results)}, writer {writer.count}")
    if len(calibration) != len(runner.calibration):
        issues.append(f"calibration: file {len(calibration)}, runner {len(runner.calibration)}")
    if seqs != list(range(1, len(seqs) + 1)):
        issues.append("seq numbers not 1..N")
    match = match_requests(calibration + results, server_log)
    issues += match["issues"]
    got = Counter("ok" if r.ok else r.error_kind for r in results)
    eligible = [r for r in results if r.fit_eligible]
    x, y = fit.points()
    fit_ok = len(x) == len(eligible) and sorted(map(float, y)) == sorted(r.ttft_s for r in eligible)
    in_fit = set(map(float, y))
    failed_in_fit = sum(1 for r in results if not r.ok and r.ttft_s in in_fit)
    snap = fit.snapshot("all", "robust")
    tp = snap.fit.prefill_tokens_per_s if snap and snap.fit else None
    from prefilltui.model.fit import fit_robust

    srv_pts = [(r.tokens, r.server_prefill_s) for r in eligible if r.server_prefill_s is not None]
    sf = fit_robust([p[0] for p in srv_pts], [p[1] for p in srv_pts]) if len(srv_pts) > 2 else None
    crash = states["failed"] > 0 or alive or not paused or sup.error is not None
    return {
        "wall_s": wall, "probes": len(results), "ok": sum(r.ok for r in results),
        "failed": sum(not r.ok for r in results), "refused": match["refused"],
        "calibration": len(calibration), "server_requests": len(server_log),
        "resends": match["resends"], "matched": match["matched"],
        "server_outcomes": dict(outcomes), "run_file_kinds": dict(got),
        "restarts": sup.restarts, "issues": issues, "crash": crash,
        "supervisor_error": sup.error, "runner_error": runner.error,
        "states": dict(states), "fit_points": len(x), "fit_eligible": len(eligible),
        "fit_matches_ok_probes": fit_ok, "failed_in_fit": failed_in_fit,
        "fit_throughput_tok_s": tp, "true_throughput_tok_s": 1 / B_S,
        "server_time_throughput_tok_s": sf.prefill_tokens_per_s if sf else None,
    }


#: Server outcomes after which the client resends (no response byte came back).
RESEND_CAUSES = ("drop_before", "restart")


def _refused(message: str | None) -> bool:
    return (message or "").startswith("ConnectError")


def match_requests(requests: list, server_log: list[tuple[str, str]]) -> dict:
    """Match the run file's requests (calibration lines and probes, each with its
    ``notes.request_id`` and ``notes.resends``) with the server's log lines
    (outcome, X-Request-Id), request by request.  A request the server never saw
    (refused connection) has no line; one resent after a response-less close has a
    line for each send that reached the server (a resend that failed after the
    server crashed on the first send reached none); the last line's outcome must be
    what the probe recorded (``EXPECTED_KIND``), the earlier ones a close without a
    response.  Returns {"matched", "refused", "resends", "issues"}."""
    by_id: dict[str, list[str]] = {}
    for outcome, rid in server_log:
        by_id.setdefault(rid, []).append(outcome)
    issues: list[str] = []
    matched = refused = resends = 0
    seen: set[str] = set()
    for r in requests:
        rid = r.notes.request_id
        if not rid:
            issues.append(f"probe {r.seq}: no request id")
            continue
        seen.add(rid)
        sends = r.notes.resends
        resends += len(sends)
        reached = 1 + sum(1 for x in sends if not _refused(x.resend_error))
        if not sends and r.error_kind == "connect" and _refused(r.error_message):
            reached = 0  # refused: the request never reached the server
            refused += 1
        lines = by_id.get(rid, [])
        kind = "ok" if r.ok else r.error_kind
        failed_resends = sum(1 for x in sends if x.resend_error)
        if lines and lines[-1] == "restart" and 0 < reached - len(lines) <= failed_resends:
            # the server died on that send: the resends after it met no server (its
            # listening socket outlives it, so they fail unread, not refused)
            reached = len(lines)
        if len(lines) != reached:
            issues.append(f"{rid} ({kind}, {len(sends)} resent): server logged {len(lines)}, "
                          f"expected {reached}")
            continue
        if lines:
            want = EXPECTED_KIND.get(lines[-1], ())
            if (want is None and kind != "ok") or (want is not None and kind not in want):
                issues.append(f"{rid}: server {lines[-1]}, run file {kind}")
                continue
            if any(o not in RESEND_CAUSES for o in lines[:-1]):
                issues.append(f"{rid}: resent after {lines[:-1]}")
                continue
        matched += 1
    extra = sorted(set(by_id) - seen)
    if extra:
        issues.append(f"server saw {sum(len(by_id[k]) for k in extra)} requests the run file "
                      f"lacks ({', '.join(extra[:3])})")
    return {"matched": matched, "refused": refused, "resends": resends, "issues": issues}


def run(opts) -> list[Row]:
    seconds = getattr(opts, "soak_seconds", None) or (30.0 if opts.quick else 120.0)
    with tempfile.TemporaryDirectory(prefix="prefilltui-soak-") as tmp:
        d = soak(seconds, tmp)
    tp = d["fit_throughput_tok_s"]
    ref = d["server_time_throughput_tok_s"]
    err = None if tp is None or not ref else tp / ref - 1
    faults = d["failed"]
    return [
        Row(SECTION, f"soak {seconds:.0f} s: probes / failed / restarts",
            f"{d['probes']} / {faults} / {d['restarts']}", "", None, d),
        Row(SECTION, "no crash (runner stopped cleanly, never failed)",
            "ok" if not d["crash"] else "CRASH", "no crash", not d["crash"]),
        Row(SECTION, "every request accounted for (run file vs server log, by id)",
            (f"all {d['server_requests']} ({d['resends']} resent, {d['refused']} refused, "
             f"{d['calibration']} calibration)") if not d["issues"]
            else "; ".join(d["issues"])[:60], "all", not d["issues"]),
        Row(SECTION, "failed probes in the fit",
            f"{d['failed_in_fit']} (fit {d['fit_points']} = ok {d['fit_eligible']})",
            "0", d["failed_in_fit"] == 0 and d["fit_matches_ok_probes"]),
        Row(SECTION, "fit throughput under faults vs server's own times",
            "n/a" if err is None else f"{err * 100:+.1f} %", "within 5 %",
            err is not None and abs(err) <= 0.05),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--soak-seconds", type=float, default=None)
    from tests.bench import print_rows

    return print_rows(run(ap.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
