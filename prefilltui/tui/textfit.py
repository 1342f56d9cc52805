"""Fitting a message into one screen line: home directories as ``~``, long paths cut
in the middle, never a word cut in two by wrapping.

Plain functions (no textual): the message line and the help's message list call them.
"""

from __future__ import annotations

import os
import re

ELLIPSIS = "…"

#: A path-like word: contains a '/' and no space (a file, a URL).
_PATH = re.compile(r"\S*/\S*")


def tilde(text: str, home: str | None = None) -> str:
    """``text`` with the user's home directory (``$HOME``) written ``~`` wherever a path
    starts with it ('/home/ana/runs/a.csv' -> '~/runs/a.csv')."""
    home = (home if home is not None else os.path.expanduser("~")).rstrip("/")
    if not home or home == "~":
        return text
    return re.sub(re.escape(home) + r"(?=/|\s|$|,)", "~", text)


def middle(word: str, width: int) -> str:
    """``word`` at most ``width`` characters: its start and end kept, '…' between
    ('~/runs/2026-01-01-demo/run.jsonl', 20 -> '~/runs/20…/run.jsonl'); a path keeps its
    last component whole when it fits."""
    if len(word) <= width:
        return word
    if width <= 1:
        return ELLIPSIS[:width]
    tail = word[word.rfind("/"):] if "/" in word else ""
    if tail and len(tail) <= width - 2:  # keep the file name, cut the directories
        return word[: width - 1 - len(tail)] + ELLIPSIS + tail
    keep = width - 1
    head = (keep + 1) // 2
    return word[:head] + ELLIPSIS + word[len(word) - (keep - head):]


def fit_line(text: str, width: int) -> str:
    """``text`` on one line of at most ``width`` characters: newlines become ' · ', the
    home directory '~', then the longest path-like words are cut in the middle (down
    to 12 characters each), then the line is cut after its last whole word with '…'."""
    line = " · ".join(part.strip() for part in text.splitlines() if part.strip())
    line = tilde(line)
    if width <= 0:
        return ""
    # one character at a time off the longest path-like word: the paths end up cut
    # evenly (a line is a few hundred characters at most)
    words = [m.group() for m in _PATH.finditer(line)]
    cut = {w: len(w) for w in words}
    excess = len(line) - width
    while excess > 0:
        longest = max((w for w in words if cut[w] > 12), key=lambda w: cut[w], default=None)
        if longest is None:
            break
        cut[longest] -= 1
        excess -= words.count(longest)
    for w in sorted(set(words), key=len, reverse=True):
        if cut[w] < len(w):
            line = line.replace(w, middle(w, cut[w]))
    if len(line) <= width:
        return line
    cut = line[: width - 1]
    space = cut.rfind(" ")
    if space >= width // 2:  # end after a whole word when that keeps most of the line
        cut = cut[:space]
    return cut.rstrip(" ,;:·") + ELLIPSIS


#: Words that are a unit: wrapping keeps each on the line of the number before it.
UNITS = frozenset({"ms", "s", "µs", "µs/tok", "µs/token", "tok", "tokens", "tok/s", "%",
                   "TFLOP/s", "GFLOP/s", "TFLOP", "TB/s", "GB/s", "W", "J", "req"})
#: A word that belongs to the unit after it ("421 prompt tok/s").
_UNIT_PREFIX = frozenset({"prompt"})
#: Signs that join the numbers on both sides ("204 ± 7 ms", "87 req → 87").
_JOINS = ("±", "→")


def _core(word: str) -> str:
    """A word less the punctuation around it: '(±' -> '±', 'ms),' -> 'ms'."""
    return word.strip("()[],;:.")


def _is_unit(words: list[str], i: int) -> bool:
    core = _core(words[i])
    if core in UNITS or (words[i].endswith(".") and words[i][:-1] in UNITS):
        return True
    return core in _UNIT_PREFIX and i + 1 < len(words) and _core(words[i + 1]) in UNITS


def _ends_a_number(chunk: str) -> bool:
    """Whether a unit after ``chunk`` is its number's: it ends in a digit (a bracket
    or a percent sign after it allowed) or in a unit's first word ('421 prompt')."""
    last = chunk.split()[-1]
    bare = last.rstrip(")]")
    return bare[-1:].isdigit() or bare.endswith("%") or _core(last) in _UNIT_PREFIX


def unit_chunks(text: str) -> list[str]:
    """``text``'s words, each unit joined to the number before it and an interval's
    ± (or an arrow) to both its numbers, so no wrap separates them:
    'TTFT 204 ± 7 ms, 421 prompt tok/s' -> ['TTFT', '204 ± 7 ms,', '421 prompt tok/s']."""
    words = text.split()
    chunks: list[str] = []
    for i, word in enumerate(words):
        if chunks and ((_is_unit(words, i) and _ends_a_number(chunks[-1]))
                       or word in _JOINS or chunks[-1].endswith(_JOINS)):
            chunks[-1] += " " + word
        else:
            chunks.append(word)
    return chunks


def wrap_units(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken at spaces but never
    between a number and its unit (``unit_chunks``); a chunk longer than a whole line
    is cut into pieces of ``width`` (folded, as Textual would)."""
    width = max(1, width)
    lines: list[str] = []
    line = ""
    for chunk in unit_chunks(text):
        if line and len(line) + 1 + len(chunk) <= width:
            line += " " + chunk
            continue
        if line:
            lines.append(line)
        while len(chunk) > width:
            lines.append(chunk[:width])
            chunk = chunk[width:]
        line = chunk
    if line or not lines:
        lines.append(line)
    return lines
