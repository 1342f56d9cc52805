"""Incidents on the real engines, injected from outside, judged by the real exporter.

Each row of the on-call bar (named within ``WITHIN_S`` of its onset, its numbers within
``NUMBER_TOL`` of the truth this test measures itself, no other cause before the onset)
against the real components: llama.cpp's llama-server (SmolLM2-135M Q4_1, 2 slots, one
thread pinned to one core) and vLLM 0.32 on the CPU (random weights, traced to the
exporter's ``otlp_listen``).  The users are this test's own clients, over HTTP as
anybody else's: they stream, so each request's TTFT and prompt tokens (the server's
``usage``) are the truth the exporter's figures are held against.  Every exporter is a
fresh ``prefilltui exporter`` subprocess at ``--interval 2`` whose ``/metrics`` is read
every second; its cause is ``prefilltui_ttft_cause``, its numbers
``prefilltui_ttft_cause_seconds`` (the exporter publishes no headline text; the TUI's
headline is read from its screen in tmux for the slots incident).

llama.cpp (one server, ~9 min):

1. control: 5 minutes of users and probes, the first exporter's baseline; nothing but
   none / not_enough_data may be said;
2. slots held by long prompts: two batch clients send ~600-token prompts back to back
   on the server's 2 slots, so users and probes wait for a slot (the truth, read from
   llama-server's own ``requests_deferred`` and ``/slots`` every second: deferred
   requests are a queue, ``queueing``; one long prompt co-batched with nothing deferred
   would be ``head_of_line``);
3. a slower prefill (a fresh exporter): a busy-loop process pinned to the server's core,
   in a scheduling group weighed as the server's (``_pin``); the truth is the server's
   own prompt seconds per prompt token (its ``prompt_seconds_total`` /
   ``prompt_tokens_total`` over the baseline and the incident), with this test's timed
   requests' ``timings`` beside it.

vLLM (one server at a time, ~11 min):

4. control: 5 minutes of users (a shared 480-word system prompt and a question) and
   probes;
5. users' prompts ×3 (the same exporter, after the control): each question grows so the
   prompt is ~3× longer with the shared prefix still cached; ``prompts_longer``, its
   seconds against the users' uncached prompt growth × vLLM's own prefill seconds per
   uncached token (its counters, ``CounterLog``), their TTFT p50 rise beside it;
6. redeploy without prefix caching (a fresh exporter): vLLM stopped and started again
   on the same port with ``--no-enable-prefix-caching`` (~1 min down); the cache
   collapse must be named (``cache_hit_drop``), never "users' prompts got longer";
   where the exporter publishes server changes, the restart must be among them.

The rows are recorded by one module fixture per engine and asserted one test each, so
a row that misses on today's code is marked xfail with its measured failure, not
weakened.  Every record (timelines, truth, numbers, load average) is printed and,
with $PREFILLTUI_INCIDENTS_OUT set, written there as JSON (docs/validation.md quotes
them).  Measured on the shared 2-core machine: llama.cpp 8-9 min, vLLM 10.7 min, ~20
min in all, the two 5-minute controls half of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.component, pytest.mark.timeout(1500)]

#: The exporter's probing (every incident): an on-call interval, lengths a loaded 2-core
#: machine prefills in seconds (llama.cpp measured 12-28 ms per token here, so its
#: lengths are a quarter of vLLM's).
INTERVAL_S = 2.0
LLAMA_LENGTHS = (16, 32, 64, 128)
VLLM_LENGTHS = (64, 128, 256, 512)
#: The bar (issue's): the right cause within 30 s of the onset, numbers within 25 %.
WITHIN_S, NUMBER_TOL = 30.0, 0.25
#: How long an incident is watched after its onset (then 10 s more once named).
WATCH_S = 65.0
#: The controls: this long with users and probes, no cause but QUIET.
CONTROL_S = 300.0
#: A later incident's baseline: the window fit holds this many probes (the held
#: expectation's first fit) and the users' windows are this old (two 60-s windows,
#: the users' reference), and at least BASELINE_MIN_S; more than BASELINE_MAX_S fails.
HOLD_PROBES, USERS_REF_S, BASELINE_MIN_S, BASELINE_MAX_S = 10, 90.0, 60.0, 240.0
QUIET = ("none", "not_enough_data", None)
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
         "zulu river stone cloud light").split()

#: llama.cpp: slots, the users (requests/s, words per prompt ~1.7 tokens each, output
#: tokens), the batch clients' prompt words (~600 tokens: 5-15 s of prefill each here).
LLAMA_SLOTS, LLAMA_RATE, LLAMA_USER_WORDS, LLAMA_BATCH_WORDS = 2, 0.2, 30, 350
#: vLLM: the users (as tests/integration/test_vllm_incidents.py) and the ×3 question.
VLLM_RATE, SYSTEM_WORDS, QUESTION_WORDS, OUTPUT_TOKENS = 0.4, 480, 25, 4
VLLM_MAX_NUM_SEQS = 4
QUESTION_X3_WORDS = QUESTION_WORDS + 2 * (SYSTEM_WORDS + QUESTION_WORDS)
MAX_IN_FLIGHT = 6

_RECORDS: dict[str, dict] = {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _load() -> str:
    return "%.1f/%.1f/%.1f" % os.getloadavg()


def _median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# ------------------------------------------------------------------ the users' truth

@dataclass
class Request:
    """One request as its client saw it: sent (monotonic s), TTFT (s, None: failed),
    prompt and cached tokens (the server's usage), prompt time per token (s, llama.cpp's
    ``timings``)."""

    sent: float
    ttft: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    prompt_s_per_token: float | None = None


def stream_completion(http: httpx.Client, url: str, model: str | None, prompt: str,
                      max_tokens: int) -> Request:
    """One streamed completion, timed to its first chunk; never raises (a failed one
    has ``ttft`` None)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True, "temperature": 0,
            "ignore_eos": True, "cache_prompt": True,
            "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    rec = Request(time.monotonic())
    first = None
    try:
        with http.stream("POST", f"{url}/v1/completions", json=body) as r:
            if r.status_code != 200:
                return rec
            for line in r.iter_lines():
                if not line.startswith("data: ") or line[6:].strip() == "[DONE]":
                    continue
                if first is None:
                    first = time.monotonic() - rec.sent
                d = json.loads(line[6:])
                u = d.get("usage") or {}
                if u.get("prompt_tokens"):
                    rec.prompt_tokens = u["prompt_tokens"]
                    rec.cached_tokens = (u.get("prompt_tokens_details") or {}).get(
                        "cached_tokens")
                t = d.get("timings") or {}
                if t.get("prompt_n"):
                    rec.prompt_s_per_token = t["prompt_ms"] / 1000.0 / t["prompt_n"]
    except (httpx.HTTPError, RuntimeError, ValueError):  # RuntimeError: closed at the end
        return rec
    rec.ttft = first
    return rec


