"""The ranges every setting must lie in, one home for the command-line flags and the
exporter's TOML file: a value outside is refused up front, naming the setting, never
carried into a probe or the analysis.

Pure (no I/O).  ``check(key, value)`` returns the value (an int given for a number as
a float) or raises ``ValueError("key = value: must be ...")``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, get_args

from prefilltui.model.types import Dtype

#: Longest prompt a setting may ask for (tokens): the longest context window offered
#: (Llama 4 Scout, 10 M tokens, its model card).  Building it takes ~2.3 s and ~175 MiB
#: here (~50 MiB of text; tests/bench), so a typo (50,000,000) is refused, not built.
MAX_PROMPT_TOKENS = 10_000_000
#: Longest prompt sent to a server that does not say its context (tokens): 2^20, the
#: longest context commonly served (Qwen2.5-1M, Llama 4 Maverick).  Longer lengths are
#: capped to it, with a note (building it: ~0.4 s, ~35 MiB).
UNKNOWN_CONTEXT_MAX_TOKENS = 1_048_576
#: Most lengths in one list (a sweep or a target).
MAX_LENGTHS = 1000
#: Dtypes whose catalog peak can be used.
DTYPES: tuple[str, ...] = get_args(Dtype)


@dataclass(frozen=True, slots=True)
class Range:
    """What a setting holds: ``kind`` "int", "number", "str", "bool", "choice" or
    "lengths" (a list of ints), with inclusive bounds (``lo_open``: lo excluded)."""

    kind: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    choices: tuple[str, ...] = ()
    unit: str = ""

    def describe(self) -> str:
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "bool":
            return "true or false"
        if self.kind == "str":
            return "a non-empty string"
        what = {"int": "an integer", "number": "a number",
                "lengths": "a list of integer prompt lengths"}[self.kind]
        lo = "" if self.lo is None else (f"> {_num(self.lo)}" if self.lo_open
                                         else f">= {_num(self.lo)}")
        hi = "" if self.hi is None else f"<= {_num(self.hi)}"
        bounds = " and ".join(x for x in (lo, hi) if x)
        return f"{what}{' ' + bounds if bounds else ''}{' ' + self.unit if self.unit else ''}"


#: Every range-checked setting, by its TOML key (the flag is ``--`` + key with ``-``).
RANGES: dict[str, Range] = {
    "lengths": Range("lengths", 1, MAX_PROMPT_TOKENS, unit="tokens"),
    "interval": Range("number", 0, 86_400, lo_open=True, unit="seconds"),
    "timeout": Range("number", 0, 3_600, lo_open=True, unit="seconds"),
    "window": Range("int", 3, 100_000, unit="probes"),
    # a sweep's design: a typo (--repeats 99999999: a 1.6 GB plan before the first probe;
    # --points 100000000: minutes of planning, no probe) is refused, not planned
    "points": Range("int", 1, MAX_LENGTHS, unit="lengths"),
    "repeats": Range("int", 1, 100_000, unit="probes per length"),
    "warmup": Range("int", 0, 10_000, unit="probes"),
    "pause": Range("number", 0, 86_400, unit="seconds"),
    "peak_tflops": Range("number", 0, 1e6, lo_open=True, unit="TFLOP/s"),
    "bandwidth_tbs": Range("number", 0, 1e4, lo_open=True, unit="TB/s"),
    "params": Range("number", 1, 1e14, unit="parameters"),
    "layers": Range("int", 1, 100_000),
    "hidden": Range("int", 1, 10_000_000),
    "attn_width": Range("int", 1, 10_000_000),
    "efficiency": Range("number", 0, 1.5, lo_open=True, unit="(fraction of peak)"),
    "dtype": Range("choice", choices=DTYPES),
    "api": Range("choice", choices=("completions", "chat", "responses")),
    "insecure": Range("bool"),
    "name": Range("str"), "model": Range("str"), "gpu": Range("str"),
    "model_config": Range("str"), "url": Range("str"), "api_key_env": Range("str"),
}


def _num(v: float) -> str:
    """A bound as read: 10,000,000 (an integer), 1.5, 1e+06 (a large float)."""
    return f"{int(v):,}" if v == int(v) and abs(v) < 1e8 else f"{v:g}"


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def check(key: str, value: Any) -> Any:
    """``value`` if it fits ``RANGES[key]`` (an int for a number comes back a float; a
    list of lengths a sorted tuple without repeats); None stays None (not set).

    Raises:
        ValueError: ``"<key> = <value>: must be <range>"``.
    """
    r = RANGES.get(key)
    if r is None or value is None:
        return value
    bad = ValueError(f"{key} = {_short(value)}: must be {r.describe()}")
    if r.kind == "bool":
        if not isinstance(value, bool):
            raise bad
        return value
    if r.kind in ("str", "choice"):
        if not isinstance(value, str) or not value.strip() or len(value) > 10_000:
            raise bad
        if r.kind == "choice" and value not in r.choices:
            raise bad
        return value
    if r.kind == "lengths":
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise bad
        items = list(value)
        if not items or len(items) > MAX_LENGTHS:
            raise ValueError(f"{key} = {_short(value)}: must hold 1 to {MAX_LENGTHS} lengths")
        for v in items:
            _number(v, Range("int", r.lo, r.hi), bad)
        return tuple(sorted(set(items)))
    return _number(value, r, bad)


def _number(v: Any, r: Range, bad: ValueError) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad
    if r.kind == "int" and not isinstance(v, int):
        raise bad
    if not math.isfinite(v):
        raise bad
    if r.lo is not None and (v <= r.lo if r.lo_open else v < r.lo):
        raise bad
    if r.hi is not None and v > r.hi:
        raise bad
    return float(v) if r.kind == "number" else v
