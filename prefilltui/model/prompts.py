"""Prompts of a requested length in server-counted tokens, unique from the first token.

Every prompt is a fresh sequence of random common English words; the first word of
each prompt is drawn from a shuffled cycle over the word list, so two prompts of one
session never share their first word (hence no prefix cache can serve them, beyond
a BOS token the server adds itself).  The words of two sessions never repeat each
other either, a fixed ``--seed`` included: the words' generator mixes a per-session
nonce into the seed (the seed makes the design -- the order of lengths -- repeatable,
never the text; a restarted exporter or a second ``sweep --seed 1`` against the same
server would otherwise send the very prompts it cached, and measure cache hits).

Length: the x-axis is prompt tokens *as the server counts them*.  With a tokenize
endpoint (llama.cpp, vLLM) the word count is adjusted until the count is within
+-2 % of the target (``TOLERANCE``); without one, a linear model
``tokens = offset + ratio * words`` is calibrated from the server's
``usage.prompt_tokens`` of earlier probes (``LengthModel.update``).  Chat templates
add a constant number of tokens, which the offset absorbs.
"""

from __future__ import annotations

import math
import random
import secrets
from typing import Awaitable, Callable

#: Accepted relative error of the counted prompt length against the requested one
#: (2 %: within one word in a hundred tokens).
TOLERANCE = 0.02

#: Tokens per word before any calibration: common English words are 1-2 tokens in
#: BPE vocabularies of 32k-256k entries (measured ~1.1-1.3 on Llama/SmolLM tokenizers).
DEFAULT_RATIO = 1.2

WORDS = """
time year people way day man thing woman life child world school state family student
group country problem hand part place case week company system program question work
government number night point home water room mother area money story fact month lot
right study book eye job word business issue side kind head house service friend father
power hour game line end member law car city community name president team minute idea
kid body information back parent face others level office door health person art war
history party result change morning reason research girl guy moment air teacher force
education foot boy age policy music market sense nation plan college interest death
experience effect use class control care field development role effort rate heart drug
show leader light voice wife police mind price report decision son view relationship town
road arm difference value building action model season society tax director position
player record paper space ground form event official matter center couple site project
activity star table need court oil situation cost industry figure street image phone data
picture practice piece land product doctor wall patient worker news test movie north love
support technology step baby computer type attention film tree source organization hair
window evidence population site chance river garden island forest mountain valley ocean
bridge engine letter garden stone glass paper metal silver golden yellow purple orange
green blue red black white brown simple quiet bright sudden gentle honest clever brave
calm eager happy lucky proud silly strong tired young ancient broad cheap clean clear
cold deep dry early easy empty fair fast fine flat fresh full great heavy high hot huge
late light long loud low main new nice old open plain poor quick rare real rich rough
round sharp short slow small smooth soft solid sour square sweet tall thick thin tight
warm weak wet whole wide wild wise walk run jump swim read write sing dance cook paint
build drive climb carry throw catch push pull open close begin finish listen watch speak
answer travel visit learn teach help play move stay follow bring send keep hold turn
start stop wait grow rise fall cut fill join share count check press raise reach serve
apple bread butter cheese coffee honey lemon milk onion pepper potato rice salt sugar
tea tomato bottle basket blanket bucket button candle carpet chair clock coin cup desk
drum fork hammer kettle ladder lamp mirror needle pillow plate pocket rope scissors shelf
shoe spoon stamp sword tent thread ticket towel umbrella wheel whistle wire anchor arrow
cloud desert planet rocket comet moon sun storm thunder rain snow wind winter summer
autumn spring harbor castle village market temple tower palace museum library theater
station airport factory farm kitchen bedroom hallway balcony garage cellar attic roof
horse tiger rabbit eagle falcon dolphin whale shark turtle spider monkey donkey camel
zebra lion wolf bear fox deer owl swan goose duck chicken mouse snake frog bee ant
""".split()


