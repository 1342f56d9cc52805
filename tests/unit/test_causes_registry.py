"""The causes' registry (model/diagnosis/causes/): every rule module is asked, every
rule's cause has its words and its place in the exporter's state set, and every rule
keeps the one signature."""

from __future__ import annotations

import inspect
import pkgutil

from prefilltui.model.diagnosis import CAUSES, WORDS, causes
from prefilltui.model.diagnosis.causes import RULES, Context


def test_every_rule_module_is_in_the_registry():
    mods = {m.name for m in pkgutil.iter_modules(causes.__path__)} - {"base"}
    asked = {inspect.getmodule(r.judge).__name__.rsplit(".", 1)[1] for r in RULES}
    assert mods == asked, (mods - asked, asked - mods)


def test_every_rule_names_a_known_cause_with_words_and_one_signature():
    for rule in RULES:
        assert rule.cause in CAUSES and rule.cause in WORDS, rule
        assert rule.reads in ("probes", "users", "either")
        params = list(inspect.signature(rule.judge).parameters.values())
        assert len(params) == 1 and params[0].annotation in ("Context", Context), rule
    assert set(WORDS) == set(CAUSES) and len(set(CAUSES)) == len(CAUSES)
    # a change in the users' traffic is judged on the users' windows; a change of the
    # server on either side
    assert all(r.reads == "users" for r in RULES if r.change and r.cause != "server_changed")


def test_a_rule_without_its_evidence_finds_nothing():
    """Each rule asked with no probes and no users' data names nothing (and never
    raises): a cause is only ever named on its own numbers."""
    ctx = Context(probes=(), parts=(), ttft_s=0.0)
    for rule in RULES:
        assert rule.judge(ctx) is None, rule
