"""Scripted incidents on the fake engine (tests/fakeengine.py): a scheduler with slots,
a queue, chunked-prefill batching and a prefix cache, serving its own background users
beside prefilltui's probes; the verdict judged every second as the exporter judges it.

Each incident starts at 150 s, after the expectation is held (the idle fit of the
first probes, the users' reference of the first windows), and must be named right
within 60 s at a probe interval of 2, 3 and 5 s, and still be right over the last
30 s; the control, with no incident, must never name a cause.  The clock is simulated
(tests/fakeengine.Simulation): 240 s of traffic take well under a second of CPU, and
a run is the same every time (seeded).  The times to the right cause are in
docs/verdict.md.
"""

from __future__ import annotations

import pytest

from tests.fakeengine import Simulation

ONSET_S = 150.0
END_S = 240.0


def cache_collapse(sim):
    sim.engine.cache_enabled = False  # every prefix lookup misses from now on


def prompts_grow(sim):
    sim.traffic.prompt = (3000, 4200)  # was 600-1200 tokens


def long_prompts_block(sim):
    sim.traffic.long_tokens = 8192  # one user sends 8k prompts back to back
    sim._next_long = sim.t


def queue_builds(sim):
    sim.traffic.rate, sim.traffic.max_tokens = 12.0, (200, 300)  # slots fill: a queue


def slow_prefill(sim):
    sim.engine.per_token_s *= 2  # the GPU halves its prefill speed


def gateway_delay(sim):
    sim.gateway_s = 0.15  # 150 ms each way on the probes' path only


INCIDENTS = {"cache_hit_drop": cache_collapse, "prompts_longer": prompts_grow,
             "head_of_line": long_prompts_block, "queueing": queue_builds,
             "slow_prefill": slow_prefill, "overhead": gateway_delay}
QUIET = ("none", "not_enough_data")


def run(incident, interval_s: float, seed: int = 1, method: str = "ols") -> Simulation:
    return Simulation(seed=seed, interval_s=interval_s, method=method).run(
        END_S, onset_s=ONSET_S, incident=incident)


@pytest.mark.parametrize("interval_s", [2.0, 3.0, 5.0])
@pytest.mark.parametrize("cause", list(INCIDENTS))
def test_each_incident_is_named_within_a_minute(cause, interval_s):
    sim = run(INCIDENTS[cause], interval_s)
    before = [v for v in sim.verdicts if v.t < ONSET_S and v.verdict.cause not in QUIET]
    assert not before, before[0].verdict.headline
    after = [v for v in sim.verdicts if v.t >= ONSET_S]
    first = next((v for v in after if v.verdict.cause == cause), None)
    assert first is not None, [v.verdict.headline for v in after[-3:]]
    assert first.t - ONSET_S <= 60.0, first.verdict.headline
    assert first.verdict.above and first.verdict.evidence[0].cause == cause
    tail = [v for v in after if v.t >= END_S - 30.0]
    right = sum(v.verdict.cause == cause for v in tail)
    assert right >= 0.9 * len(tail), [v.verdict.headline for v in tail if v.verdict.cause != cause][:3]


@pytest.mark.parametrize("method", ["ols", "robust"])
@pytest.mark.parametrize("interval_s", [2.0, 3.0, 5.0])
def test_the_control_names_no_cause(interval_s, method):
    """Also with the exporter's robust fit, whose margin at a length follows its
    relative noise model (a short probe's margin is its own, smaller than OLS's)."""
    sim = run(None, interval_s, method=method)
    assert len(sim.verdicts) >= END_S - 2
    said = [v.verdict for v in sim.verdicts]
    assert all(v.cause in QUIET for v in said), next(v.headline for v in said if v.cause not in QUIET)
    assert not [v for v in said if "no single cause" in v.headline]
    # the users' reference and the held fit are there: it judged, it did not abstain
    assert sim.hold.users_before is not None and sim.hold.fit is not None
    assert sum(v.cause == "none" for v in said) >= len(said) - (3 * interval_s + 2)


def test_the_numbers_in_the_words():
    """The right cause quotes the incident's own numbers."""
    v = next(x.verdict for x in run(cache_collapse, 3.0).verdicts if x.verdict.cause == "cache_hit_drop")
    assert v.whose == "users" and "users' prefix-cache hit rate 5" in v.headline and "→ " in v.headline
    v = next(x.verdict for x in run(prompts_grow, 3.0).verdicts if x.verdict.cause == "prompts_longer")
    assert "users' median prompt " in v.headline and " tokens (≈ " in v.headline
    v = next(x.verdict for x in run(queue_builds, 3.0).verdicts if x.verdict.cause == "queueing")
    assert "waiting now at the server" in v.headline
    v = next(x.verdict for x in run(long_prompts_block, 3.0).verdicts if x.verdict.cause == "head_of_line")
    assert "users' long prompts (median 8,192 tokens) in prefill when the probe was sent" in v.headline
