"""Targets from Prometheus' own service-discovery formats, and the shard a replica keeps.

Two sources, both the shape Prometheus reads (a JSON list of target groups)::

    [{"targets": ["http://gpu-01:8000", "gpu-02:8000"],
      "labels": {"__prefilltui_model": "meta-llama/Llama-3.1-8B-Instruct",
                 "__prefilltui_key_env": "GPU_API_KEY"}}]

``file_sd``  a JSON or YAML file (what a ConfigMap or an SD sidecar writes), looked at
             every refresh (``os.stat``: mtime, size, inode) and read again only when
             it changed; at most ``localfile.MAX_CONFIG_BYTES``.
``http_sd``  a URL answering that JSON (Prometheus' ``http_sd_configs``), fetched every
             refresh with ``measure.bounded.fetch``: at most ``MAX_HTTP_SD_BYTES``
             decoded bytes within ``HTTP_SD_DEADLINE_S``; HTTP 200 only.

Each entry of ``targets`` is one server: a base URL, or ``host:port`` (scheme from the
group's ``__scheme__`` label, Prometheus' own, default http).  Its ``target`` label is
the entry as written (so a Prometheus job reading the same file relabels
``__address__`` -> ``__param_target`` and asks ``/probe?target=`` for exactly it),
unless ``__prefilltui_name`` gives one.  The ``__prefilltui_*`` labels (``LABELS``) set
the exporter's keys per group, by the same types and ranges as the TOML file; every
other label is Prometheus' and is ignored here.  No credential is read from a label or
a URL: a label named like a secret (``*key*`` but ``__prefilltui_key_env``,
``*token*``, ``*secret*``, ``*password*``) or an entry with ``user:password@`` or a
secret query value refuses the list (Prometheus would store them as label values).

A source whose new content does not parse, names a bad key, or fails the caller's
``validate`` keeps its last good list; the reason is logged once per change and served
as ``prefilltui_sd_*`` series (``SdCollector``).  Labels (``source``) never hold a
password: a URL source is shown by ``redact.display_url``.  A source caught holding no
document is refused the same way, never read as "no target" (``decode``): an empty
file (0 bytes, whitespace, a byte-order mark alone), a YAML file of comments only, a
file gone for a moment while a writer replaces it.  That is a file being written;
only a well-formed ``[]`` empties the list, as in Prometheus' own file_sd, where a file
emptied to 0 bytes left the targets in place and ``[]`` removed them
(prometheus/prometheus#8202).

Sharding (``Shard``): ``--shard I/N`` keeps the targets whose *entry* falls to I by
Prometheus' ``hashmod`` relabel action, exactly: md5 of the source label values
joined by ``;``, the digest's last 8 bytes as a big-endian uint64, modulo N
(prometheus/prometheus ``model/relabel/relabel.go``, ``case HashMod``, commit 02a3255).
The entry (``TargetConfig.shard_key``) is the ``targets`` string as the source writes
it -- what Prometheus calls ``__address__`` -- or a command-line / TOML target's
``url``; never its name.  So a Prometheus ``hashmod`` on ``__address__`` (the chart's
``/probe`` job: it copies ``__address__`` to ``__param_target`` and hashes that) names
the replica that holds a target whatever labels its group carries, and renaming a
target (``__prefilltui_name``) never moves it to another replica.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

from prefilltui.exporter.config import TargetConfig, _coerce, check, target
from prefilltui.model import localfile
from prefilltui.model.redact import display_url, is_secret_param

log = logging.getLogger("prefilltui.exporter")

#: The label names read from a target group, and the TOML key each sets (values are
#: strings in SD: numbers, lists and booleans are parsed by the key's type below).
LABELS: dict[str, str] = {
    "__prefilltui_name": "name", "__prefilltui_model": "model",
    "__prefilltui_key_env": "api_key_env", "__prefilltui_api": "api",
    "__prefilltui_interval": "interval", "__prefilltui_timeout": "timeout",
    "__prefilltui_lengths": "lengths", "__prefilltui_window": "window",
    "__prefilltui_gpu": "gpu", "__prefilltui_peak_tflops": "peak_tflops",
    "__prefilltui_params": "params", "__prefilltui_dtype": "dtype",
    "__prefilltui_expected_throughput": "expected_throughput",
    "__prefilltui_hang_after": "hang_after", "__prefilltui_stale_after": "stale_after",
    "__prefilltui_gpu_metrics_url": "gpu_metrics_url", "__prefilltui_gpus": "gpus",
    "__prefilltui_insecure": "insecure",
}
_NUMBERS = {"interval", "timeout", "peak_tflops", "params", "hang_after", "stale_after"}
_SECRET_LABEL = re.compile(r"key|token|secret|passw", re.I)
#: Largest http_sd answer read (decoded bytes): ~150 bytes per target, so ~28,000
#: targets; Prometheus' own http_sd has no cap, a hostile endpoint could send GiBs.
MAX_HTTP_SD_BYTES = 4 * 2**20
#: One http_sd exchange (connect, headers, body) must finish within this (s).
HTTP_SD_DEADLINE_S = 10.0
#: Default seconds between looks at each source (Prometheus' http_sd default is 60 s,
#: file_sd's re-read 5 min plus inotify; a stat() every 30 s costs nothing).
DEFAULT_REFRESH_S = 30.0
#: Most target groups and entries one source may hold (a bound on what a bad source
#: costs before the per-process target cap refuses it).
MAX_ENTRIES = 100_000


# ----------------------------------------------------------------------- sharding

def hashmod(values: Sequence[str], modulus: int, separator: str = ";") -> int:
    """Prometheus' ``hashmod`` of label ``values`` (module docstring: md5, the last 8
    bytes big-endian, mod ``modulus``).  Raises ValueError for modulus < 1."""
    if modulus < 1:
        raise ValueError("modulus must be >= 1")
    digest = hashlib.md5(separator.join(values).encode("utf-8")).digest()
    return int.from_bytes(digest[8:], "big") % modulus


@dataclass(frozen=True, slots=True)
class Shard:
    """Replica ``index`` of ``count`` (``--shard I/N``, 0 <= I < N): it keeps the targets
    whose entry (``TargetConfig.shard_key``, module docstring) hashes (``hashmod``) to
    ``index``."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, text: str) -> "Shard":
        """``"I/N"`` -> Shard.  Raises ValueError naming the form."""
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
        if not m or not 0 < int(m.group(2)) <= 10_000 or int(m.group(1)) >= int(m.group(2)):
            raise ValueError(f"--shard expects I/N with 0 <= I < N <= 10000, got {text!r}")
        return cls(int(m.group(1)), int(m.group(2)))

    def keeps(self, cfg: TargetConfig) -> bool:
        return self.count == 1 or hashmod([cfg.shard_key], self.count) == self.index

    def select(self, targets: Iterable[TargetConfig]) -> list[TargetConfig]:
        return [t for t in targets if self.keeps(t)]

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


