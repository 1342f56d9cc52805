"""What changed on the server: restarts, another server behind the URL, a new config.

A server says who it is on every ``/metrics`` page (``process_start_time_seconds``,
the standard Prometheus process collector's; vLLM's ``vllm:cache_config_info`` labels;
its cumulative counters, which only a new process starts again from 0) and on its
metadata endpoints (``/version``, ``/v1/models``' ``max_model_len``, llama.cpp
``/props``, SGLang ``/server_info``, TGI ``/info``).  Each read is one
``ServerReading`` (``model.metrics.metrics_reading`` builds the /metrics one,
``measure.server_facts.stated_reading`` the endpoints' one); ``ServerChangeTracker``
is fed them in order and emits a ``ServerChange`` when the server is no longer the
one it was: a ``restart`` (the process start time moved later, or counters went down),
an ``upstream_switch`` (another version, model or build, or an older process, with no
sign of a restart: a gateway sends the URL elsewhere), a ``config`` change (a stated
setting differs, same process), or ``replicas`` (reads alternate between servers: a
gateway spreads the URL over several, said once, never as restarts).

A change counts only when the new state is seen on ``CONFIRM_READS`` consecutive
reads of the same source: a scrape cut short (a counter summed over fewer series) or
one answered by another replica is not a restart.  ``change_words`` says the newest
change in words for the verdict; ``change_after`` tells whether a reference taken at
some time predates it.  Pure: no I/O, no clock (every time is given).  Units: unix
seconds.  Bad input (NaN, negative times, garbage facts) is dropped, never raised.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Literal, Mapping

ChangeKind = Literal["restart", "upstream_switch", "config", "replicas"]
ReadingSource = Literal["metrics", "stated"]
Fact = int | float | bool | str
CHANGE_KINDS: tuple[ChangeKind, ...] = ("restart", "upstream_switch", "config", "replicas")

#: Reads of one source that must show the new state, in a row, before it counts (the
#: first read that differs and the next): a half-read page or another replica's answer
#: once is not a change.
CONFIRM_READS = 2
#: How far two ``process_start_time_seconds`` of one process may differ (s): the
#: collector computes it as boot time + the process's start ticks, and the kernel's
#: boot time moves by up to a second with clock adjustments.
START_TOLERANCE_S = 1.5
#: Changes kept by a tracker (the newest): a flapping server cannot grow it.
MAX_CHANGES = 64
#: The window of recent changes the verdict is given (s): ten minutes.
RECENT_S = 600.0
#: Flaps (a read that differed, then the old state again) within this many reads of
#: one source that mean several servers answer behind the URL: A/B/A/B is two flaps.
FLAPS_FOR_REPLICAS, FLAP_READS = 2, 8
#: A replica not seen for this many reads of its source is forgotten.
MEMBER_READS = 24
#: How long a confirmed restart waits for the stated facts read after it (s), so its
#: event names the settings the endpoints state too; after that it is said without.
STATED_WAIT_S = 15.0
#: Facts that say which server this is (another value with no restart sign: another
#: server behind the URL), not how it is set up.
IDENTITY_KEYS = ("version", "model", "model_path", "model_id", "build_info", "sha")
#: Longest fact value kept (characters): a version or a policy name.
MAX_FACT_CHARS = 200
#: Counter values beyond this are no server's count (tokens, requests, seconds).
MAX_COUNTER = 1e18
#: Unix seconds accepted as a process start time: after 2001, before 2100.
_START_RANGE = (1e9, 4.1e9)


def fact(v: object) -> Fact | None:
    """A scalar fact, else None (a NaN, a container, a long or unprintable string):
    what a server states about itself that is kept (``measure.server_facts`` too)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, str) and 0 < len(v) <= MAX_FACT_CHARS and v.isprintable():
        return v
    return None


def _key(k: object) -> bool:
    return isinstance(k, str) and 0 < len(k) <= 100 and k.isprintable()


