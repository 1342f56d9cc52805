"""What of a server's text may reach a terminal: ``clean`` escapes control characters.

Pure (no I/O).  Every string a server controls (model ids, error bodies, header
values, /metrics labels, HTML titles) passes through ``clean`` before it is printed,
logged, drawn in the TUI, written in a report's text or exported as a Prometheus
label value; the run file keeps the raw value (JSON escapes it: ``\\u001b``).

Escaped, as visible text (``\\x1b``, ``\\x07``, ``\\u202e``), never executed:
  C0 controls U+0000..U+001F (ESC, BEL, CR, BS, ...; ``\\n`` kept only with
  ``multiline=True``), DEL U+007F, C1 controls U+0080..U+009F (8-bit CSI/OSC),
  bidirectional overrides and isolates U+061C, U+200E, U+200F, U+202A..U+202E,
  U+2066..U+2069 ("Trojan Source", CVE-2021-42574), line/paragraph separators
  U+2028/U+2029, and every other character of Unicode general category Cf (format:
  zero-width space/joiners U+200B..U+200D, word joiner U+2060, BOM U+FEFF, soft hyphen,
  tag characters U+E0000..U+E007F that hide text), Cs (a lone surrogate, which JSON's
  ``\\ud800`` can carry and which no UTF-8 terminal or file can encode: printing it
  raises), Zl/Zp.  Source of the ranges: ECMA-48 (C0/C1), Unicode UAX #9 (bidi),
  the Unicode Character Database (general categories, via ``unicodedata``).
"""

from __future__ import annotations

import re
import unicodedata

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_KEEP_NL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                             "\u202a-\u202e\u2066-\u2069]")
#: Any character outside ASCII: checked by its Unicode category (``_UNSAFE_CATEGORIES``).
_NON_ASCII = re.compile("[^\x00-\x7f]")
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    if c in _NAMED:
        return _NAMED[c]
    n = ord(c)
    if n <= 0xFF:
        return f"\\x{n:02x}"
    return f"\\u{n:04x}" if n <= 0xFFFF else f"\\U{n:08x}"


def _escape_unsafe(m: re.Match[str]) -> str:
    c = m.group()
    return _escape(m) if unicodedata.category(c) in _UNSAFE_CATEGORIES else c


def clean(text: object, *, multiline: bool = False) -> str:
    """``text`` as it may be shown: every control character escaped as visible text
    (see the module docstring), so nothing a server sent is executed by a terminal.

    ``multiline``: keep ``\\n`` (a text block of our own with server values inside);
    by default a newline is escaped too, so a server value cannot forge a line.
    ``None`` gives ``""``; any other object is ``str()``-ed first.  Idempotent on
    its own output.

    >>> clean("llama\\x1b[2J-8b")
    'llama\\\\x1b[2J-8b'
    """
    if text is None:
        return ""
    s = text if isinstance(text, str) else str(text)
    pat = _UNSAFE_KEEP_NL if multiline else _UNSAFE
    s = pat.sub(_escape, s)
    return s if s.isascii() else _NON_ASCII.sub(_escape_unsafe, s)
