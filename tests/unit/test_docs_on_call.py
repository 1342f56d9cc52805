"""docs/on-call.md has one section per cause of the verdict, headed by the words the
screen shows (``WORDS``), so a cause added without its on-call section fails here.

Each section quotes a headline as prefilltui prints it ("WORDS: ..."), names the
exporter's label value for it (``cause="..."``: the state set's or the seconds'), has
the four parts a person paged at night reads (what prefilltui says, what it means,
what to do next, which figure to check) and fits one screen."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prefilltui.model.diagnosis import CAUSES, WORDS

PAGE = Path(__file__).parents[2] / "docs" / "on-call.md"
#: The parts of every section, in this order.
PARTS = ("**What prefilltui says.**", "**What it means.**", "**What to do next.**",
         "**Which figure to check.**")
#: Lines a section may take: one screen of a terminal, its heading included.
SCREEN_LINES = 40
#: The verdict's order: the causes, then the two answers that name none.
ORDER = tuple(c for c in CAUSES if c not in ("none", "not_enough_data")) + ("none", "not_enough_data")


def sections() -> list[tuple[str, str]]:
    """(heading, text up to the next heading) of every ``## `` section."""
    text = PAGE.read_text()
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return list(zip(parts[1::2], parts[2::2]))


def section_of(cause: str) -> tuple[str, str]:
    """The one section whose heading quotes the cause's words as code."""
    found = [(h, body) for h, body in sections() if f"`{WORDS[cause]}`" in h]
    assert len(found) == 1, f"{cause}: {len(found)} sections headed `{WORDS[cause]}`"
    return found[0]


def test_order_covers_every_cause():
    assert sorted(ORDER) == sorted(CAUSES) and set(WORDS) == set(CAUSES)


@pytest.mark.parametrize("cause", ORDER)
def test_one_section_per_cause_with_the_screens_words(cause):
    heading, body = section_of(cause)
    # a headline as printed: the cause's words, then its evidence
    assert f"`{WORDS[cause]}: " in body, f"{cause}: no headline starting `{WORDS[cause]}: `"
    assert f'cause="{cause}"' in body, f"{cause}: no exporter state cause=\"{cause}\""
    at = [body.find(p) for p in PARTS]
    assert all(i >= 0 for i in at) and at == sorted(at), f"{cause}: parts missing or out of order"
    lines = len(body.strip("\n").splitlines()) + 1
    assert lines <= SCREEN_LINES, f"{cause}: {lines} lines, more than one screen"


def test_sections_in_the_verdicts_order():
    headings = [h for h, _ in sections()]
    at = [headings.index(section_of(c)[0]) for c in ORDER]
    assert at == sorted(at)