def _number(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


@dataclass(frozen=True, slots=True)
class ServerReading:
    """One read of what the server says about itself.

    at_s -- unix seconds of the read; source -- "metrics" (a ``/metrics`` page) or
    "stated" (the metadata endpoints); start_time_s -- the serving process's start
    (``process_start_time_seconds``, unix s), None when not published; facts -- its
    stated setup and identity, (key, value) sorted by key (``enable_prefix_caching``,
    ``block_size``, ``version``, ``max_model_len``, ...: the engine's own names);
    counters -- cumulative counters (metric name, total), sorted by name.
    Build it with ``make``, which drops whatever is not a plausible value.
    """

    at_s: float
    source: ReadingSource = "metrics"
    start_time_s: float | None = None
    facts: tuple[tuple[str, Fact], ...] = ()
    counters: tuple[tuple[str, float], ...] = ()

    @classmethod
    def make(cls, at_s: object, source: ReadingSource = "metrics", *,
             start_time_s: object = None, facts: Mapping | None = None,
             counters: Mapping | None = None) -> "ServerReading | None":
        """A reading with only plausible values: a start time in 2001..2100, facts that
        are scalars (strings up to ``MAX_FACT_CHARS``, printable), counters finite in
        0..``MAX_COUNTER``; None when ``at_s`` is not a finite positive time."""
        at = _number(at_s)
        if at is None or at <= 0:
            return None
        start = _number(start_time_s)
        if start is not None and not _START_RANGE[0] <= start <= _START_RANGE[1]:
            start = None
        fs: dict[str, Fact] = {}
        for k, v in (facts.items() if isinstance(facts, Mapping) else ()):
            fv = fact(v)
            if _key(k) and fv is not None:
                fs[k] = fv
        cs: dict[str, float] = {}
        for k, v in (counters.items() if isinstance(counters, Mapping) else ()):
            cv = _number(v)
            if _key(k) and cv is not None and 0 <= cv <= MAX_COUNTER:
                cs[k] = cv
        return cls(at, "stated" if source == "stated" else "metrics", start,
                   tuple(sorted(fs.items())), tuple(sorted(cs.items())))

    @property
    def fact_map(self) -> dict[str, Fact]:
        return dict(self.facts)

    @property
    def counter_map(self) -> dict[str, float]:
        return dict(self.counters)

    @property
    def empty(self) -> bool:
        """Nothing to tell a server by (no start time, no facts, no counters)."""
        return self.start_time_s is None and not self.facts and not self.counters


@dataclass(frozen=True, slots=True)
class ServerChange:
    """One change of the server behind the URL.

    at_s -- unix seconds it happened: the new process's start time where the server
      states one, else the first read that showed the new state;
    kind -- "restart", "upstream_switch", "config" or "replicas" (module docstring);
    changed -- (key, before, after) of each stated fact that differs (the engine's
      names: ``enable_prefix_caching``, ``max_model_len``, ``version``, ...); values
      as the server states them (vLLM's labels are strings: "True");
    evidence -- what showed it, in words ("process_start_time_seconds moved
      1,734,000,000 → 1,734,000,412", "vllm:prompt_tokens_total went down 81,920 → 512");
    seen_s -- unix seconds the tracker confirmed it (the read that made it count).
    """

    at_s: float
    kind: ChangeKind
    changed: tuple[tuple[str, Fact | None, Fact | None], ...] = ()
    evidence: tuple[str, ...] = ()
    seen_s: float = 0.0

    def to_json(self) -> dict:
        """The change as a JSON object (the run file's ``server_change`` record)."""
        return {"at_s": self.at_s, "kind": self.kind, "seen_s": self.seen_s,
                "changed": [[k, b, a] for k, b, a in self.changed],
                "evidence": list(self.evidence)}

    @classmethod
    def from_json(cls, d: object) -> "ServerChange | None":
        """A change from ``to_json``'s object; None when it is not one (a bad kind or
        time).  A malformed ``changed`` entry or evidence line is left out."""
        if not isinstance(d, dict):
            return None
        at, kind = _number(d.get("at_s")), d.get("kind")
        if at is None or kind not in CHANGE_KINDS:
            return None
        changed = []
        for row in d.get("changed") or ():
            if isinstance(row, (list, tuple)) and len(row) == 3 and _key(row[0]):
                changed.append((row[0], fact(row[1]), fact(row[2])))
        ev = tuple(e for e in (d.get("evidence") or ()) if isinstance(e, str) and e.isprintable())
        seen = _number(d.get("seen_s"))
        return cls(at, kind, tuple(changed), ev, seen if seen is not None else at)


# -- comparing two reads ---------------------------------------------------------


def _same(a: Fact, b: Fact) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) \
            and not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return type(a) is type(b) and a == b


