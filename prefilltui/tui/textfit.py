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