# ----------------------------------------------------------------------- parsing

def _typed(key: str, text: Any, where: str) -> Any:
    if not isinstance(text, str):
        raise ValueError(f"{where}: label values are strings, got {type(text).__name__}")
    try:
        if key in _NUMBERS or key == "expected_throughput" and text != "roofline":
            return float(text)
        if key == "window":
            return int(text)
        if key == "lengths":
            return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{where}: {key} = {text[:40]!r} is not a number") from None
    if key == "insecure":
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{where}: insecure must be 'true' or 'false'")
        return text.lower() == "true"
    return text


def _entry_url(entry: str, scheme: str) -> str:
    return entry if re.match(r"[a-z][a-z0-9+.-]*://", entry, re.I) else f"{scheme}://{entry}"


def parse_groups(doc: Any, where: str, base: TargetConfig) -> list[TargetConfig]:
    """The targets of a decoded SD document (a list of ``{targets, labels}``), each
    validated (``config.check``), ``base`` giving every key a label does not.

    Raises:
        ValueError: not a list of groups, a bad entry or label (the message names the
            source, the group and the entry; never a secret's value).
    """
    if not isinstance(doc, list):
        raise ValueError(f"{where}: expected a list of target groups "
                         "([{\"targets\": [...], \"labels\": {...}}])")
    if sum(len(g.get("targets") or ()) if isinstance(g, dict) else 1 for g in doc) > MAX_ENTRIES:
        raise ValueError(f"{where}: more than {MAX_ENTRIES} targets")
    out: list[TargetConfig] = []
    paths: dict[str, dict[str, list[tuple[str, TargetConfig]]]] = {}
    for gi, group in enumerate(doc, 1):
        gw = f"{where} group {gi}"
        if not isinstance(group, dict) or set(group) - {"targets", "labels"}:
            raise ValueError(f"{gw}: a group has only 'targets' and 'labels'")
        labels = group.get("labels") or {}
        entries = group.get("targets") or []
        if not isinstance(labels, dict) or not isinstance(entries, list):
            raise ValueError(f"{gw}: 'targets' must be a list and 'labels' a mapping")
        keys: dict[str, Any] = {}
        for name, value in labels.items():
            if not isinstance(name, str):
                raise ValueError(f"{gw}: label names are strings")
            if _SECRET_LABEL.search(name) and name != "__prefilltui_key_env":
                raise ValueError(f"{gw}: label {name!r} looks like a credential: labels are "
                                 "stored by Prometheus; name the key's environment variable "
                                 "with __prefilltui_key_env")
            if name in PATH_LABELS:
                continue  # a group of a path (``_paths``)
            if name.startswith("__prefilltui_"):
                if name not in LABELS:
                    raise ValueError(f"{gw}: unknown label {name!r} (known: "
                                     f"{', '.join(sorted(LABELS))})")
                keys[LABELS[name]] = _typed(LABELS[name], value, f"{gw} {name}")
        keys = _coerce(keys, gw)  # type and range, as the TOML file's
        scheme = labels.get("__scheme__", "http")
        if scheme not in ("http", "https"):
            raise ValueError(f"{gw}: __scheme__ must be http or https")
        for entry in entries:
            if not isinstance(entry, str) or not entry.strip():
                raise ValueError(f"{gw}: each target is a URL or host:port string")
            url = _entry_url(entry.strip(), scheme)
            if display_url(url) != url or "@" in entry or _secret_query(url):
                raise ValueError(f"{gw}: target {display_url(url)!r} carries a credential; SD "
                                 "entries become Prometheus labels: keep keys in the "
                                 "environment (__prefilltui_key_env)")
            named = {"name": entry.strip(), **keys}
            cfg = replace(target(url, base, **named), entry=entry)  # as written: __address__
            role, path = labels.get("__prefilltui_role"), labels.get("__prefilltui_path")
            if role is None and path is None:
                out.append(check(cfg, f"{gw} target {named['name']!r}"))
                continue
            if role not in ("router", "prefill", "decode") or not isinstance(path, str) or not path:
                raise ValueError(f"{gw}: a path's group has __prefilltui_path (its name) and "
                                 "__prefilltui_role (router, prefill or decode)")
            paths.setdefault(path, {}).setdefault(role, []).append((gw, cfg))
    return out + _paths(paths, where)