@dataclass(frozen=True)
class _Diff:
    """How a read differs from a reference: the start time moved ("later"/"earlier"),
    the facts that differ (key, before, after), the counters that went down."""

    start: Literal["later", "earlier"] | None = None
    start_pair: tuple[float, float] | None = None
    facts: tuple[tuple[str, Fact, Fact], ...] = ()
    down: tuple[tuple[str, float, float], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.start or self.facts or self.down)

    @property
    def identity(self) -> bool:
        """Differs in what the server is (start time, facts), not only its counters."""
        return bool(self.start or self.facts)


def _diff(ref: ServerReading, counters_ref: ServerReading | None, r: ServerReading) -> _Diff:
    """``r`` against ``ref``'s start time and facts (keys both state) and against
    ``counters_ref``'s counters (names both publish)."""
    start = pair = None
    if ref.start_time_s is not None and r.start_time_s is not None:
        d = r.start_time_s - ref.start_time_s
        if abs(d) > START_TOLERANCE_S:
            start, pair = ("later" if d > 0 else "earlier"), (ref.start_time_s, r.start_time_s)
    before = ref.fact_map
    facts = tuple((k, before[k], v) for k, v in r.facts if k in before and not _same(before[k], v))
    down: tuple = ()
    if counters_ref is not None:
        c0 = counters_ref.counter_map
        # a counter only grows in one process: lower (past float noise) is a new process
        down = tuple((k, c0[k], v) for k, v in r.counters
                     if k in c0 and v < c0[k] * (1 - 1e-9) - 1e-6)
    return _Diff(start, pair, facts, down)


def _merge(base: ServerReading, r: ServerReading) -> ServerReading:
    """``base`` with what ``r`` states that it did not (a start time, new fact keys),
    and ``r``'s time and counters."""
    facts = dict(base.facts)
    for k, v in r.facts:
        facts.setdefault(k, v)
    return replace(base, at_s=r.at_s, start_time_s=base.start_time_s
                   if base.start_time_s is not None else r.start_time_s,
                   facts=tuple(sorted(facts.items())), counters=r.counters)


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 or float(v).is_integer() else f"{v:,.3g}"


def _evidence(d: _Diff) -> tuple[str, ...]:
    out = []
    if d.start_pair is not None:
        a, b = d.start_pair
        verb = "moved" if d.start == "later" else "went back"
        out.append(f"process_start_time_seconds {verb} {a:,.0f} → {b:,.0f}")
    for name, a, b in d.down[:2]:
        out.append(f"{name} went down {_num(a)} → {_num(b)}")
    if len(d.down) > 2:
        out.append(f"{len(d.down) - 2} more counters went down")
    return tuple(out)


def _kind(d: _Diff) -> ChangeKind:
    if d.start == "later" or (d.down and d.start is None):
        return "restart"
    if d.start == "earlier" or any(k in IDENTITY_KEYS for k, _, _ in d.facts):
        return "upstream_switch"
    return "config"


# -- one source's reads ----------------------------------------------------------


@dataclass
class _Stream:
    """The reads of one source: the confirmed state, the last read taken as it (for
    counters), a candidate new state, the flaps and the replicas seen."""

    source: ReadingSource = "metrics"
    base: ServerReading | None = None
    last: ServerReading | None = None
    pending: ServerReading | None = None
    pending_reads: int = 0
    reads: int = 0
    #: (read number, the state read once) of each flap, the newest few
    flaps: deque = field(default_factory=lambda: deque(maxlen=FLAPS_FOR_REPLICAS))
    replicas: bool = False
    #: replica -> (its state, the read number it was last seen), in replicas mode
    members: list = field(default_factory=list)
    #: the states confirmed before the current one, newest last
    history: deque = field(default_factory=lambda: deque(maxlen=4))