class PromptBuilder:
    """Random word prompts; ``words(n)`` -> a new list of n words (n >= 1).

    seed: mixed with ``nonce`` into the words' generator.  nonce: None (the product):
    64 fresh random bits, so no two builders draw the same words; an int: the same
    words for the same (seed, nonce), for tests that need them fixed.
    """

    def __init__(self, seed: int | None = None, *, nonce: int | None = None) -> None:
        if nonce is None:
            nonce = secrets.randbits(64)
        self._rng = random.Random(f"{seed}:{nonce}")
        self._vocab = sorted(set(WORDS))
        self._firsts: list[str] = []

    def _first(self) -> str:
        if not self._firsts:
            self._firsts = list(self._vocab)
            self._rng.shuffle(self._firsts)
        return self._firsts.pop().capitalize()

    def words(self, n: int) -> list[str]:
        n = max(1, int(n))
        # choices() draws in one C loop: a 2,000-word prompt in ~0.1 ms instead of
        # ~0.4 ms with a choice() per word (a share of the live app's CPU per probe)
        return [self._first()] + self._rng.choices(self._vocab, k=n - 1)

    def extend(self, words: list[str], n: int) -> list[str]:
        """``words`` cut or grown (with random words) to exactly n words."""
        n = max(1, int(n))
        if n <= len(words):
            return words[:n]
        return words + self._rng.choices(self._vocab, k=n - len(words))


class LengthModel:
    """``server_tokens ~= offset + ratio * words`` calibrated from observed probes.

    With a tokenize counter, ``ratio`` is not used for the final count; ``offset``
    then holds server count minus tokenize count (template tokens, BOS).
    """

    def __init__(self, ratio: float = DEFAULT_RATIO, offset: float = 0.0) -> None:
        self.ratio = ratio
        self.offset = offset
        self._pts: list[tuple[int, int]] = []  # (words, server tokens), usage mode
        self._offsets: list[int] = []  # server - tokenize, tokenize mode

    def words_for(self, tokens: int) -> int:
        return max(1, round((tokens - self.offset) / self.ratio))

    def predict(self, words: int) -> float:
        return self.offset + self.ratio * words

    def update(self, words: int, server_tokens: int) -> None:
        """Add one (words, counted) pair from usage; refits offset and ratio by OLS
        over the last 50 pairs (ratio only, through 0, until two distinct x exist)."""
        if words <= 0 or server_tokens <= 0:
            return
        self._pts = (self._pts + [(words, server_tokens)])[-50:]
        xs = [p[0] for p in self._pts]
        ys = [p[1] for p in self._pts]
        if len(set(xs)) >= 2:
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            sxx = sum((x - mx) ** 2 for x in xs)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
            if slope > 0.2:
                self.ratio, self.offset = slope, my - slope * mx
                return
        self.ratio = max(0.2, (server_tokens - self.offset) / words)

    def update_offset(self, counted_by_tokenize: int, server_tokens: int) -> None:
        """Server count minus tokenize count (e.g. chat template), median of the last 20."""
        self._offsets = (self._offsets + [server_tokens - counted_by_tokenize])[-20:]
        s = sorted(self._offsets)
        self.offset = float(s[len(s) // 2])


Counter = Callable[[str], Awaitable[int | None]]


async def build_prompt(target: int, builder: PromptBuilder, model: LengthModel,
                       counter: Counter | None = None, max_rounds: int = 8
                       ) -> tuple[str, int, int | None]:
    """A new prompt of ~``target`` server tokens.

    Returns ``(text, words, tokenize_count)``; ``tokenize_count`` is None when no
    counter was given or it failed (the length then rests on ``model``'s prediction).
    """
    target = max(1, int(target))
    n = model.words_for(target)
    words = builder.words(n)
    if counter is None:
        return " ".join(words), n, None
    tol = math.floor(TOLERANCE * target)
    best: tuple[int, int, int] | None = None  # (abs error, words, count)
    seen: dict[int, int] = {}
    for _ in range(max_rounds):
        c = await counter(" ".join(words[:n]))
        if c is None:
            return " ".join(words[:n]), n, None
        seen[n] = c
        err = c + model.offset - target
        if best is None or abs(err) < best[0] or (abs(err) == best[0] and err < 0):
            best = (abs(err), n, c)
        if abs(err) <= tol:
            break
        ratio = max(0.3, c / n)
        step = -round(err / ratio)
        if step == 0:
            step = -1 if err > 0 else 1
        nxt = max(1, n + step)
        while nxt in seen and nxt != n:  # avoid oscillating between two word counts
            nxt = nxt + (1 if step > 0 else -1)
            if nxt < 1:
                break
        if nxt < 1 or nxt in seen:
            break
        n = nxt
        if n > len(words):  # grow only: a shorter try keeps the words a longer one counted
            words = builder.extend(words, n)
    assert best is not None
    _, n, c = best
    # every counted length is a prefix of ``words``: the text returned is the text counted
    return " ".join(words[:n]), n, c
