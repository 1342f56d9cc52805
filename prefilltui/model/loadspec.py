"""What background load to put on the target while probing (``--load``), as a frozen
record, and its parser.  Pure: the load itself runs in ``measure/load/generator.py``.

Two kinds (docs/load.md):

- ``decode:N`` keeps N decode streams open: short prompts, long outputs
  (``ignore_eos`` where the server takes it), each restarted when it ends.  Every
  token's arrival is recorded, so what a probe's prefill does to the decodes beside
  it can be measured (``model/load/stall.py``).
- ``rate:R,tokens:L`` sends open-loop Poisson arrivals: R requests/s, prompts of L
  tokens, a few output tokens each.

Either takes optional keys after a comma: ``out:T`` (output tokens per request),
``prompt:P`` (decode prompt tokens), ``requests:K`` and ``for:DURATION`` (the bounds:
the load stops after K requests or that long, whichever comes first; ``90s``, ``10m``,
``1h``).  Load never runs unless asked for, and always within those bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal

#: The two kinds of background load.
LoadKind = Literal["decode", "rate"]

#: Tokens of a decode stream's prompt: short, so restarting a stream costs the others
#: little (a 16-token prefill is one small step on any server).
DECODE_PROMPT_TOKENS = 16
#: Output tokens per decode stream before it ends and is restarted.  Long enough that a
#: stream outlives the probes' windows (a stream that starts or ends inside a window
#: cannot say how long it froze); capped at the server's context by the generator.
DECODE_OUTPUT_TOKENS = 1024
#: Output tokens of one rate-load request ("a few").
RATE_OUTPUT_TOKENS = 4
#: Default bounds: at most this many load requests, for at most this long (s).
MAX_REQUESTS = 5000
MAX_SECONDS = 3600.0
#: The most decode streams / requests per second accepted (a guard against a typo that
#: would flood a production server).
MAX_STREAMS = 64
MAX_RATE = 100.0

_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """One background load.

    kind: "decode" (``level`` = streams kept open) or "rate" (``level`` = requests/s).
    level: streams or requests/s; 0 = no load (the idle level of a load-level sweep).
    prompt_tokens: prompt length of each load request (decode: short; rate: ``tokens:L``).
    output_tokens: output tokens asked of each load request (``max_tokens``).
    max_requests / max_s: the bounds; the load stops at whichever comes first.
    """

    kind: LoadKind
    level: float
    prompt_tokens: int = DECODE_PROMPT_TOKENS
    output_tokens: int = DECODE_OUTPUT_TOKENS
    max_requests: int = MAX_REQUESTS
    max_s: float = MAX_SECONDS

    @property
    def streams(self) -> int:
        """Decode streams kept open (0 for a rate load)."""
        return int(self.level) if self.kind == "decode" else 0

    @property
    def rate_per_s(self) -> float:
        """Requests per second of a rate load (0 for a decode load)."""
        return float(self.level) if self.kind == "rate" else 0.0

    @property
    def active(self) -> bool:
        """True when this spec sends anything (level above 0)."""
        return self.level > 0

    def at(self, level: float) -> "LoadSpec":
        """The same load at another level (``sweep --load-levels``).

        Raises:
            ValueError: a level that is negative, fractional for decode, or over the caps.
        """
        spec = replace(self, level=float(level))
        check(spec)
        return spec

    def describe(self) -> str:
        """A few words for a status line: "2 decode streams", "1.5 req/s × 512 tok"."""
        if not self.active:
            return "no load"
        if self.kind == "decode":
            n = self.streams
            return f"{n} decode stream{'s' if n != 1 else ''}"
        return f"{self.level:g} req/s × {self.prompt_tokens:,} tok"

    def label(self) -> str:
        """The spec as ``--load`` takes it, without the default keys: "decode:2"."""
        if self.kind == "decode":
            head = f"decode:{self.streams}"
            keys = [] if self.prompt_tokens == DECODE_PROMPT_TOKENS else [
                f"prompt:{self.prompt_tokens}"]
            if self.output_tokens != DECODE_OUTPUT_TOKENS:
                keys.append(f"out:{self.output_tokens}")
        else:
            head = f"rate:{self.level:g},tokens:{self.prompt_tokens}"
            keys = [] if self.output_tokens == RATE_OUTPUT_TOKENS else [
                f"out:{self.output_tokens}"]
        if self.max_requests != MAX_REQUESTS:
            keys.append(f"requests:{self.max_requests}")
        if self.max_s != MAX_SECONDS:
            keys.append(f"for:{self.max_s:g}s")
        return ",".join([head, *keys])

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "level": self.level, "prompt_tokens": self.prompt_tokens,
                "output_tokens": self.output_tokens, "max_requests": self.max_requests,
                "max_s": self.max_s, "label": self.label()}

    @classmethod
    def from_json(cls, d: Any) -> "LoadSpec | None":
        """A LoadSpec from ``to_json`` output (a run file's session line), or None when
        ``d`` is not one (never raises)."""
        if not isinstance(d, dict) or d.get("kind") not in ("decode", "rate"):
            return None
        try:
            spec = cls(kind=d["kind"], level=float(d.get("level", 0)),
                       prompt_tokens=int(d.get("prompt_tokens", DECODE_PROMPT_TOKENS)),
                       output_tokens=int(d.get("output_tokens", DECODE_OUTPUT_TOKENS)),
                       max_requests=int(d.get("max_requests", MAX_REQUESTS)),
                       max_s=float(d.get("max_s", MAX_SECONDS)))
            check(spec)
        except (TypeError, ValueError):
            return None
        return spec


def check(spec: LoadSpec) -> None:
    """Raise ValueError naming what is wrong with ``spec`` (see the caps above)."""
    lv = spec.level
    if not (isinstance(lv, (int, float)) and math.isfinite(lv) and lv >= 0):
        raise ValueError(f"load level must be a number >= 0, not {lv!r}")
    if spec.kind == "decode":
        if lv != int(lv):
            raise ValueError(f"decode streams must be a whole number, not {lv:g}")
        if lv > MAX_STREAMS:
            raise ValueError(f"at most {MAX_STREAMS} decode streams, not {lv:g}")
    elif spec.kind == "rate":
        if lv > MAX_RATE:
            raise ValueError(f"at most {MAX_RATE:g} requests/s, not {lv:g}")
    else:
        raise ValueError(f"load kind must be decode or rate, not {spec.kind!r}")
    if spec.prompt_tokens < 1 or spec.output_tokens < 1:
        raise ValueError("prompt and output tokens must be >= 1")
    if spec.max_requests < 1 or not (spec.max_s > 0 and math.isfinite(spec.max_s)):
        raise ValueError("the load's bounds (requests, for) must be > 0")


def _duration(text: str) -> float:
    t = text.strip().lower()
    mult = _UNITS_S.get(t[-1:], None)
    v = float(t[:-1] if mult else t) * (mult or 1.0)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError
    return v


def parse_load(text: str) -> LoadSpec:
    """Parse ``--load``: ``decode:N[,out:T][,prompt:P][,requests:K][,for:90s]`` or
    ``rate:R,tokens:L[,out:T][,requests:K][,for:10m]``.

    Raises:
        ValueError: with the reason and the expected form.
    """
    form = ("expected decode:N (N decode streams) or rate:R,tokens:L (R requests/s of "
            "L-token prompts), optionally followed by ,out:T ,prompt:P ,requests:K ,for:10m")
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ValueError(form)
    keys: dict[str, str] = {}
    for p in parts:
        k, sep, v = p.partition(":")
        k = k.strip().lower()
        if not sep or not v.strip() or k in keys:
            raise ValueError(f"{text!r}: {form}")
        keys[k] = v.strip()
    kind = parts[0].partition(":")[0].strip().lower()
    allowed = {"decode": {"decode", "out", "prompt", "requests", "for"},
               "rate": {"rate", "tokens", "out", "requests", "for"}}.get(kind)
    if allowed is None:
        raise ValueError(f"{text!r}: {form}")
    unknown = sorted(set(keys) - allowed)
    if unknown:
        raise ValueError(f"{text!r}: unknown key {unknown[0]!r} for a {kind} load; {form}")
    try:
        level = float(keys[kind])
        if kind == "decode":
            prompt = int(keys.get("prompt", DECODE_PROMPT_TOKENS))
            out = int(keys.get("out", DECODE_OUTPUT_TOKENS))
        else:
            if "tokens" not in keys:
                raise ValueError(f"{text!r}: a rate load needs tokens:L (prompt tokens)")
            prompt = int(keys["tokens"])
            out = int(keys.get("out", RATE_OUTPUT_TOKENS))
        spec = LoadSpec(kind=kind, level=level, prompt_tokens=prompt, output_tokens=out,  # type: ignore[arg-type]
                        max_requests=int(keys.get("requests", MAX_REQUESTS)),
                        max_s=_duration(keys["for"]) if "for" in keys else MAX_SECONDS)
    except ValueError as e:
        raise ValueError(str(e) if str(e).startswith(repr(text)) else f"{text!r}: {form}"
                         ) from None
    check(spec)
    if not spec.active:
        raise ValueError(f"{text!r}: a load of 0 sends nothing (leave --load out)")
    return spec


def parse_levels(text: str) -> tuple[float, ...]:
    """``--load-levels 0,1,2,4,8``: the levels, sorted and unique, each >= 0.

    Raises:
        ValueError: anything else.
    """
    try:
        vals = sorted({float(v) for v in str(text).split(",") if v.strip()})
    except ValueError:
        raise ValueError(f"expected comma-separated numbers such as 0,1,2,4,8, got {text!r}")
    if not vals or any(not math.isfinite(v) or v < 0 for v in vals):
        raise ValueError(f"load levels must be numbers >= 0, got {text!r}")
    return tuple(vals)