class ServerChangeTracker:
    """Fed successive ``ServerReading`` (any order of the two sources, each source's in
    time order), emits ``ServerChange`` events (module docstring).  Not thread-safe:
    one feeder (``measure.server_watch.ServerWatch`` holds the lock).

    ``feed(r)`` returns the changes that ``r`` made count (usually none); ``changes``
    holds the newest ``MAX_CHANGES``; ``recent(now_s)`` those of the last ``RECENT_S``;
    ``start_time_s`` the confirmed process start time; ``wants_stated``: a new state is
    pending on /metrics, so the caller should read the stated facts now (they confirm a
    restart and name its config).
    """

    def __init__(self) -> None:
        self._streams: dict[ReadingSource, _Stream] = {"metrics": _Stream("metrics"),
                                                       "stated": _Stream("stated")}
        self.changes: deque[ServerChange] = deque(maxlen=MAX_CHANGES)
        self.counts: dict[ChangeKind, int] = {k: 0 for k in CHANGE_KINDS}
        #: a confirmed /metrics change waiting for the stated facts read after it
        self._held: tuple[ServerChange, float] | None = None
        self._said_replicas = False
        self._last_stated: ServerReading | None = None

    # -- what callers read
    @property
    def start_time_s(self) -> float | None:
        base = self._streams["metrics"].base
        return base.start_time_s if base is not None else None

    @property
    def wants_stated(self) -> bool:
        m = self._streams["metrics"]
        return m.pending is not None or self._held is not None \
            or self._streams["stated"].pending is not None

    @property
    def replicas(self) -> bool:
        return any(s.replicas for s in self._streams.values())

    def recent(self, now_s: float, within_s: float = RECENT_S) -> tuple[ServerChange, ...]:
        """The changes of the last ``within_s`` seconds before ``now_s``, oldest first."""
        return tuple(c for c in self.changes if c.seen_s > now_s - within_s)

    # -- reads in
    def feed(self, r: ServerReading | None) -> tuple[ServerChange, ...]:
        """Take one read; returns the changes it confirmed.  A None or empty read is
        ignored; never raises for bad values (``ServerReading.make`` dropped them)."""
        if r is None or not isinstance(r, ServerReading) or r.empty:
            return ()
        out = list(self.tick(r.at_s))
        s = self._streams[r.source]
        s.reads += 1
        if r.source == "stated":
            self._last_stated = r
            if self._held is not None and s.base is not None:
                return tuple(out + self._stated_after(r))
        if s.base is None:
            s.base = s.last = r
            return tuple(out)
        if s.replicas:
            out += self._feed_replicas(s, r)
            return tuple(out)
        d = _diff(s.base, s.last, r)
        if not d:
            if s.pending is not None:  # A, B, A: B was one read of something else
                s.flaps.append((s.reads, s.pending))
                s.pending = None
                if (len(s.flaps) >= FLAPS_FOR_REPLICAS
                        and s.flaps[-1][0] - s.flaps[0][0] <= FLAP_READS):
                    out += self._enter_replicas(s, r)
            s.base, s.last = _merge(s.base, r), r
            return tuple(out)
        if s.pending is None:
            s.pending = r
            return tuple(out)
        # a second read that differs from the confirmed state: the same new state?
        if _diff(s.pending, s.pending, r):
            s.pending = r  # a third state: it must be seen twice itself
            return tuple(out)
        return tuple(out + self._confirm(s, r))

    def tick(self, now_s: float) -> tuple[ServerChange, ...]:
        """A confirmed /metrics change still waiting for the stated facts after
        ``STATED_WAIT_S``: said now without them (returned; else ())."""
        if self._held is not None and now_s - self._held[1] >= STATED_WAIT_S:
            return (self._release(),)
        return ()

    def _confirm(self, s: _Stream, r: ServerReading) -> list[ServerChange]:
        first, first_base = s.pending, s.base
        d = _diff(s.base, s.last, first)
        back = next((h for h in s.history if not _diff(h, None, first)), None)
        if back is not None and d.identity and r.source == "metrics":
            # back to a server confirmed before (reads that stay on one connection to a
            # replica, then another): several replicas, not a restart each time
            s.flaps.clear()
            s.flaps.append((s.reads, back))
            s.base, s.last = first_base, first_base
            return self._enter_replicas(s, r)
        s.history.append(first_base)
        s.base, s.last, s.pending = r, r, None
        s.flaps.clear()
        at = first.at_s
        if d.start == "later" and d.start_pair is not None and d.start_pair[1] <= first.at_s:
            at = d.start_pair[1]  # the new process says when it started
        change = ServerChange(at, _kind(d), tuple(d.facts), _evidence(d), seen_s=r.at_s)
        if r.source == "metrics":
            stated = self._streams["stated"]
            if stated.base is None:
                return [self._count(change)]
            self._held = (change, r.at_s)
            last = self._last_stated
            if last is not None and last.at_s >= first.at_s:
                return self._stated_after(last)
            return []
        if self._streams["metrics"].pending is not None:
            # the process change on /metrics will say it, with these facts
            s.base, s.pending = first_base, r
            return []
        change = replace(change, evidence=change.evidence + ("stated by the server's "
                                                             "metadata endpoints",))
        low = next((f for _, f in reversed(self._streams["metrics"].flaps)
                    if f.at_s >= first_base.at_s), None)
        if low is not None and change.kind == "config":
            # counters read lower once since the old facts were read, then caught up (a
            # young server's first probes): with the new facts, that was a new process
            change = replace(change, kind="restart", evidence=change.evidence + (
                "counters went down on one /metrics read since the facts were last "
                "the old ones",))
        return [self._count(change)]

    def _stated_after(self, r: ServerReading) -> list[ServerChange]:
        """The stated facts read after a confirmed /metrics change: taken as the new
        state at once (the process change is confirmed), their differences named."""
        stated = self._streams["stated"]
        change, _ = self._held
        d = _diff(stated.base, None, r)
        stated.base = stated.last = r
        stated.pending = None
        changed = change.changed + tuple(x for x in d.facts
                                         if x[0] not in {k for k, _, _ in change.changed})
        kind = change.kind
        if kind == "config" and any(k in IDENTITY_KEYS for k, _, _ in d.facts):
            kind = "upstream_switch"
        self._held = (replace(change, kind=kind, changed=changed), self._held[1])
        return [self._release()]

    def _release(self) -> ServerChange:
        change, _ = self._held
        self._held = None
        return self._count(change)

    def _count(self, c: ServerChange) -> ServerChange:
        self.changes.append(c)
        self.counts[c.kind] += 1
        return c

    # -- several servers behind one URL
    def _enter_replicas(self, s: _Stream, r: ServerReading) -> list[ServerChange]:
        s.replicas = True
        s.members = [[s.base, s.reads]]
        for n, flap in s.flaps:
            if all(_diff(m[0], None, flap) for m in s.members):
                s.members.append([flap, n])
        s.pending = None
        if self._said_replicas:
            return []
        self._said_replicas = True
        what = ("process start times" if s.base.start_time_s is not None else
                "stated facts" if s.source == "stated" else "counters")
        return [self._count(ServerChange(
            r.at_s, "replicas", (),
            (f"reads alternate between servers ({what} differ read to read): several "
             "replicas behind one URL; their counters are not compared",), seen_s=r.at_s))]

    def _feed_replicas(self, s: _Stream, r: ServerReading) -> list[ServerChange]:
        """In replicas mode: a read of a known replica is taken silently; a state no
        replica had, seen twice within ``FLAP_READS`` reads, joins them (a replica that
        restarted or was added: said as a restart of one replica when its process is
        newer).  Counters are not compared (each read may be another replica's)."""
        s.members = [m for m in s.members if s.reads - m[1] <= MEMBER_READS] or s.members[-1:]
        for m in s.members:
            if not _diff(m[0], None, r):
                m[0], m[1] = _merge(m[0], r), s.reads
                return []
        if s.pending is None or _diff(s.pending, None, r) or s.reads - s.pending_reads > FLAP_READS:
            s.pending, s.pending_reads = r, s.reads
            return []
        first = s.pending
        s.pending = None
        newest = max((m[0].start_time_s for m in s.members if m[0].start_time_s is not None),
                     default=None)
        s.members.append([r, s.reads])
        if newest is None or first.start_time_s is None or first.start_time_s <= newest:
            return []  # another replica came into the rotation: nothing restarted
        # the replica it replaced: the fewest facts apart, then the longest unseen
        nearest = min(s.members[:-1], key=lambda m: (len(_diff(m[0], None, first).facts), m[1]))
        d = _diff(nearest[0], None, first)
        return [self._count(ServerChange(
            first.start_time_s if first.start_time_s <= first.at_s else first.at_s,
            "restart", tuple(d.facts),
            ("one of the replicas behind this URL restarted: " + _evidence(d)[0],)
            if d.start_pair is not None else ("one of the replicas behind this URL restarted",),
            seen_s=r.at_s))]


