"""JSON as a type: what every ``to_json()`` returns and every run-file line is."""

from __future__ import annotations

import json
from typing import Union

#: A JSON value as ``json.dumps`` takes it.
Json = Union[None, bool, int, float, str, list["Json"], dict[str, "Json"]]
#: A JSON object (a run-file line, a summary, an HTTP body).
JsonObject = dict[str, Json]


def loads(text: str | bytes | bytearray) -> Json:
    """``json.loads`` that fails only with ``ValueError`` (``json.JSONDecodeError`` and
    ``UnicodeDecodeError`` are ValueErrors).

    A document nested deeper than the interpreter's recursion limit (``[[[[...``, a few
    KiB from a hostile server, a damaged run file) makes the C decoder raise
    ``RecursionError``, which no caller expecting malformed JSON catches: here it is a
    ``ValueError`` like any other malformed text.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


def dumps_short(value: Json, limit: int = 500) -> str:
    """``json.dumps(value)`` cut to ``limit`` characters, for quoting a server's value
    in a message; a value too deeply nested to encode gives a description instead."""
    try:
        return json.dumps(value)[:limit]
    except (RecursionError, ValueError, TypeError):
        return f"(a {type(value).__name__} too deeply nested to quote)"
