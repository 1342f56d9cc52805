"""Other people's traffic, the incidents' own clients, and the probes' schedule.

- ``users``: the users prefilltui does not send, a production-like mix: Poisson
  arrivals at ``rate`` requests/s; 70 % start with one of three shared 1,536-token
  system prompts followed by a message of their own (32-640 tokens), the rest unique
  128-1,500-token prompts; 16-128 output tokens (so their decodes co-run with the
  probes).  ``grow(t)`` multiplies a prompt's length from some time on (the extra
  tokens are the user's own, uncached);
- ``batch_client``: one long unique prompt every ``every_s`` (head-of-line);
- ``Flood``: a closed loop keeping ``n`` long-output requests in flight (queueing);
- ``exporter_schedule`` / ``tui_pacing``: how the exporter and the TUI space their
  probes (one in flight; lengths reshuffled every round; the exporter's starts at
  least ``interval`` apart plus up to 20 % jitter; the TUI's duty cycle).

All of it seeded (``random.Random``) and on the simulated clock (s).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Iterator

from tests.incidents.engine import Finished, Prompt, SimEngine

#: The users' mix: half a request a second, 70 % behind a shared system prompt.
USERS_RATE = 0.5
SHARED_SHARE = 0.70
SYSTEM_PROMPTS = 3
SYSTEM_TOKENS = 1536
MESSAGE_TOKENS = (32, 640)
UNIQUE_TOKENS = (128, 1500)
OUTPUT_TOKENS = (16, 128)


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request as its client sends it (``t``: when it leaves the client, s)."""

    t: float
    rid: str
    prompt: Prompt
    max_tokens: int
    who: str


def users(seed: int, until_s: float, *, rate: float = USERS_RATE,
          grow: Callable[[float], float] = lambda t: 1.0) -> list[Arrival]:
    """The users' arrivals in [0, until_s) (module docstring)."""
    rng = random.Random(seed)
    out: list[Arrival] = []
    t, i = 0.0, 0
    while True:
        t += rng.expovariate(rate)
        if t >= until_s:
            return out
        i += 1
        uid = f"u{seed}-{i}"
        if rng.random() < SHARED_SHARE:
            sp = rng.randrange(SYSTEM_PROMPTS)
            n = SYSTEM_TOKENS + rng.randint(*MESSAGE_TOKENS)
            shared = (f"system-{sp}", SYSTEM_TOKENS)
        else:
            n = rng.randint(*UNIQUE_TOKENS)
            shared = ("", 0)
        out_tokens = rng.randint(*OUTPUT_TOKENS)
        n = int(round(n * grow(t)))
        rid = f"cmpl-{rng.getrandbits(96):024x}"
        out.append(Arrival(t, rid, Prompt(n, uid, *shared), out_tokens, "user"))


def batch_client(start_s: float, until_s: float, *, tokens: int = 8000, every_s: float = 2.5,
                 max_tokens: int = 16) -> list[Arrival]:
    """One fresh ``tokens``-token prompt every ``every_s`` from ``start_s``."""
    out, t, i = [], start_s, 0
    while t < until_s:
        i += 1
        out.append(Arrival(t, f"cmpl-batch{i:06d}", Prompt(tokens, f"batch-{i}"), max_tokens,
                           "batch"))
        t += every_s
    return out


class Flood:
    """A closed loop: ``n`` requests of ``prompt`` tokens and ``out`` output tokens kept
    in flight from ``start_s`` (each finished one is sent again ``think_s`` later)."""

    def __init__(self, n: int = 48, prompt: int = 256, out: int = 1500, think_s: float = 0.05,
                 seed: int = 0) -> None:
        self.n, self.prompt, self.out, self.think_s = n, prompt, out, think_s
        self.rng = random.Random(seed)
        self.i = 0

    def _one(self, engine: SimEngine, t: float) -> None:
        self.i += 1
        out = self.rng.randint(self.out // 2, self.out)
        engine.submit(f"cmpl-flood{self.i:06d}", Prompt(self.prompt, f"flood-{self.i}"), out, t,
                      "flood")

    def start(self, engine: SimEngine, t: float) -> None:
        engine.on_finish = self.on_finish
        for k in range(self.n):
            self._one(engine, t + 0.01 * k)

    def on_finish(self, engine: SimEngine, f: Finished) -> None:
        if f.who == "flood":
            self._one(engine, f.end + self.think_s)


def exporter_gaps(seed: int, interval_s: float, jitter: float = 0.2) -> Iterator[float]:
    """The least gap between the exporter's probe starts: interval + up to 20 %
    (``exporter.config.JITTER``)."""
    rng = random.Random(seed ^ 0x5EED)
    while True:
        yield interval_s * (1.0 + jitter * rng.random())


def rounds(seed: int, lengths: tuple[int, ...]) -> Iterator[int]:
    """Lengths in reshuffled rounds, forever (the continuous runner's order)."""
    rng = random.Random(seed)
    while True:
        r = list(lengths)
        rng.shuffle(r)
        yield from r