# -- words -----------------------------------------------------------------------

#: Facts as a person names them; the rest by their own key.
FACT_WORDS = {
    "enable_prefix_caching": "prefix caching", "prefix_caching": "prefix caching",
    "disable_radix_cache": "radix cache disabled", "block_size": "block size",
    "num_gpu_blocks": "KV cache blocks", "cache_dtype": "KV cache dtype",
    "prefix_caching_hash_algo": "prefix hash", "max_model_len": "context",
    "n_ctx": "context", "context_length": "context", "total_slots": "slots",
    "chunked_prefill_size": "chunked prefill", "gpu_memory_utilization": "GPU memory share",
    "max_batch_total_tokens": "batch tokens", "version": "version", "model": "model",
    "model_path": "model", "build_info": "build",
}
#: The facts said first (those that move TTFT most), then the rest in key order.
FACT_ORDER = ("enable_prefix_caching", "prefix_caching", "disable_radix_cache", "model",
              "model_path", "model_id", "version", "build_info", "max_model_len", "n_ctx",
              "chunked_prefill_size", "cache_dtype", "block_size", "total_slots")
#: Changed facts named in words (the rest counted).
WORDS_FACTS = 3


def _shown(v: Fact | None) -> str:
    if v is None:
        return "unset"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (int, float)):
        return _num(float(v))
    return v