class Users:
    """Arrivals at ``rate`` requests/s (uniform gaps around 1/rate), each prompt from
    ``prompt()`` (read at send time, so an incident changes it), at most MAX_IN_FLIGHT
    at once; every request is kept (``done``) as the truth."""

    def __init__(self, url: str, model: str | None, rate: float, prompt, max_tokens: int):
        self.url, self.model, self.rate, self.max_tokens = url, model, rate, max_tokens
        self.prompt = prompt
        self.done: list[Request] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._slots = threading.BoundedSemaphore(MAX_IN_FLIGHT)
        self._http = httpx.Client(timeout=180, trust_env=False)
        self._rnd = random.Random()
        self._thread = threading.Thread(target=self._arrivals, daemon=True)

    def _one(self) -> None:
        try:
            r = stream_completion(self._http, self.url, self.model, self.prompt(),
                                  self.max_tokens)
            with self._lock:
                self.done.append(r)
        finally:
            self._slots.release()

    def _arrivals(self) -> None:
        while not self._stop.wait(self._rnd.uniform(0.5, 1.5) / self.rate):
            if self._slots.acquire(blocking=False):
                threading.Thread(target=self._one, daemon=True).start()

    def between(self, t0: float, t1: float) -> list[Request]:
        with self._lock:
            return [r for r in self.done if t0 <= r.sent < t1]

    def stats(self, t0: float, t1: float) -> dict:
        rs = self.between(t0, t1)
        ok = [r for r in rs if r.ttft is not None]
        cached = [r.cached_tokens / r.prompt_tokens for r in ok
                  if r.cached_tokens is not None and r.prompt_tokens]
        return {"requests": len(rs), "failed": len(rs) - len(ok),
                "ttft_p50_s": _median(r.ttft for r in ok),
                "prompt_p50": _median(r.prompt_tokens for r in ok),
                "uncached_p50": _median(r.prompt_tokens - (r.cached_tokens or 0) for r in ok
                                        if r.prompt_tokens),
                "cached_share": statistics.mean(cached) if cached else None}

    def __enter__(self) -> "Users":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        self._http.close()


def words(n: int, rnd=random) -> str:
    return " ".join(rnd.choice(WORDS) for _ in range(n))


# ------------------------------------------------------------------ the exporter

@dataclass
class Scrape:
    """One read of the exporter's /metrics (``t`` monotonic seconds)."""

    t: float
    cause: str | None = None
    cause_s: dict[str, float] = field(default_factory=dict)
    fit_probes: float | None = None
    users: dict[str, float] = field(default_factory=dict)
    server_changes: float | None = None  # None: the exporter publishes none


