"""Every relative link of README.md, CONTRIBUTING.md and docs/*.md resolves: the file
it names exists and its ``#anchor`` is a heading of that page (GitHub's slug: lower
case, punctuation but ``-`` and ``_`` dropped, spaces as ``-``) or an ``<a id>`` in it.
A page renamed or a heading reworded breaks the links to it silently otherwise."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The anchors a link into ``page`` may name."""
    text = FENCE.sub("", page.read_text())
    heads = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
             for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}
    return heads | set(re.findall(r'<a id="([^"]+)"', text))


def links() -> list[tuple[str, str]]:
    """(page, link) for every relative link outside code blocks."""
    out = []
    for page in DOCS:
        for m in LINK.finditer(FENCE.sub("", page.read_text())):
            if not re.match(r"^[a-z]+:", m.group(1)):
                out.append((str(page.relative_to(ROOT)), m.group(1)))
    return out


def test_the_docs_have_links():
    assert len(links()) > 100


@pytest.mark.parametrize(("page", "link"), links())
def test_relative_link_resolves(page, link):
    path, _, anchor = link.partition("#")
    target = (ROOT / page).parent / path if path else ROOT / page
    assert target.exists(), f"{page}: {link}: no such file"
    if anchor and target.suffix == ".md":
        assert anchor in anchors(target), f"{page}: {link}: no heading or <a id> #{anchor}"


def test_the_map_places_every_page():
    """docs/index.md sorts every page by what its reader is doing: a new page is placed."""
    linked = {Path(link.partition("#")[0]).name for page, link in links() if page == "docs/index.md"}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert pages <= linked, f"not in docs/index.md: {sorted(pages - linked)}"