def ago(seconds: float) -> str:
    """``seconds`` as "40 s", "3 min", "1 h 5 min" (never negative)."""
    s = max(0.0, seconds)
    if s < 90:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{s / 60:.0f} min"
    h, m = divmod(int(s // 60), 60)
    return f"{h} h {m} min" if m else f"{h} h"


def fact_changes(c: ServerChange, limit: int = WORDS_FACTS) -> str:
    """The changed facts of ``c`` in words: "prefix caching True → False, context 4,096
    → 2,048" (the ones that move TTFT first; "+2 more" past ``limit``); "" when none."""
    order = {k: i for i, k in enumerate(FACT_ORDER)}
    rows = sorted(c.changed, key=lambda x: (order.get(x[0], len(order)), x[0]))
    words = [f"{FACT_WORDS.get(k, k)} {_shown(b)} → {_shown(a)}" for k, b, a in rows[:limit]]
    if len(rows) > limit:
        words.append(f"+{len(rows) - limit} more")
    return ", ".join(words)


def change_words(changes: "tuple[ServerChange, ...] | list[ServerChange]", now_s: float
                 ) -> str | None:
    """The newest change in words, for the verdict and the log: "the server restarted
    40 s ago; prefix caching True → False" (with "N earlier changes" when there were
    more); None when there is none."""
    cs = [c for c in changes if isinstance(c, ServerChange)]
    if not cs:
        return None
    c = max(cs, key=lambda x: x.at_s)
    when = ago(now_s - c.at_s) + " ago"
    head = {"restart": f"the server restarted {when}",
            "upstream_switch": f"another server answers behind this URL since {when}",
            "config": f"the server's stated config changed {when}",
            "replicas": f"several replicas answer behind this URL (seen {when})"}[c.kind]
    facts = fact_changes(c)
    out = head + (f"; {facts}" if facts else "")
    if len(cs) > 1:
        out += f" ({len(cs) - 1} earlier change{'s' if len(cs) > 2 else ''})"
    return out


def change_after(changes: "tuple[ServerChange, ...] | list[ServerChange]",
                 reference_s: float | None) -> ServerChange | None:
    """The newest change that happened after ``reference_s`` (unix s: when a
    reference, the users' or the probes', was taken), or None: a reference older than
    the change describes another server (or another config), so before/after must be
    compared across it.  A "replicas" change does not count (it is no moment when the
    server changed).  None when ``reference_s`` is None."""
    if reference_s is None:
        return None
    later = [c for c in changes if isinstance(c, ServerChange) and c.kind != "replicas"
             and c.at_s > reference_s]
    return max(later, key=lambda c: c.at_s) if later else None
