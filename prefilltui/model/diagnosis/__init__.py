"""Why TTFT is what it is: the on-call diagnosis, each finding quoting its numbers.

``verdict`` (why TTFT is high right now, over the recent probes: ``judge`` says whether
it is above its ``expectation`` (held over time: ``held``), ``causes/`` has one rule per
cause and their registry), ``ttft_breakdown``
(client/network overhead + queueing + server prefill, per probe and for the
intercept), ``chunking`` (chunked prefill told from the curve or the server),
``baseline`` (drift against a baseline run), ``diagnose`` (the parts put together as
``Diagnosis``).  Pure: no I/O.  Seconds in data.

The rest of prefilltui imports this package, never its modules (an import-linter
contract); its modules import each other directly.
"""

from __future__ import annotations

from prefilltui.model.diagnosis.baseline import drift, run_fit
from prefilltui.model.diagnosis.diagnose import Diagnosis, summarize_diagnosis
from prefilltui.model.diagnosis.ttft_breakdown import Breakdown, probe_parts
from prefilltui.model.diagnosis.causes import CAUSES, WORDS
from prefilltui.model.diagnosis.expectation import Expectation, expected_words, throughput_expectation
from prefilltui.model.diagnosis.held import HeldExpectation
from prefilltui.model.diagnosis.verdict import TtftVerdict, ttft_verdict

__all__ = [
    "Breakdown", "CAUSES", "Diagnosis", "Expectation", "HeldExpectation", "TtftVerdict", "WORDS",
    "drift", "expected_words", "probe_parts", "run_fit", "summarize_diagnosis", "throughput_expectation",
    "ttft_verdict",
]