def read_metrics(t: float, text: str) -> Scrape:
    from prometheus_client.parser import text_string_to_metric_families

    s = Scrape(t)
    for fam in text_string_to_metric_families(text):
        for x in fam.samples:
            if x.name == "prefilltui_ttft_cause" and x.value == 1:
                s.cause = x.labels["prefilltui_ttft_cause"]
            elif x.name == "prefilltui_ttft_cause_seconds":
                s.cause_s[x.labels.get("cause", "?")] = x.value
            elif x.name == "prefilltui_fit_window_probes":
                s.fit_probes = x.value
            elif x.name == "prefilltui_users_requests":
                s.users["requests"] = x.value
            elif x.name == "prefilltui_users_ttft_seconds" and x.labels.get("quantile") == "0.5":
                s.users["ttft_p50"] = x.value
            elif (x.name == "prefilltui_users_prompt_tokens"
                  and x.labels.get("quantile") == "0.5"):
                s.users["prompt_p50"] = x.value
            elif x.name == "prefilltui_users_prefix_cache_hit_ratio":
                s.users["hit"] = x.value
            elif x.name == "prefilltui_server_changes_total":
                s.server_changes = (s.server_changes or 0.0) + x.value
    return s


class Exporter:
    """A fresh ``prefilltui exporter --config`` subprocess for one target."""

    def __init__(self, url: str, name: str, lengths, workdir: Path,
                 otlp_port: int | None = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.workdir = workdir
        self.config = workdir / "targets.toml"
        otlp = f'otlp_listen = "127.0.0.1:{otlp_port}"\n' if otlp_port else ""
        self.config.write_text(f'[[target]]\nurl = "{url}"\nname = "{name}"\n'
                               f"interval = {INTERVAL_S}\nlengths = {list(lengths)}\n{otlp}")
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
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(self.log_path.read_text()[-2000:])
            try:
                if self._http.get(f"http://127.0.0.1:{self.port}/-/healthy").status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.__exit__()
                raise AssertionError("the exporter did not serve in 60 s")
            time.sleep(0.2)

    def scrape(self) -> Scrape:
        t = time.monotonic()
        try:
            return read_metrics(t, self._http.get(f"http://127.0.0.1:{self.port}/metrics").text)
        except httpx.HTTPError:
            return Scrape(t)

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
    """One row's record: the scrapes before and after the onset (monotonic seconds),
    the right causes, the truth measured and the load average."""

    name: str
    right: tuple[str, ...] = ()
    start: float = 0.0
    onset: float = 0.0
    baseline: list[Scrape] = field(default_factory=list)
    after: list[Scrape] = field(default_factory=list)
    truth: dict = field(default_factory=dict)
    load: dict = field(default_factory=dict)

    @property
    def named(self) -> Scrape | None:
        return next((s for s in self.after if s.cause in self.right), None)

    @property
    def named_s(self) -> float | None:
        s = self.named
        return s.t - self.onset if s is not None else None

    def quoted(self, cause: str) -> float | None:
        """The seconds it quotes for ``cause``: the median over the scrapes naming it."""
        return _median(s.cause_s.get(cause) for s in self.after if s.cause == cause)

    def said_after(self) -> list[str]:
        return sorted({s.cause for s in self.after if s.cause not in QUIET}, key=str)

    def held(self) -> tuple[int, int]:
        """(right, scrapes) after the first right one."""
        n = self.named
        if n is None:
            return 0, 0
        tail = [s for s in self.after if s.t > n.t]
        return sum(s.cause in self.right for s in tail), len(tail)

    def timeline(self) -> str:
        out, last, shown = [], "-", -1e9
        for s in self.baseline + self.after:
            first_after = bool(self.after) and s is self.after[0]
            if s.cause != last or s.t - shown >= 15.0 or first_after:
                nums = " ".join(f"{k} {v * 1000:.0f} ms" for k, v in s.cause_s.items())
                u = " ".join(f"{k} {v:.3g}" for k, v in s.users.items())
                ch = f" changes {s.server_changes:g}" if s.server_changes is not None else ""
                out.append(f"{'onset ' if first_after else ''}{s.t - self.onset:+6.0f} s "
                           f"{s.cause} [{nums}] ({u}){ch}")
                last, shown = s.cause, s.t
        return "\n".join(out)

    def summary(self) -> dict:
        n = self.named
        r, k = self.held()
        return {"name": self.name, "right": list(self.right), "named_s": self.named_s,
                "said_at_naming": n.cause_s if n is not None else None,
                "quoted_s": {c: self.quoted(c) for c in self.right},
                "held": [r, k], "said_after": self.said_after(),
                "said_before": sorted({s.cause for s in self.baseline}, key=str),
                "baseline_s": self.onset - self.start, "truth": self.truth, "load": self.load,
                "server_changes": [self.baseline[-1].server_changes if self.baseline else None,
                                   self.after[-1].server_changes if self.after else None]}


def baseline(ex: Exporter, rec: Incident, *, at_least: float, users_ref: bool) -> None:
    """Scrape every second until the fit is held (and the users' windows are old enough
    where ``users_ref``) and ``at_least`` seconds have passed."""
    rec.start = time.monotonic()
    rec.load["before"] = _load()
    first_users = None
    while True:
        s = ex.scrape()
        rec.baseline.append(s)
        if first_users is None and s.users.get("requests"):
            first_users = s.t
        ready = (s.fit_probes or 0) >= HOLD_PROBES and (
            not users_ref or (first_users is not None and s.t - first_users >= USERS_REF_S))
        if ready and s.t - rec.start >= at_least:
            break
        assert s.t - rec.start < max(BASELINE_MAX_S, at_least + 60), (
            f"{rec.name}: no baseline (fit probes {s.fit_probes}, users {s.users})\n"
            + ex.log_path.read_text()[-2000:])
        time.sleep(1.0)


def watch(ex: Exporter, rec: Incident, *, onset: float | None = None, until=None,
          at_least: float = 0.0) -> None:
    """Scrape every second from the onset until the right cause or WATCH_S (then 10 s
    more, and at least ``at_least`` s from the onset), calling ``until(scrape)`` each
    time (a truth poller's hook)."""
    rec.onset = onset if onset is not None else time.monotonic()
    end = None
    while True:
        time.sleep(1.0)
        s = ex.scrape()
        rec.after.append(s)
        if until is not None:
            until(s)
        if end is None and (s.cause in rec.right or s.t - rec.onset > WATCH_S):
            end = s.t + 10.0
        if end is not None and s.t >= end and s.t - rec.onset >= at_least:
            break
    rec.load["during"] = _load()


def _report(recs: list[Incident], request) -> None:
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        for rec in recs:
            print(f"\n== {rec.name}: named {rec.named_s} s after onset, held {rec.held()}, "
                  f"truth {rec.truth}, load {rec.load}\n{rec.timeline()}")
    for rec in recs:
        _RECORDS[rec.name] = rec.summary()
    out = os.environ.get("PREFILLTUI_INCIDENTS_OUT")
    if out:
        Path(out).write_text(json.dumps(_RECORDS, indent=1, default=str))


def within(said: float | None, truth: float | None) -> bool:
    return said is not None and truth and abs(said - truth) <= NUMBER_TOL * abs(truth)


# ------------------------------------------------------------------ llama.cpp

def _pin(pid: int, cpu: int, nice: int) -> int:
    """Pin every thread of ``pid`` to ``cpu`` and set its scheduling group's niceness
    (with the kernel's autogroups a session's threads share one weight, so a thread's
    own nice does not count against other sessions; as root a negative one, so the
    other engineers' load on that core sways the truth less); returns the niceness set
    (0 where it could not be)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), {cpu})
    try:
        Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")
    except OSError:  # no autogroups, or not root: the fair share of a plain process
        return 0
    return nice


class Tmux:
    """A private tmux server running the TUI."""

    def __init__(self, tmp: Path) -> None:
        self.sock, self.name = str(tmp / "tmux.sock"), "real-incidents"

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True,
                              text=True, timeout=20).stdout

    def capture(self) -> str:
        return self("capture-pane", "-p", "-t", self.name)


def _slots_truth(http: httpx.Client, url: str) -> tuple[int, float]:
    """(slots processing, requests deferred) as llama-server says now."""
    busy = sum(bool(s.get("is_processing")) for s in http.get(f"{url}/slots").json())
    m = re.search(r"^llamacpp:requests_deferred\s+(\S+)", http.get(f"{url}/metrics").text, re.M)
    return busy, float(m.group(1)) if m else 0.0


def _prompt_counters(http: httpx.Client, url: str) -> tuple[float, float]:
    """(prompt tokens, prompt seconds) llama-server has counted so far."""
    text = http.get(f"{url}/metrics").text
    got = [re.search(rf"^llamacpp:{k}\s+(\S+)", text, re.M)
           for k in ("prompt_tokens_total", "prompt_seconds_total")]
    return tuple(float(m.group(1)) if m else 0.0 for m in got)  # type: ignore[return-value]


def _per_token(c0: tuple[float, float], c1: tuple[float, float]) -> float | None:
    return (c1[1] - c0[1]) / (c1[0] - c0[0]) if c1[0] > c0[0] else None


def _timed_prefill(http: httpx.Client, url: str, n: int, k: int) -> list[float]:
    """k of this test's own requests of ~``n`` words: the server's prompt seconds per
    token (its ``timings``) of each."""
    out = []
    for _ in range(k):
        r = stream_completion(http, url, None, words(n), 1)
        if r.prompt_s_per_token:
            out.append(r.prompt_s_per_token)
    return out


@pytest.fixture(scope="module")
def llama_rows(llama_server_binary, demo_gguf, tmp_path_factory, request):
    from prefilltui.demo.server import LlamaServer

    from tests.components import require

    tmp = tmp_path_factory.mktemp("real-llama")
    tmux_ok = shutil.which("tmux") is not None
    if not tmux_ok:
        require("tmux")
    recs = []
    with LlamaServer(llama_server_binary, demo_gguf, ctx=8192, threads=1,
                     extra_args=["-np", str(LLAMA_SLOTS)], startup_timeout=180,
                     log_path=tmp / "llama.log") as srv:
        nice = _pin(srv.pid, 0, -10)
        url = srv.base_url
        http = httpx.Client(timeout=180, trust_env=False)
        rnd = random.Random()
        users = Users(url, None, LLAMA_RATE, lambda: words(LLAMA_USER_WORDS, rnd), 4)
        tmux = Tmux(tmp)
        with users:
            # the TUI, as a person runs it, beside the exporter for the whole control
            tmux("new-session", "-d", "-s", tmux.name, "-x", "120", "-y", "32",
                 f"{sys.executable} -m prefilltui watch {url} --lengths "
                 f"{','.join(map(str, LLAMA_LENGTHS))} --pause 3 --no-telemetry")
            control = Incident("llama.cpp control", right=())
            slots = Incident("llama.cpp slots held", right=("queueing", "head_of_line"))
            with Exporter(url, "llama", LLAMA_LENGTHS, tmp / "slots") as ex:
                baseline(ex, control, at_least=CONTROL_S, users_ref=False)
                control.onset = time.monotonic()
                control.load["during"] = control.load["before"] = _load()
                control.truth = {**users.stats(control.start, control.onset), "nice": nice}
                slots.baseline, slots.start = control.baseline[-30:], control.start
                slots.load["before"] = _load()
                screens = {"before": tmux.capture()}
                stop = threading.Event()

                def batch() -> None:
                    c = httpx.Client(timeout=300, trust_env=False)
                    while not stop.is_set():
                        r = stream_completion(c, url, None, words(LLAMA_BATCH_WORDS, rnd), 1)
                        slots.truth.setdefault("batch_prompts", []).append(r.prompt_tokens)
                    c.close()

                polls = []

                def poll(s: Scrape) -> None:
                    try:
                        polls.append(_slots_truth(http, url))
                    except (httpx.HTTPError, ValueError):
                        pass
                    age = s.t - slots.onset
                    if "onset+30s" not in screens and age >= 30:
                        screens["onset+30s"] = tmux.capture()

                batchers = [threading.Thread(target=batch, daemon=True)
                            for _ in range(LLAMA_SLOTS)]
                slots.onset = time.monotonic()
                for b in batchers:
                    b.start()
                # 40 s at least: enough users' requests wait to be the truth
                watch(ex, slots, onset=slots.onset, until=poll, at_least=40.0)
                if "onset+30s" not in screens:
                    screens["onset+30s"] = tmux.capture()
                stop.set()
                t_end = time.monotonic()
                for b in batchers:
                    b.join(120)
                time.sleep(5.0)  # the users' requests that waited finish: they are the truth
                deferred = sum(d > 0 for _, d in polls)
                full = sum(b >= LLAMA_SLOTS for b, _ in polls)
                before = users.stats(slots.onset - 60, slots.onset)
                during = users.stats(slots.onset, t_end)
                slots.truth.update({
                    "polls": len(polls), "deferred_polls": deferred, "all_slots_busy": full,
                    "truth_cause": "queueing" if deferred >= len(polls) / 2 else "head_of_line",
                    "users_before": before, "users_during": during,
                    "batch_prompt_p50": _median(slots.truth.get("batch_prompts", []))})
                slots.truth.pop("batch_prompts", None)
            tui = {k: v for k, v in screens.items()}
            tmux("kill-server")
            (tmp / "tui.json").write_text(json.dumps(tui))
            recs += [control, slots]

            # a slower prefill: a fresh exporter, a busy loop on the server's core
            slow = Incident("llama.cpp slower prefill", right=("slow_prefill",))
            with Exporter(url, "llama", LLAMA_LENGTHS, tmp / "slow") as ex:
                c_start = _prompt_counters(http, url)
                baseline(ex, slow, at_least=BASELINE_MIN_S, users_ref=False)
                timed_before = _timed_prefill(http, url, 60, 5)
                c_onset = _prompt_counters(http, url)
                # a session of its own: a scheduling group weighed as the server's is
                hog = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                       stdin=subprocess.DEVNULL, start_new_session=True)
                _pin(hog.pid, 0, nice)
                try:
                    watch(ex, slow)
                    c_end = _prompt_counters(http, url)
                    timed_after = _timed_prefill(http, url, 60, 5)
                finally:
                    hog.kill()
                    hog.wait(5)
                # the truth: the server's own prompt seconds per prompt token over the
                # baseline and over the incident (every request's, probes' and users'),
                # and this test's own timed requests (their ``timings``) beside it
                b, a = _per_token(c_start, c_onset), _per_token(c_onset, c_end)
                tb, ta = _median(timed_before), _median(timed_after)
                n_mid = statistics.mean(LLAMA_LENGTHS[1:3])  # the probes' median length
                slow.truth = {"s_per_token_before": b, "s_per_token_after": a,
                              "ratio": a / b if a and b else None,
                              "timed_ratio": ta / tb if ta and tb else None,
                              "added_s_at_median_length": (a - b) * n_mid if a and b else None,
                              "users_before": users.stats(slow.onset - 60, slow.onset),
                              "users_during": users.stats(slow.onset, slow.onset + WATCH_S)}
            recs.append(slow)
        http.close()
    _report(recs, request)
    return {r.name: r for r in recs} | {"tui": tui}


def test_llama_control_says_nothing(llama_rows):
    rec = llama_rows["llama.cpp control"]
    said = [s.cause for s in rec.baseline if s.cause not in QUIET]
    assert not said, rec.timeline()


@pytest.mark.xfail(strict=False, reason=(
    "measured in 4 runs: queueing named at +15 / +6 / +9 / +9 s (right: llama-server "
    "deferred requests in 24/24, 15/16, 36/39, 36/39 polls), but it quotes 9.8 / 7.8 / 5.0 "
    "/ 4.7 s of queue where the users' own TTFT p50 rose 19.7 / 19.3 / 8.5 / 7.1 s; and "
    "head_of_line flickers in the third and fourth"))
def test_llama_slots_held_named(llama_rows):
    rec = llama_rows["llama.cpp slots held"]
    truth = rec.truth["truth_cause"]
    assert rec.truth["users_during"]["ttft_p50_s"] > 1.5 * rec.truth["users_before"][
        "ttft_p50_s"], rec.truth  # the incident is real: the users waited
    rec.right = (truth,)
    n = rec.named_s
    assert n is not None and n <= WITHIN_S, f"{n} s, said {rec.said_after()}\n{rec.timeline()}"
    wrong = [c for c in rec.said_after() if c != truth]
    assert not wrong, rec.timeline()
    # the wait it quotes against the users' own: their TTFT p50 rise
    added = rec.truth["users_during"]["ttft_p50_s"] - rec.truth["users_before"]["ttft_p50_s"]
    assert within(rec.quoted(truth), added), (rec.quoted(truth), added)


@pytest.mark.xfail(strict=False, reason=(
    "measured: at onset + 30 s the TUI read 'TTFT too noisy to judge yet' (a 16-token "
    "probe of 23,052 ms on screen), then 'TTFT ok: 128->1,922 ms' and 'TTFT ok: 32->218, "
    "128->806 ms' and 'TTFT ok: 16->117, 129->804 ms' in three more runs, while the users' "
    "TTFT p50 was 20 / 20 / 8.9 / 7.5 s"))
def test_llama_slots_in_the_tui(llama_rows):
    screens = llama_rows["tui"]
    truth = llama_rows["llama.cpp slots held"].truth["truth_cause"]
    word = {"queueing": "queue", "head_of_line": "head-of-line"}[truth]
    assert word in screens["onset+30s"].lower(), screens["onset+30s"]


@pytest.mark.xfail(strict=False, reason=(
    "measured: with the hog's scheduling group weighed as the server's, a true 1.96x "
    "slower prefill (llama-server's own seconds per prompt token 6.4 -> 12.4 ms; 2.04x "
    "by timed requests; users' TTFT p50 0.35 -> 0.67 s) read 'none' for 65 s but one "
    "scrape of head_of_line at +7 s; a true 2.02x was named at +16 s after a head_of_line, "
    "quoting 390 ms where the truth at the probes' median length was 310 ms (+26 %); two "
    "earlier runs with a plain-nice hog (1.06-1.26x) read 'none' throughout"))
def test_llama_slower_prefill_named(llama_rows):
    rec = llama_rows["llama.cpp slower prefill"]
    assert rec.truth["ratio"] and rec.truth["ratio"] >= 1.3, rec.truth  # a real slowdown
    n = rec.named_s
    assert n is not None and n <= WITHIN_S, f"{n} s, said {rec.said_after()}\n{rec.timeline()}"
    said = rec.quoted("slow_prefill")
    assert within(said, rec.truth["added_s_at_median_length"]), (said, rec.truth)


# ------------------------------------------------------------------ vLLM

#: vLLM's own counters: prompt tokens, the cached share of them, prefill seconds.
VLLM_COUNTERS = ("vllm:prompt_tokens_total", "vllm:prompt_tokens_cached_total",
                 "vllm:request_prefill_time_seconds_sum")


class CounterLog:
    """vLLM's own counters (VLLM_COUNTERS) read every 5 s from its /metrics (a thread),
    for the server's prefill seconds per computed (uncached) prompt token."""

    def __init__(self, url: str) -> None:
        self.url, self.rows = url, []  # (monotonic s, {name: value})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from prometheus_client.parser import text_string_to_metric_families

        with httpx.Client(timeout=10, trust_env=False) as http:
            while not self._stop.wait(5.0):
                try:
                    text = http.get(f"{self.url}/metrics").text
                except httpx.HTTPError:
                    continue  # down: a restart
                got = dict.fromkeys(VLLM_COUNTERS, 0.0)
                for fam in text_string_to_metric_families(text):
                    for x in fam.samples:
                        if x.name in got:
                            got[x.name] += x.value
                self.rows.append((time.monotonic(), got))

    def s_per_token(self, t0: float, t1: float) -> float | None:
        """Prefill seconds per uncached prompt token between t0 and t1 (one server)."""
        rows = [r for t, r in self.rows if t0 <= t <= t1]
        if len(rows) < 2:
            return None
        a, b = rows[0], rows[-1]
        d = {k: b[k] - a[k] for k in VLLM_COUNTERS}
        computed = d["vllm:prompt_tokens_total"] - d["vllm:prompt_tokens_cached_total"]
        return d["vllm:request_prefill_time_seconds_sum"] / computed if computed > 0 else None

    def __enter__(self) -> "CounterLog":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture(scope="module")
def vllm_rows(vllm_target, tmp_path_factory, request):
    from prefilltui.demo.vllm import VllmServer

    class SamePort(VllmServer):
        """vLLM on a port chosen once, so a restart is where the users and the
        exporter already send."""

        fixed_port: int | None = None

        def build_command(self, port: int) -> list[str]:
            return super().build_command(self.fixed_port or port)

        def _spawn(self) -> None:
            super()._spawn()
            if self.fixed_port:
                self.port = self.fixed_port

    tmp = tmp_path_factory.mktemp("real-vllm")
    otlp_port, port = _free_port(), _free_port()
    os.environ.setdefault("OTEL_BSP_SCHEDULE_DELAY", "1000")  # spans every second
    endpoint = f"http://127.0.0.1:{otlp_port}/v1/traces"

    def server(*extra: str, log: str) -> SamePort:
        s = SamePort(vllm_target, startup_timeout=600, log_path=tmp / log,
                     otlp_endpoint=endpoint,
                     extra_args=["--max-num-seqs", str(VLLM_MAX_NUM_SEQS), *extra])
        s.fixed_port = port
        return s

    rnd = random.Random()
    system = words(SYSTEM_WORDS, rnd)
    mode = {"question": QUESTION_WORDS}
    recs = []
    srv = server(log="vllm-1.log").start()
    try:
        url = srv.base_url
        with httpx.Client(timeout=30, trust_env=False) as c:
            model = c.get(f"{url}/v1/models").json()["data"][0]["id"]
        users = Users(url, model, VLLM_RATE,
                      lambda: f"{system} question {words(mode['question'], rnd)}",
                      OUTPUT_TOKENS)
        counters = CounterLog(url)
        with users, counters:
            time.sleep(5.0)  # the shared prompt is in the prefix cache before probing
            control = Incident("vLLM control", right=())
            longer = Incident("vLLM prompts x3", right=("prompts_longer",))
            with Exporter(url, "vllm", VLLM_LENGTHS, tmp / "longer", otlp_port) as ex:
                baseline(ex, control, at_least=CONTROL_S, users_ref=True)
                control.onset = time.monotonic()
                control.load["during"] = control.load["before"] = _load()
                control.truth = users.stats(control.start, control.onset)
                longer.baseline, longer.start = control.baseline[-30:], control.start
                longer.load["before"] = _load()
                longer.onset = time.monotonic()
                mode["question"] = QUESTION_X3_WORDS
                watch(ex, longer, onset=longer.onset)
                mode["question"] = QUESTION_WORDS
                b = users.stats(longer.onset - 60, longer.onset)
                a = users.stats(longer.onset, longer.onset + WATCH_S)
                per_tok = counters.s_per_token(longer.onset - 60, longer.onset)
                grown = (a["uncached_p50"] - b["uncached_p50"]
                         if a["uncached_p50"] and b["uncached_p50"] else None)
                longer.truth = {"users_before": b, "users_during": a,
                                "s_per_uncached_token": per_tok,
                                "added_prefill_s": grown * per_tok if grown and per_tok else None,
                                "prompt_ratio": (a["prompt_p50"] / b["prompt_p50"]
                                                 if a["prompt_p50"] and b["prompt_p50"] else None),
                                "added_ttft_s": (a["ttft_p50_s"] - b["ttft_p50_s"]
                                                 if a["ttft_p50_s"] and b["ttft_p50_s"] else None)}
            recs += [control, longer]
            time.sleep(5.0)  # the long prompts finish

            redeploy = Incident("vLLM redeploy without prefix caching",
                                right=("cache_hit_drop",))
            with Exporter(url, "vllm", VLLM_LENGTHS, tmp / "redeploy", otlp_port) as ex:
                baseline(ex, redeploy, at_least=BASELINE_MIN_S, users_ref=True)
                t_stop = time.monotonic()
                srv.stop()
                down: list[Scrape] = []
                up = threading.Event()

                def scrape_while_down() -> None:  # what it says while the server is down
                    while not up.wait(1.0):
                        down.append(ex.scrape())

                scraper = threading.Thread(target=scrape_while_down, daemon=True)
                scraper.start()
                try:
                    # started from this thread: the server dies with the thread that
                    # started it (PR_SET_PDEATHSIG)
                    srv = server("--no-enable-prefix-caching", log="vllm-2.log").start()
                finally:
                    up.set()
                    scraper.join(15)
                t_up = time.monotonic()
                watch(ex, redeploy, onset=t_up)
                redeploy.after = down + redeploy.after
                b = users.stats(t_stop - 60, t_stop)
                a = users.stats(t_up, t_up + WATCH_S)
                per_tok = counters.s_per_token(t_stop - 60, t_stop)
                lost = (a["uncached_p50"] - b["uncached_p50"]
                        if a["uncached_p50"] and b["uncached_p50"] else None)
                redeploy.truth = {"down_s": t_up - t_stop, "users_before": b,
                                  "s_per_uncached_token": per_tok,
                                  "added_prefill_s": lost * per_tok if lost and per_tok else None,
                                  "added_ttft_s": (a["ttft_p50_s"] - b["ttft_p50_s"]
                                                   if a["ttft_p50_s"] and b["ttft_p50_s"]
                                                   else None),
                                  "users_after": a,
                                  "said_while_down": sorted({s.cause for s in down}, key=str)}
            recs.append(redeploy)
    finally:
        srv.stop()
    _report(recs, request)
    return {r.name: r for r in recs}


@pytest.mark.vllm
def test_vllm_control_says_nothing(vllm_rows):
    rec = vllm_rows["vLLM control"]
    said = [s.cause for s in rec.baseline if s.cause not in QUIET]
    assert not said, rec.timeline()


@pytest.mark.vllm
@pytest.mark.xfail(strict=False, reason=(
    "measured: named at +24 s quoting 1.53 s more prefill (users' TTFT p50 +2.62 s) in "
    "one run; missed in another (said head_of_line, queueing; users' prompt p50 "
    "892 -> 2,643 tokens, uncached 124 -> 1,875, TTFT p50 0.16 -> 4.6 s, vLLM's own "
    "prefill +1.73 s)"))
def test_vllm_prompts_x3_named(vllm_rows):
    rec = vllm_rows["vLLM prompts x3"]
    assert rec.truth["prompt_ratio"] > 2.5, rec.truth  # the incident is the one meant
    n = rec.named_s
    assert n is not None and n <= WITHIN_S, f"{n} s, said {rec.said_after()}\n{rec.timeline()}"
    # the longer prompts' load may queue or block (their consequence); nothing else
    assert set(rec.said_after()) <= {"prompts_longer", "queueing", "head_of_line"}, (
        rec.timeline())
    # "≈ X ms more prefill each": the users' uncached prompt growth × vLLM's own prefill
    # seconds per uncached token before (its counters); their TTFT rise beside it
    said = rec.quoted("prompts_longer")
    assert within(said, rec.truth["added_prefill_s"]), (said, rec.truth)


@pytest.mark.vllm
@pytest.mark.xfail(strict=False, reason=(
    "measured: cache_hit_drop first at +67 s / +69 s after vLLM answered again (~50 s "
    "down), slow_prefill at +26 s and head_of_line at +46 s / +47 s before it, the "
    "users' hit rate unpublished from the restart until then; it quotes 389 / 348 ms "
    "where the users' TTFT p50 rose 624 / 504 ms; no server change published"))
def test_vllm_redeploy_named(vllm_rows):
    rec = vllm_rows["vLLM redeploy without prefix caching"]
    assert "prompts_longer" not in rec.said_after(), rec.timeline()
    n = rec.named_s
    assert n is not None and n <= WITHIN_S, f"{n} s, said {rec.said_after()}\n{rec.timeline()}"
    assert rec.said_after() == ["cache_hit_drop"], rec.timeline()  # the probes are unchanged
    # the prefill the lost cache adds: uncached tokens gained × vLLM's seconds per token
    said = rec.quoted("cache_hit_drop")
    assert within(said, rec.truth["added_prefill_s"]), (said, rec.truth)
    before, after = rec.summary()["server_changes"]
    if before is not None:  # the exporter publishes server changes: the restart is one
        assert after > before, rec.timeline()