#: The labels that make groups one path: its name, and each group's role in it.
PATH_LABELS = ("__prefilltui_path", "__prefilltui_role")


def _paths(paths: dict[str, dict[str, list[tuple[str, TargetConfig]]]], where: str
           ) -> list[TargetConfig]:
    """One target per path: its router's, with the prefill and decode workers' URLs
    (docs/disaggregated.md), named by the path unless its router's group names it.

    Raises:
        ValueError: a path without exactly one router, one prefill and one decode entry.
    """
    out = []
    for name, roles in paths.items():
        counts = {r: len(roles.get(r, ())) for r in ("router", "prefill", "decode")}
        if set(counts.values()) != {1}:
            raise ValueError(f"{where}: path {name[:60]!r} needs one router, one prefill and "
                             f"one decode entry (has {', '.join(f'{v} {k}' for k, v in counts.items())})")
        gw, router = roles["router"][0]
        named = router.name if router.name != router.entry else name
        cfg = replace(router, name=named, prefill=roles["prefill"][0][1].url,
                      decode=roles["decode"][0][1].url)
        out.append(check(cfg, f"{gw} path {name[:60]!r}"))
    return out


def _secret_query(url: str) -> bool:
    from urllib.parse import parse_qsl, urlsplit

    return any(is_secret_param(k) for k, _ in parse_qsl(urlsplit(url).query,
                                                         keep_blank_values=True))


#: The words of a refused source that holds no document at all (module docstring).
NOTHING_YET = ("holds no list yet (a writer caught mid-write?); write [] for no target")


