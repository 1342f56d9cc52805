"""Scripted incidents on the real vLLM 0.32, named by the real exporter: the
prefix cache stops hitting for the users, and a queue forms; each must be named right
(``prefilltui_ttft_cause``) within 60 s of its onset, at a probe interval an on-call
engineer would set, and nothing but ``none`` / ``not_enough_data`` may be said before.

One vLLM (random weights, SmolLM2-135M shape, ``--max-num-seqs 4`` so a queue forms on a
CPU) started with ``--otlp-traces-endpoint`` to the exporter's receiver (spans every
second, ``OTEL_BSP_SCHEDULE_DELAY=1000`` as the demo sets).  This test is the users: it
sends completions over HTTP as anybody else would (``Users``), 0.4 requests/s, each a
~835-token shared "system prompt" and a short question, 4 output tokens.  Per incident a
fresh ``prefilltui exporter`` (a subprocess, TOML target: 3-s interval, 64-512-token
probes, ``otlp_listen``) probes it; the test reads its ``/metrics`` every second:

- baseline: until the window fit has the probes the expectation is held on and the
  users' windows are 90 s old (two of them have joined the users' reference:
  ``HeldExpectation.observe``), the cause must stay none / not_enough_data;
- cache collapse: from the onset every user's prompt starts with its own words (same
  length), so vLLM's prefix cache misses every one: ``cache_hit_drop``;
- queueing: from the onset 10 more users stream 200 tokens each back to back (on 4
  sequence slots): requests wait, ``queueing``.

The seconds from onset to the right cause are printed (docs/verdict.md quotes them).
Bounded: the users stop at ``MAX_REQUESTS`` or when the test ends; one vLLM (~3.5 GB,
one core).  About 5 minutes on 2 cores.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.timeout(900)]

#: The exporter's probing: an interval an on-call engineer would set (2-5 s), short lengths.
INTERVAL_S = 3.0
LENGTHS = (64, 128, 256, 512)
#: The users: requests per second (uniform gaps, mean 1/RATE), the shared prompt's and
#: the question's words (~1.75 tokens each: ~880 prompt tokens, of which the shared
#: ~835 fill 6 of vLLM's 128-token blocks whatever the words drawn), output tokens.
RATE = 0.4
SYSTEM_WORDS, QUESTION_WORDS, OUTPUT_TOKENS = 480, 25, 4
#: The queue: extra users streaming QUEUE_TOKENS each, back to back, on MAX_NUM_SEQS slots.
QUEUE_USERS, QUEUE_TOKENS, MAX_NUM_SEQS = 10, 200, 4
#: Users' requests in flight at most (the background ones) and in all.
MAX_IN_FLIGHT, MAX_REQUESTS = 8, 1500
#: The baseline: the window fit holds this many probes (``HeldExpectation``'s
#: HOLD_PROBES) and the users' windows are this old (two 60-s windows joined, 30 s
#: apart), and it lasts at least BASELINE_MIN_S; more than BASELINE_MAX_S fails.
HOLD_PROBES, USERS_REF_S, BASELINE_MIN_S, BASELINE_MAX_S = 10, 90.0, 60.0, 200.0
#: The right cause within this long of the onset (a page an on-call can act on).
WITHIN_S = 60.0
#: What may be said before the onset (None: no verdict yet, the state set is absent).
QUIET = ("none", "not_enough_data", None)
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
         "zulu river stone cloud light").split()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Users:
    """The users' traffic (module docstring), from this test as from anybody else.

    ``mode``: "shared" (the shared system prompt), "unique" (each prompt its own words
    from the first: the prefix cache cannot hit) or "queue" (shared, plus QUEUE_USERS
    streaming QUEUE_TOKENS each).  Words are drawn fresh every run (never seeded), so
    no prompt of an earlier run is in vLLM's cache."""

    def __init__(self, base_url: str, model: str) -> None:
        self.url, self.model = base_url, model
        self.rnd = random.Random()
        self._lock = threading.Lock()
        self.system = self.words(SYSTEM_WORDS)
        self.mode = "shared"
        self.sent = self.failed = 0
        self._stop = threading.Event()
        self._slots = threading.BoundedSemaphore(MAX_IN_FLIGHT)
        self._http = httpx.Client(timeout=120, trust_env=False)
        self._threads = [threading.Thread(target=self._arrivals, daemon=True)]
        self._threads += [threading.Thread(target=self._queue_user, daemon=True)
                          for _ in range(QUEUE_USERS)]

    def words(self, n: int) -> str:
        with self._lock:
            return " ".join(self.rnd.choice(WORDS) for _ in range(n))

    def _send(self, prompt: str, max_tokens: int) -> None:
        with self._lock:
            if self.sent >= MAX_REQUESTS:
                self._stop.set()
                return
            self.sent += 1
        try:
            r = self._http.post(f"{self.url}/v1/completions", json={
                "model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                "ignore_eos": True, "temperature": 0})
            ok = r.status_code == 200
        except (httpx.HTTPError, RuntimeError):  # RuntimeError: the client closed at the end
            ok = False
        if not ok:
            with self._lock:
                self.failed += 1

    def _prompt(self) -> str:
        head = self.words(SYSTEM_WORDS) if self.mode == "unique" else self.system
        return f"{head} question {self.words(QUESTION_WORDS)}"

    def _one(self) -> None:
        try:
            self._send(self._prompt(), OUTPUT_TOKENS)
        finally:
            self._slots.release()

    def _arrivals(self) -> None:
        while not self._stop.wait(self.rnd.uniform(0.5, 1.5) / RATE):
            if self._slots.acquire(blocking=False):  # at most MAX_IN_FLIGHT at once
                threading.Thread(target=self._one, daemon=True).start()

    def _queue_user(self) -> None:
        while not self._stop.is_set():
            if self.mode != "queue":
                self._stop.wait(0.2)
                continue
            self._send(f"{self.system} question {self.words(QUESTION_WORDS)}", QUEUE_TOKENS)

    def __enter__(self) -> "Users":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:  # a streaming user may be mid-request: daemon threads
            t.join(0.5)
        self._http.close()


@dataclass
class Scrape:
    """What one scrape of the exporter's /metrics said (seconds from the phase's start)."""

    t: float
    cause: str | None = None
    fit_probes: float | None = None
    users: dict[str, float] = field(default_factory=dict)

    def line(self, t0: float) -> str:
        u = self.users
        fig = " ".join(f"{k} {u[k]:.3g}" for k in ("requests", "ttft_p50", "hit", "queue")
                       if k in u)
        return f"{self.t - t0:+6.0f} s {self.cause} ({fig})"


def read_metrics(text: str) -> tuple[str | None, float | None, dict[str, float]]:
    """(cause, window fit's probes, users' figures) from the exporter's exposition text."""
    from prometheus_client.parser import text_string_to_metric_families

    cause, probes, users = None, None, {}
    names = {"prefilltui_users_requests": "requests",
             "prefilltui_users_prefix_cache_hit_ratio": "hit",
             "prefilltui_users_queue_ratio": "queue"}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "prefilltui_ttft_cause" and s.value == 1:
                cause = s.labels["prefilltui_ttft_cause"]
            elif s.name == "prefilltui_fit_window_probes":
                probes = s.value
            elif s.name in names:
                users[names[s.name]] = s.value
            elif s.name == "prefilltui_users_ttft_seconds" and s.labels.get("quantile") == "0.5":
                users["ttft_p50"] = s.value
    return cause, probes, users


class Exporter:
    """``prefilltui exporter --config`` (a subprocess) probing ``url`` with its trace
    receiver on ``otlp_port``; ``scrape()`` reads its /metrics."""

    def __init__(self, url: str, otlp_port: int, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.config = workdir / "targets.toml"
        self.config.write_text(
            f'[[target]]\nurl = "{url}"\nname = "vllm"\ninterval = {INTERVAL_S}\n'
            f"lengths = {list(LENGTHS)}\notlp_listen = \"127.0.0.1:{otlp_port}\"\n")
        self.workdir = workdir
        self.log_path = workdir / "exporter.log"
        self.proc: subprocess.Popen | None = None
        self._http = httpx.Client(timeout=10, trust_env=False)

    def __enter__(self) -> "Exporter":
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "prefilltui", "exporter", "--config", str(self.config),
                 "--listen", f"127.0.0.1:{self.port}", "--run-dir", str(self.workdir / "runs")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        try:
            deadline = time.monotonic() + 60
            while True:
                assert self.proc.poll() is None, self.log_path.read_text()[-2000:]
                try:
                    if self._http.get(f"http://127.0.0.1:{self.port}/-/healthy").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the exporter did not serve in 60 s"
                time.sleep(0.2)
        except BaseException:
            self.__exit__()
            raise

    def scrape(self) -> Scrape:
        t = time.monotonic()
        text = self._http.get(f"http://127.0.0.1:{self.port}/metrics").text
        return Scrape(t, *read_metrics(text))

    def __exit__(self, *exc) -> None:
        self._http.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@dataclass
class Incident:
    """One incident's record: the scrapes of its baseline and after its onset."""

    name: str
    start: float = 0.0
    onset: float = 0.0
    baseline: list[Scrape] = field(default_factory=list)
    after: list[Scrape] = field(default_factory=list)

    @property
    def named_s(self) -> float | None:
        """Seconds from the onset to the first scrape naming the right cause."""
        hit = next((s for s in self.after if s.cause == self.name), None)
        return hit.t - self.onset if hit is not None else None

    @property
    def held(self) -> tuple[int, int]:
        """(right, scrapes) in the 10 s after the first right one."""
        n = self.named_s
        if n is None:
            return 0, 0
        tail = [s for s in self.after if s.t - self.onset > n]
        return sum(s.cause == self.name for s in tail), len(tail)

    def timeline(self) -> str:
        """The scrapes where the cause changed, and one every 15 s (seconds from onset)."""
        out, last, shown = [], None, -1e9
        for s in self.baseline + self.after:
            if s.cause != last or s.t - shown >= 15.0 or (self.after and s is self.after[0]):
                out.append(("onset " if self.after and s is self.after[0] else "")
                           + s.line(self.onset))
                last, shown = s.cause, s.t
        return "\n".join(out)


def run_incident(name: str, users: Users, url: str, otlp_port: int, workdir: Path) -> Incident:
    """A fresh exporter: the baseline (module docstring), then the onset (``users.mode``),
    scraped every second until the right cause or WITHIN_S + 5 s, then 10 s more."""
    rec = Incident(name)
    with Exporter(url, otlp_port, workdir) as ex:
        rec.start = time.monotonic()
        first_users = None
        while True:
            s = ex.scrape()
            rec.baseline.append(s)
            if first_users is None and s.users.get("requests"):
                first_users = s.t
            held = (s.fit_probes or 0) >= HOLD_PROBES
            if (held and first_users is not None and s.t - first_users >= USERS_REF_S
                    and s.t - rec.start >= BASELINE_MIN_S):
                break
            assert s.t - rec.start < BASELINE_MAX_S, (
                f"{name}: no baseline in {BASELINE_MAX_S:.0f} s (fit probes {s.fit_probes}, "
                f"users {s.users})\n{ex.log_path.read_text()[-2000:]}")
            time.sleep(1.0)
        rec.onset = time.monotonic()
        users.mode = "unique" if name == "cache_hit_drop" else "queue"
        end = None
        while True:
            time.sleep(1.0)
            s = ex.scrape()
            rec.after.append(s)
            if end is None and (s.cause == name or s.t - rec.onset > WITHIN_S + 5):
                end = s.t + 10.0  # a few more scrapes: does it hold?
            if end is not None and s.t >= end:
                break
        users.mode = "shared"
    return rec


def test_cache_collapse_and_queueing_named_within_a_minute(vllm_target, tmp_path, monkeypatch,
                                                          capsys):
    from prefilltui.demo.vllm import VllmServer

    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "1000")  # spans every second (the demo's)
    otlp_port = _free_port()
    t0 = time.monotonic()
    load0 = os.getloadavg()[0]
    with VllmServer(vllm_target, startup_timeout=600, log_path=tmp_path / "vllm.log",
                    otlp_endpoint=f"http://127.0.0.1:{otlp_port}/v1/traces",
                    extra_args=["--max-num-seqs", str(MAX_NUM_SEQS)]) as srv:
        started = time.monotonic() - t0
        with httpx.Client(timeout=30, trust_env=False) as c:
            model = c.get(f"{srv.base_url}/v1/models").json()["data"][0]["id"]
        with Users(srv.base_url, model) as users:
            time.sleep(5.0)  # the shared prompt is in the prefix cache before probing starts
            got = []
            for name in ("cache_hit_drop", "queueing"):
                got.append(run_incident(name, users, srv.base_url, otlp_port,
                                        tmp_path / name))
                time.sleep(5.0)  # the incident's requests finish
            sent, failed = users.sent, users.failed
    total = time.monotonic() - t0
    load = os.getloadavg()
    with capsys.disabled():
        print(f"\nvLLM incidents (interval {INTERVAL_S:g} s, lengths {LENGTHS}): vLLM up in "
              f"{started:.0f} s, {total:.0f} s in all, {sent} users' requests ({failed} failed), "
              f"load average {load0:.1f} -> {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}")
        for rec in got:
            n = rec.named_s
            print(f"  {rec.name}: named {'%.0f s' % n if n is not None else 'never'} after "
                  f"onset, right in %d of %d scrapes over the next 10 s " % rec.held
                  + f"(baseline {rec.onset - rec.start:.0f} s, causes "
                  f"{sorted({s.cause for s in rec.baseline}, key=str)})\n"
                  + "\n".join("    " + x for x in rec.timeline().splitlines()))
    for rec in got:
        said = [s for s in rec.baseline if s.cause not in QUIET]
        assert not said, f"{rec.name}: a cause before the onset:\n{rec.timeline()}"
        # it judged (a held fit and a users' reference), it did not abstain
        assert [s.cause for s in rec.baseline[-10:]] == ["none"] * 10, rec.timeline()
        n = rec.named_s
        assert n is not None and n <= WITHIN_S, f"{rec.name}: {n} s\n{rec.timeline()}"
        right, scrapes = rec.held  # and it holds: not one lucky scrape
        assert scrapes >= 5 and right >= 0.9 * scrapes, f"{rec.name}\n{rec.timeline()}"
    assert failed <= 0.02 * sent, (failed, sent)
