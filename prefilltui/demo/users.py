"""A small synthetic user load for the demo (``prefilltui demo --engine vllm --users RATE``):
other people's requests beside the probes, so a newcomer sees users and probes on one
TTFT plot.

``SyntheticUsers(base_url, rate)`` sends completions at ``rate`` requests/s (Poisson
arrivals) from a daemon thread: each prompt is one of ``PREFIXES`` shared system
prompts (so the server's prefix cache has something to hit) followed by a question of
one of ``SUFFIX_WORDS`` lengths (mixed lengths), ``MAX_TOKENS`` output tokens.  Bounded:
at most ``MAX_REQUESTS`` requests and ``MAX_S`` seconds, at most ``MAX_IN_FLIGHT`` at
once (an arrival beyond that is skipped and counted), and only to a loopback address.
Its requests carry no ``X-Request-Id``: the server names them itself, so prefilltui's
receiver sees them as users, never as probes.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx

#: Loopback hosts the demo's users may be sent to (never another machine).
LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: Caps: requests, seconds, requests in flight; output tokens per request.
MAX_REQUESTS = 2000
MAX_S = 1800.0
MAX_IN_FLIGHT = 4
MAX_TOKENS = 4
#: Words of the shared prefixes and of the questions after them (the demo's vLLM
#: serves 4,096 tokens; the longest prompt here is ~1,500 words, ~2,000 tokens).
PREFIX_WORDS = (300, 900)
SUFFIX_WORDS = (10, 40, 150, 600)
_VOCAB = ("river", "stone", "cloud", "paper", "orange", "signal", "window", "garden",
          "metal", "engine", "letter", "forest", "market", "silver", "bridge", "winter")


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_VOCAB) for _ in range(n))


class SyntheticUsers:
    """The demo's user load (module docstring).  ``start()`` returns at once; ``stop()``
    ends it; ``sent`` / ``failed`` / ``skipped`` count requests.

    Raises (constructor):
        ValueError: ``base_url`` is not a loopback address, or ``rate`` is not positive.
    """

    def __init__(self, base_url: str, rate: float, *, model: str | None = None,
                 seed: int = 0, max_requests: int = MAX_REQUESTS, max_s: float = MAX_S) -> None:
        host = urlsplit(base_url).hostname or ""
        if host not in LOOPBACK:
            raise ValueError(f"the demo's users go to a loopback address only, not {host!r}")
        if not rate > 0:
            raise ValueError(f"--users must be a positive rate (requests/s), not {rate!r}")
        self.base_url = base_url.rstrip("/")
        self.rate = rate
        self.model = model
        self.max_requests = max_requests
        self.max_s = max_s
        self._rng = random.Random(seed)
        prefix_rng = random.Random(seed + 1)
        self.prefixes = tuple(_words(prefix_rng, n) for n in PREFIX_WORDS)
        self.sent = self.failed = self.skipped = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prefilltui-demo-users",
                                        daemon=True)

    def start(self) -> "SyntheticUsers":
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def prompt(self) -> str:
        """One user's prompt: a shared prefix and a question of a mixed length."""
        prefix = self._rng.choice(self.prefixes)
        return f"{prefix}\n\nQuestion: {_words(self._rng, self._rng.choice(SUFFIX_WORDS))}?"

    def _run(self) -> None:
        t0 = time.monotonic()
        with httpx.Client(timeout=60.0, trust_env=False) as client, \
                ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix="prefilltui-user") as pool:
            model = self.model or self._first_model(client)
            while not self._stop.is_set():
                if self.sent + self.skipped >= self.max_requests \
                        or time.monotonic() - t0 >= self.max_s:
                    return
                if self._stop.wait(self._rng.expovariate(self.rate)):
                    return
                with self._lock:
                    if self._in_flight >= MAX_IN_FLIGHT:
                        self.skipped += 1
                        continue
                    self._in_flight += 1
                    self.sent += 1
                pool.submit(self._one, client, model, self.prompt())

    def _first_model(self, client: httpx.Client) -> str | None:
        try:
            data = client.get(f"{self.base_url}/v1/models").json()
            return str(data["data"][0]["id"])
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            return None

    def _one(self, client: httpx.Client, model: str | None, prompt: str) -> None:
        try:
            body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
            if model:
                body["model"] = model
            r = client.post(f"{self.base_url}/v1/completions", json=body)
            ok = r.status_code == 200
        except httpx.HTTPError:
            ok = False
        with self._lock:
            self._in_flight -= 1
            if not ok:
                self.failed += 1