def decode(text: str, where: str, yaml_ok: bool) -> Any:
    """JSON, else (``yaml_ok``: a file) YAML.  Raises ValueError naming ``where``,
    also for a document nested deeper than the parsers recurse (a target group list
    is three levels deep; ``[[[[...`` a hundred thousand deep is a bad list, not a
    RecursionError out of the exporter's start or the refresh thread).

    A text that holds no document is refused too, never read as "no target": empty
    (0 bytes, or whitespace, or a byte-order mark alone: ``localfile`` drops one), or
    a YAML file of comments, ``---`` or ``null`` only (YAML's empty document).  That is
    what a reader sees of a file being written (truncated, then written) or of a
    sidecar that wrote its header first; only a well-formed ``[]`` empties the list.
    """
    text = text.lstrip("\ufeff")
    if not text.strip():
        raise ValueError(f"{where}: empty: {NOTHING_YET}")
    deep = ValueError(f"{where}: nested too deeply to read (a list of target groups "
                      "is three levels deep)")
    try:
        doc = json.loads(text)
    except RecursionError:
        raise deep from None
    except ValueError as e:
        if not yaml_ok:
            raise ValueError(f"{where}: not JSON: {e}") from None
    else:
        return _some(doc, where, "JSON null")
    import yaml

    try:
        doc = yaml.safe_load(text)
    except RecursionError:
        raise deep from None
    except yaml.YAMLError as e:
        raise ValueError(f"{where}: neither JSON nor YAML: "
                         f"{' '.join(str(e).split())[:300]}") from None
    return _some(doc, where, "an empty YAML document (comments, --- or null only)")


def _some(doc: Any, where: str, what: str) -> Any:
    if doc is None:
        raise ValueError(f"{where}: {what}: {NOTHING_YET}")
    return doc


# ----------------------------------------------------------------------- sources

@dataclass
class SourceState:
    """What one source holds: its last good targets and how its last look went."""

    name: str  # shown: a path or a display_url
    good: list[TargetConfig] | None = None  # None: never read well
    error: str | None = None
    last_success: float | None = None  # unix time of the last good read
    failures: int = 0
    reads: int = 0


class FileSource:
    """A file_sd file: ``read()`` is its text when it changed since the last call, else
    None.  Raises OSError / ValueError (too large, not UTF-8)."""

    yaml_ok = True

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = path
        self._seen: tuple | None = None

    def read(self) -> str | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            # gone for a moment (a writer that deletes, then writes) or for good: either
            # way not "no target"; it is read again once it is back
            raise OSError(f"{self.path}: No such file now (removed, or a writer "
                          "replacing it)") from None
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key == self._seen:
            return None
        text = localfile.read_text(self.path)
        self._seen = key
        return text

    def forget(self) -> None:
        """Nothing: a refused file is read again once it changes (a writer that was
        caught mid-write changes its size or mtime when it finishes)."""


class HttpSource:
    """An http_sd URL: ``read()`` fetches it (bounded, module docstring).  Raises
    OSError / ValueError with a reason that holds no credential."""

    yaml_ok = False

    def __init__(self, url: str, refresh_s: float) -> None:
        self.url = url
        self.name = display_url(url) or "http_sd"
        self.refresh_s = refresh_s
        self._last: str | None = None

    def read(self) -> str | None:
        from prefilltui.measure import bounded

        async def get() -> Any:
            import httpx

            async with httpx.AsyncClient(trust_env=False, follow_redirects=False) as client:
                return await bounded.fetch(
                    client, "GET", self.url, max_bytes=MAX_HTTP_SD_BYTES,
                    deadline_s=HTTP_SD_DEADLINE_S,
                    headers={"Accept": "application/json",
                             "Accept-Encoding": bounded.ACCEPT_ENCODING,
                             "X-Prometheus-Refresh-Interval-Seconds": f"{self.refresh_s:g}"})

        try:
            body = asyncio.run(get())
        except TimeoutError:
            raise OSError(f"no whole answer within {HTTP_SD_DEADLINE_S:g} s") from None
        except Exception as e:  # noqa: BLE001 - httpx's errors, shown without the URL
            raise OSError(f"{type(e).__name__}") from None
        if body.status != 200:
            raise ValueError(f"HTTP {body.status} (http_sd needs 200)")
        if body.truncated:
            raise ValueError(f"answer larger than {MAX_HTTP_SD_BYTES // 2**20} MiB")
        # a leading byte-order mark is dropped, as from a file (``localfile``)
        text = body.content.decode("utf-8", "replace").removeprefix("\ufeff")
        if text == self._last:
            return None
        self._last = text
        return text

    def forget(self) -> None:
        self._last = None


