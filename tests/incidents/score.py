"""Scoring the verdicts of one run against the incident's truth.

For an incident, over the first ``SCORED_S`` seconds after onset:

- ``named_s``: seconds from onset to the first verdict naming the right cause (None:
  never);
- ``held``: the right cause in at least ``HOLD_SHARE`` (90 %) of the verdicts of the
  last ``HOLD_S`` (30) seconds scored;
- ``said``: the cause said most often in the scored seconds (what a missed row said);
- ``before``: the share of the ``HOLD_S`` seconds before onset in which the right cause
  was already said (a verdict that said it before anything happened has not named
  the incident: at ``BEFORE_SHARE`` or more the row does not pass);
- the number: read from the last right verdict's headline and evidence text
  (``NUMBERS[cause]``) against the truth (``within`` 25 %).

The bar (what an on-call needs from a page): named within ``BAR_S`` = 30 s with its number within 25 %.

For the control: every verdict whose cause is not none / not_enough_data is a false
cause; ``false_verdicts`` counts them, ``false_episodes`` counts runs of consecutive
ones, with their rate per hour of judged time.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from tests.incidents.observers import Judgement

BAR_S = 30.0
TOLERANCE = 0.25
HOLD_S = 30.0
HOLD_SHARE = 0.90
BEFORE_SHARE = 0.5
QUIET = ("none", "not_enough_data")

_NUM = r"(\d[\d,]*(?:\.\d+)?)"


def _f(s: str) -> float:
    return float(s.replace(",", ""))


def duration_s(text: str, *words: str) -> float | None:
    """The first "<word> N ms" / "<word> N s" in ``text`` for the first of ``words``
    that has one, in seconds."""
    for word in words:
        m = re.search(re.escape(word) + r"\s+" + _NUM + r"\s*(ms|s)\b", text)
        if m is not None:
            v = _f(m.group(1))
            return v / 1000.0 if m.group(2) == "ms" else v
    return None


def ratio(text: str) -> float | None:
    """The first "N.NNx" / "N.NN×" in ``text``."""
    m = re.search(_NUM + r"\s*[x×](?![a-z])", text)
    return _f(m.group(1)) if m else None


def tokens_max(text: str) -> float | None:
    """The largest "N tokens" / "N-token" / "N tok" in ``text``."""
    got = [_f(m) for m in re.findall(_NUM + r"(?:\s*tokens?\b|-token\b|\s*tok\b)", text)]
    return max(got) if got else None


def hit_rates(text: str) -> tuple[float, float] | None:
    """"hit rate 62% → 0%" as (0.62, 0.0)."""
    m = re.search(r"hit rate\s+" + _NUM + r"\s*%\s*(?:→|->)\s*" + _NUM + r"\s*%", text)
    return (_f(m.group(1)) / 100.0, _f(m.group(2)) / 100.0) if m else None


def more_prefill_s(text: str) -> float | None:
    """"≈ 330 ms more prefill" in seconds."""
    m = re.search(r"≈\s*" + _NUM + r"\s*(ms|s)\s+more prefill", text)
    if m is None:
        return None
    v = _f(m.group(1))
    return v / 1000.0 if m.group(2) == "ms" else v


@dataclass(frozen=True)
class Number:
    """One figure of a verdict beside its truth."""

    label: str
    said: float | None
    truth: float | None
    ok: bool

    def text(self) -> str:
        if self.truth is None:
            return f"{self.label}: no truth"
        if self.said is None:
            return f"{self.label}: not said (truth {_fmt(self.label, self.truth)})"
        mark = "" if self.ok else " ✗"
        return f"{self.label} {_fmt(self.label, self.said)} vs {_fmt(self.label, self.truth)}{mark}"


def _fmt(label: str, v: float) -> str:
    if label in ("queue", "overhead", "more prefill"):
        return f"{v * 1000:,.0f} ms"
    if label == "ratio":
        return f"{v:.2f}x"
    if label == "hit rate":
        return f"{v * 100:.0f}%"
    if label == "queue share":
        return f"{v * 100:.0f}%"
    return f"{v:,.0f}"


def _within(said: float | None, truth: float | None) -> bool:
    if said is None or truth is None:
        return False
    return abs(said - truth) <= TOLERANCE * abs(truth)


def number(cause: str, j: Judgement, truth: dict) -> Number:
    """The figure the right verdict ``j`` gives for ``cause``, against ``truth``."""
    text = j.headline + " | " + " | ".join(str(getattr(e, "text", "")) for e in j.evidence)
    if cause == "slow_prefill":
        said = ratio(text)
        return Number("ratio", said, truth.get("ratio"), _within(said, truth.get("ratio")))
    if cause == "head_of_line":
        said = tokens_max(text)
        return Number("blocking tokens", said, truth.get("tokens"),
                      _within(said, truth.get("tokens")))
    if cause == "queueing":
        said = duration_s(text, "queue")
        if said is not None:
            t = truth.get("probe_queue_s")
            return Number("queue", said, t, _within(said, t))
        m = re.search(_NUM + r"\s*%\s*of their TTFT", text)
        if m is not None:
            share = _f(m.group(1)) / 100.0
            t = truth.get("users_queue_share")
            return Number("queue share", share, t, _within(share, t))
        m = re.search(_NUM + r"\s*(?:requests\s+)?waiting", text)
        n = _f(m.group(1)) if m else None
        return Number("waiting", n, truth.get("waiting"), _within(n, truth.get("waiting")))
    if cause == "cache_hit_drop":
        got = hit_rates(text)
        b, a = truth.get("hit_before"), truth.get("hit_after", 0.0)
        if got is None:
            return Number("hit rate", None, b, False)
        ok = _within(got[0], b) and abs(got[1] - a) <= 0.05
        return Number("hit rate", got[0], b, ok)
    if cause == "prompts_longer":
        said = more_prefill_s(text)
        return Number("more prefill", said, truth.get("added_s"),
                      _within(said, truth.get("added_s")))
    if cause == "overhead":
        said = duration_s(text, "overhead", "TTFT - server time", "TTFT − server time")
        return Number("overhead", said, truth.get("overhead_s"),
                      _within(said, truth.get("overhead_s")))
    return Number("-", None, None, True)


@dataclass(frozen=True)
class Score:
    """One incident x observer x source x interval, scored (module docstring)."""

    incident: str
    column: str
    cause: str
    named_s: float | None
    held: bool
    said: str
    number: Number | None
    false_verdicts: int = 0
    false_episodes: int = 0
    judged_s: float = 0.0
    false_said: str = ""
    before: float = 0.0

    @property
    def passed(self) -> bool:
        if self.cause == "none":
            return self.false_verdicts == 0
        return (self.named_s is not None and self.named_s <= BAR_S
                and self.before < BEFORE_SHARE and self.number is not None and self.number.ok)

    @property
    def per_hour(self) -> float:
        return self.false_episodes * 3600.0 / self.judged_s if self.judged_s else 0.0

    def cell(self) -> str:
        """The table's cell: seconds to the right cause and the number vs truth, or
        "missed (said X)"; for the control the false causes."""
        if self.cause == "none":
            if not self.false_verdicts:
                return "clean"
            return (f"{self.false_episodes} false ({self.per_hour:.0f}/h; "
                    f"{self.false_verdicts} verdicts, {self.false_said})")
        if self.named_s is None:
            return f"missed (said {self.said})"
        held = "" if self.held else ", not held"
        late = "" if self.named_s <= BAR_S else " (late)"
        if self.before >= BEFORE_SHARE:
            late += f" (said before onset too, {self.before * 100:.0f}% of the {HOLD_S:g} s before)"
        num = self.number.text() if self.number is not None else ""
        return f"+{self.named_s:.0f} s{late}{held}; {num}"


def names(j: Judgement, cause: str) -> bool:
    """``j`` names ``cause``: as its cause, or as what a change of the server it leads
    with did ("the server changed: the server restarted 36 s ago; prefix caching True
    → False; since then users' prefix-cache hit rate 66% → 0%": a redeploy named for
    what it is, with the cache it dropped)."""
    if j.cause == cause:
        return True
    return j.cause == "server_changed" and any(getattr(e, "cause", None) == cause
                                                for e in j.evidence)


def score(incident: str, column: str, cause: str, judgements: list[Judgement], onset_s: float,
          end_s: float, truth: dict) -> Score:
    """Score one observer's verdicts (module docstring)."""
    if cause == "none":
        bad = [j for j in judgements if j.cause not in QUIET]
        episodes, prev = 0, False
        for j in judgements:
            now = j.cause not in QUIET
            episodes += now and not prev
            prev = now
        said = Counter(j.cause for j in bad).most_common(2)
        judged = judgements[-1].t - judgements[0].t if len(judgements) > 1 else 0.0
        return Score(incident, column, cause, None, not bad, "", None, len(bad), episodes,
                     judged, ", ".join(c for c, _ in said))
    scored = [j for j in judgements if onset_s < j.t <= end_s]
    right = [j for j in scored if names(j, cause)]
    named = right[0].t - onset_s if right else None
    tail = [j for j in scored if j.t > end_s - HOLD_S]
    held = bool(tail) and sum(names(j, cause) for j in tail) >= HOLD_SHARE * len(tail)
    said = Counter(j.cause for j in scored).most_common(1)
    num = number(cause, right[-1], truth) if right else None
    pre = [j for j in judgements if onset_s - HOLD_S < j.t <= onset_s]
    before = sum(names(j, cause) for j in pre) / len(pre) if pre else 0.0
    return Score(incident, column, cause, named, held, said[0][0] if said else "-", num,
                 before=before)