# ----------------------------------------------------------------------- discovery

@dataclass
class Discovery:
    """The discovered targets of every source, refreshed by a thread.

    ``base`` gives each discovered target its defaults (the command line's);
    ``validate(targets)`` (the exporter's preflight, on the whole new set: static and
    every source's) raises ValueError / OSError to refuse a source's new list;
    ``on_change()`` is called (from the refresh thread) after a source's list changed.
    ``targets()`` is every source's last good list, in source order.
    """

    sources: list[Any]
    base: TargetConfig
    refresh_s: float = DEFAULT_REFRESH_S
    validate: Callable[[list[TargetConfig]], None] = lambda targets: None
    on_change: Callable[[], None] = lambda: None
    states: list[SourceState] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.states = [SourceState(s.name) for s in self.sources]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def targets(self) -> list[TargetConfig]:
        with self._lock:
            return [t for st in self.states for t in (st.good or ())]

    def refresh(self) -> bool:
        """Look at every source once; True when some source's list changed."""
        changed = False
        for i, src in enumerate(self.sources):
            st = self.states[i]
            try:
                text = src.read()
                if text is None:
                    continue
                st.reads += 1
                new = parse_groups(decode(text, st.name, src.yaml_ok), st.name, self.base)
                with self._lock:
                    others = [t for j, s in enumerate(self.states) if j != i
                              for t in (s.good or ())]
                self.validate(others + new)
            except (OSError, ValueError) as e:
                reason = str(e) or type(e).__name__
                if not reason.startswith(st.name):
                    reason = f"{st.name}: {reason}"
                if reason != st.error:
                    kept = "no target yet" if st.good is None else f"{len(st.good)} kept"
                    log.error("service discovery: %s (the last good list is kept: %s)",
                              reason, kept)
                st.error, st.failures = reason, st.failures + 1
                src.forget()
                continue
            with self._lock:
                old = st.good
                st.good, st.error, st.last_success = new, None, time.time()
            if old != new:
                changed = True
                log.info("service discovery: %s lists %d target(s)", st.name, len(new))
            else:
                st.last_success = time.time()
        return changed

    def start(self) -> "Discovery":
        self._thread = threading.Thread(target=self._loop, name="prefilltui-sd", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                if self.refresh():
                    self.on_change()
            except Exception:  # noqa: BLE001 - discovery never stops the exporter
                log.exception("service discovery failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=HTTP_SD_DEADLINE_S + 1)


def sd_metrics(disc: Discovery | None, shard: Shard, kept: int):
    """The ``prefilltui_sd_*`` and ``prefilltui_shard_*`` metric families (prometheus
    client families; ``kept``: targets this replica probes after sharding)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    info = GaugeMetricFamily("prefilltui_shard_targets",
                             "targets this replica probes (its shard of every target "
                             "listed), by shard index and count", labels=["shard", "shards"])
    info.add_metric([str(shard.index), str(shard.count)], kept)
    yield info
    if disc is None:
        return
    n = GaugeMetricFamily("prefilltui_sd_targets",
                          "targets in the source's last good list (before sharding)",
                          labels=["source"])
    ok = GaugeMetricFamily("prefilltui_sd_last_refresh_ok",
                           "1 when the source's last read was used; 0: refused, the "
                           "last good list kept (the log says why)", labels=["source"])
    ts = GaugeMetricFamily("prefilltui_sd_last_success_timestamp_seconds",
                           "unix time of the source's last good read", labels=["source"])
    bad = CounterMetricFamily("prefilltui_sd_refresh_failures",
                              "reads of the source refused (unreadable, bad, invalid)",
                              labels=["source"])
    for st in disc.states:
        n.add_metric([st.name], len(st.good or ()))
        ok.add_metric([st.name], 0 if st.error else 1)
        if st.last_success is not None:
            ts.add_metric([st.name], st.last_success)
        bad.add_metric([st.name], st.failures)
    yield from (n, ok, ts, bad)

