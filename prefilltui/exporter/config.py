"""What the exporter probes: one ``TargetConfig`` per server, from the command line
and/or a TOML file.

TOML layout (every key optional except ``url``; ``[defaults]`` applies to every
``[[target]]``, a target's own keys win, command-line flags give the defaults of
``[defaults]``)::

    [defaults]
    interval = 15            # seconds between probe starts (the rate ceiling)
    lengths = [64, 256, 1024, 2048]
    api_key_env = "OPENAI_API_KEY"

    [[target]]
    url = "http://gpu-01:8000"
    name = "gpu-01"          # the ``target`` label (default: the URL)
    model = "meta-llama/Llama-3.1-8B-Instruct"
    api_key_env = "GPU01_API_KEY"
    gpu = "H100 SXM"         # or peak_tflops = 989; MFU needs a peak and the params
    expected_throughput = 18000   # prompt tokens/s the alerts compare against, or
                             # "roofline"; or baseline_run = "healthy.jsonl" (its fit)
    hang_after = 30          # a probe in flight this long (s) is a hang
    stale_after = 60         # a fit older than this (s) is stale (default 4 x interval)
    load = "decode:2"        # background load kept on it: off unless given (docs/load.md)
    gpu_metrics_url = "http://gpu-01:9400/metrics"   # its dcgm-exporter / nvitop page
    gpus = "0"               # which GPUs of that page (default: all); the fleet view only
    otlp_listen = "127.0.0.1:4318"  # receive the server's OTLP traces here (docs/users.md)
    otlp_service = "gpu-01"  # its spans' service.name, when targets share a receiver
    prefill = "http://gpu-01:8100"  # url is then a router in front of a prefill and a
    decode = "http://gpu-02:8200"   # decode worker (both or neither; docs/disaggregated.md)
    slo = ["ttft=2s@p99"]    # TTFT objectives (or "mlperf-server"); in [defaults]: the
                             # fleet's, for every target without its own (docs/slo.md)

API keys come only from the environment (``api_key_env`` names the variable); a key
written in the file is refused, so it never sits in a config file or a process list.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from prefilltui.measure.server import url_problem
from prefilltui.model import limits, localfile
from prefilltui.model.roofline import known_names
from prefilltui.model.roofline import lookup_gpu
from prefilltui.model.loadspec import LoadSpec, parse_load
from prefilltui.model.fleet import HANG_AFTER_S
from prefilltui.model.slo import SloItem, parse_objective
from prefilltui.model.redact import display_url, scrub_secrets
from prefilltui.options import (AnalysisOptions, OtlpOptions, PathOptions, ProbeOptions,
                                RooflineSpec, read_model_config)

#: One probe start every 15 s per target: 4 probes/min, invisible next to any real
#: workload (see docs/exporter.md for the load in requests and tokens).
DEFAULT_INTERVAL_S = 15.0
#: Log-spaced 64..2048 tokens: mean 674 prompt tokens per probe.
DEFAULT_LENGTHS = (64, 128, 256, 512, 1024, 2048)
#: Probes in the sliding-window fit: 40 x 15 s = the last ~10 minutes.
DEFAULT_WINDOW = 40
#: Random extra wait, as a fraction of the interval, so targets drift apart.
JITTER = 0.2
#: Fastest interval accepted (a guard against hammering a production server by typo).
MIN_INTERVAL_S = 0.05
#: Run file rotation: 16 MiB (~25k probes, ~4 days at the default rate), 3 old files.
RUN_FILE_MAX_BYTES = 16 * 2**20
RUN_FILE_KEEP = 3
#: A probe in flight longer than this (s) is a hang (``hang_after``), unless the window
#: holds a probe a third as slow (``health.hang_threshold``): with the default 15 s
#: interval, scrape and evaluation, ``PrefillProbeHung`` fires within 78 s of a hang.
DEFAULT_HANG_AFTER_S = HANG_AFTER_S  # model.fleet.health: the rules' own default
#: A fit whose newest probe is older than this many intervals is stale (``stale_after``
#: default: 4 x 15 s = 60 s, three missed probes): the throughput alerts ignore it.
STALE_INTERVALS = 4.0


@dataclass(frozen=True, slots=True)
class TargetConfig:
    """One server to probe: its ``probe`` options and ``roofline`` inputs (the same
    types, and the same defaults, as every other command's), the lengths in prompt
    tokens, the shortest gap between probe starts (``interval_s``) and the window.

    ``gpu_metrics_url`` / ``gpus``: where the fleet overview reads this server's GPUs
    (a dcgm-exporter or nvitop exporter page, and which of its GPUs); the exporter
    itself does not read them.

    Build one from file or command-line keys with ``target()``; ``check()`` validates
    it.  The per-probe time cap is ``probe.timeout_s``, ``defaults.TIMEOUT_S`` unless set:
    one cap for every tool, so a probe the sweep would wait for is not a failure here.

    The alerts' inputs: ``expected_throughput`` (prompt tokens/s, or "roofline":
    efficiency x peak / matmul FLOPs per token, docs/flops.md) or ``baseline_run`` (a healthy run file whose fit
    gives it) is the explicit baseline; ``hang_after_s`` the hang threshold's floor;
    ``stale_after_s`` the age at which the window fit is stale (None: 4 intervals).
    """

    url: str
    name: str = ""
    probe: ProbeOptions = ProbeOptions()
    roofline: RooflineSpec = RooflineSpec()
    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    interval_s: float = DEFAULT_INTERVAL_S
    window: int = DEFAULT_WINDOW
    expected_throughput: float | Literal["roofline"] | None = None
    baseline_run: str | None = None
    hang_after_s: float = DEFAULT_HANG_AFTER_S
    stale_after_s: float | None = None
    #: background load kept on the target (``load = "decode:2"``, ``--load``); None:
    #: none, the default (docs/load.md says what a load costs the target)
    load: LoadSpec | None = None
    gpu_metrics_url: str | None = None
    gpus: str | None = None
    #: the OTLP trace receiver this target's server sends its spans to (``otlp_listen``,
    #: ``--otlp-listen``) and the resource attribute value naming it there
    #: (``otlp_service``; default: its label and host:port), docs/users.md
    otlp_listen: str | None = None
    otlp_service: str | None = None
    #: the TTFT objectives (``slo``, ``model.slo``): ``Objective`` or preset items
    slo: tuple[SloItem, ...] = ()
    #: a target that is a path: ``url`` is the router, these the workers' base URLs
    #: (``prefill`` / ``decode``; both or neither, docs/disaggregated.md)
    prefill: str | None = None
    decode: str | None = None
    #: the service-discovery entry this target came from, exactly as its source wrote
    #: it (Prometheus' ``__address__``); "" for a command-line or TOML target
    entry: str = ""

    @property
    def shard_key(self) -> str:
        """What ``--shard`` hashes (``discovery.Shard``): the discovery entry as written,
        else the ``url`` as given -- the server's address, never its name, so a
        Prometheus ``hashmod`` on ``__address__`` routes its ``/probe`` scrape to the
        replica that holds it, and a rename keeps it where it is.  Hashed, never shown."""
        return self.entry or self.url

    @property
    def lookup_names(self) -> tuple[str, ...]:
        """The values a ``/probe?target=`` may name it by: its label, its URL as shown
        and as configured, and its discovery entry (what a Prometheus job reading the
        same file sends); lookup keys only, never written anywhere."""
        return tuple(k for k in (self.label, self.shown_url, self.url, self.entry) if k)

    @property
    def shown_url(self) -> str:
        """The URL as it may be shown anywhere (``redact.display_url``: no password, no
        secret query value)."""
        return display_url(self.url) or ""

    @property
    def label(self) -> str:
        """The ``target`` label value: the name, else the shown URL (never a secret;
        it also names the run file and every log line).  A name holding a URL with
        credentials (the URL pasted as the name) shows them masked too."""
        return (scrub_secrets(self.name) or "") if self.name else self.shown_url

    @property
    def stale_window_s(self) -> float:
        """Seconds after which the window fit is stale (``stale_after``, else 4 intervals)."""
        return self.stale_after_s if self.stale_after_s is not None else STALE_INTERVALS * self.interval_s

    @property
    def slug(self) -> str:
        """A file-name-safe form of the label (run file names)."""
        s = re.sub(r"^[a-z]+://", "", self.label)
        return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("_.") or "target"

    @property
    def analysis(self) -> AnalysisOptions:
        """How the window is analysed: the robust fit over ``window`` probes, with the
        target's roofline inputs and objectives."""
        return AnalysisOptions(window=self.window, roofline=self.roofline, slo=self.slo)


#: Every key a target takes (file and command line) -> where it goes: (record, field)
#: pairs, record "" = the TargetConfig itself.  ``model`` is both the model requested
#: and the name the roofline looks up, as on the command line.
KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "url": (("", "url"),), "name": (("", "name"),), "lengths": (("", "lengths"),),
    "gpu_metrics_url": (("", "gpu_metrics_url"),), "gpus": (("", "gpus"),),
    "interval": (("", "interval_s"),), "window": (("", "window"),),
    "api": (("probe", "api"),), "model": (("probe", "model"), ("roofline", "model")),
    "api_key_env": (("probe", "api_key_env"),), "timeout": (("probe", "timeout_s"),),
    "insecure": (("probe", "insecure"),),
    "expected_throughput": (("", "expected_throughput"),), "baseline_run": (("", "baseline_run"),),
    "hang_after": (("", "hang_after_s"),), "stale_after": (("", "stale_after_s"),),
    "load": (("", "load"),),
    "otlp_listen": (("", "otlp_listen"),), "otlp_service": (("", "otlp_service"),),
    "slo": (("", "slo"),), "prefill": (("", "prefill"),), "decode": (("", "decode"),),
    **{k: (("roofline", k),) for k in ("gpu", "peak_tflops", "bandwidth_tbs", "dtype",
                                       "params", "layers", "hidden", "attn_width",
                                       "model_config", "efficiency")},
}
_FORBIDDEN = {"api_key", "key", "token", "password", "authorization"}
_FLOATS = ("interval", "timeout", "peak_tflops", "bandwidth_tbs", "params", "efficiency",
           "expected_throughput", "hang_after", "stale_after")


def target(url: str, base: TargetConfig | None = None, **keys: Any) -> TargetConfig:
    """A TargetConfig from ``base`` (default: every default) with ``keys`` set, keys
    named as in the TOML file (``interval``, ``timeout``, ``gpu``, ...; see ``KEYS``).
    Not validated: pass it to ``check``.

    Raises:
        ValueError: an unknown key.
    """
    cfg = replace(base or TargetConfig(url=url), url=url)
    unknown = sorted(set(keys) - set(KEYS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(KEYS))})")
    top: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {"probe": {}, "roofline": {}}
    for k, v in keys.items():
        for record, name in KEYS[k]:
            (parts[record] if record else top)[name] = v
    if "model_config" in parts["roofline"]:  # a new file: read again in check()
        parts["roofline"].update(config_shape=None, config_problem=None)
    return replace(cfg, **top, probe=replace(cfg.probe, **parts["probe"]),
                   roofline=replace(cfg.roofline, **parts["roofline"]))


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _value(cfg: TargetConfig, key: str) -> Any:
    """The value of TOML key ``key`` in ``cfg`` (``KEYS``: its first place)."""
    record, name = KEYS[key][0]
    return getattr(getattr(cfg, record) if record else cfg, name)


def check(cfg: TargetConfig, where: str | None = None) -> TargetConfig:
    """Validate one target: every key by type and range (``model.limits``, the same
    ranges as the command-line flags), then what ties keys together.  Returns it with
    ``lengths`` sorted and unique and its ``model_config`` file read (once, here:
    ``options.read_model_config``).

    Raises:
        ValueError: naming the target (``where``, default "target 'LABEL'"), the key
        and the range it must be in.
    """
    if where is None:
        named = isinstance(cfg.name, str) and isinstance(cfg.url, str)
        where = f"target {cfg.label if named else '?'!r}"
    for key in KEYS:
        value = _value(cfg, key)
        if key == "name" and value == "":
            continue  # unnamed: the label is the URL
        try:
            limits.check(key, value)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    problem = url_problem(cfg.url)
    if problem:
        raise ValueError(f"{where}: url {cfg.shown_url!r}: {problem}")
    if cfg.probe.api not in ("completions", "chat"):
        raise ValueError(f"{where}: api must be 'completions' or 'chat', not {cfg.probe.api!r}")
    if not cfg.lengths or any(not isinstance(n, int) or isinstance(n, bool) or n <= 0
                              for n in cfg.lengths):
        raise ValueError(f"{where}: lengths must be positive integers")
    for k, v in (("interval", cfg.interval_s), ("timeout", cfg.probe.timeout_s),
                 ("hang_after", cfg.hang_after_s), ("stale_after", cfg.stale_after_s)):
        if not _positive(v) and not (k == "stale_after" and v is None):
            raise ValueError(f"{where}: {k} must be a positive number of seconds")
    e = cfg.expected_throughput
    if e is not None and e != "roofline" and not _positive(e):
        raise ValueError(f"{where}: expected_throughput must be prompt tokens/s (a positive "
                         f"number) or \"roofline\", not {e!r}")
    if e is not None and cfg.baseline_run:
        raise ValueError(f"{where}: give expected_throughput or baseline_run, not both")
    if cfg.baseline_run is not None and (not isinstance(cfg.baseline_run, str)
                                         or not cfg.baseline_run):
        raise ValueError(f"{where}: baseline_run must be the path of a run file")
    if cfg.interval_s < MIN_INTERVAL_S:
        raise ValueError(f"{where}: interval must be >= {MIN_INTERVAL_S} s")
    if not isinstance(cfg.window, int) or isinstance(cfg.window, bool) or cfg.window < 3:
        raise ValueError(f"{where}: window must be an integer >= 3 probes")
    if cfg.gpu_metrics_url is not None:
        page = cfg.gpu_metrics_url
        if not isinstance(page, str) or not re.match(r"https?://[^/\s]+", page):
            shown = display_url(page) if isinstance(page, str) else page
            raise ValueError(f"{where}: gpu_metrics_url must be an http(s) URL, not {shown!r}")
    if cfg.gpus is not None and (not isinstance(cfg.gpus, str)
                                 or not re.fullmatch(r"((amd|intel|nvidia):)?[\w-]+(,[\w-]+)*", cfg.gpus)):
        raise ValueError(f"{where}: gpus must be GPU indices or UUIDs such as \"0,1\", "
                         "with an optional vendor prefix (\"amd:0\")")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", cfg.probe.api_key_env or ""):
        raise ValueError(f"{where}: api_key_env must be an environment variable name")
    if cfg.load is not None and not isinstance(cfg.load, LoadSpec):
        raise ValueError(f"{where}: load must be a load spec such as \"decode:2\"")
    _check_otlp(cfg, where)
    _check_path(cfg, where)
    roof = cfg.roofline
    if roof.gpu is not None and roof.peak_tflops is None and lookup_gpu(roof.gpu) is None:
        raise ValueError(f"{where}: gpu = {roof.gpu[:60]!r} is not in the catalog (known: "
                         f"{', '.join(known_names()['gpus'])}); give peak_tflops instead")
    if roof.model_config and roof.config_shape is None and roof.config_problem is None:
        roof = read_model_config(roof)
    return replace(cfg, lengths=tuple(sorted(set(cfg.lengths))), roofline=roof)


def _check_otlp(cfg: TargetConfig, where: str) -> None:
    """``otlp_listen`` is HOST:PORT, ``otlp_service`` a non-empty string.  Raises ValueError."""
    from prefilltui.measure.otlp import parse_listen

    if cfg.otlp_listen is not None:
        try:
            if not isinstance(cfg.otlp_listen, str):
                raise ValueError("not a string")
            parse_listen(cfg.otlp_listen)
        except ValueError as e:
            raise ValueError(f"{where}: otlp_listen must be HOST:PORT ({e})") from None
    if cfg.otlp_service is not None and (not isinstance(cfg.otlp_service, str)
                                         or not cfg.otlp_service.strip()):
        raise ValueError(f"{where}: otlp_service must be a non-empty string")


def _check_path(cfg: TargetConfig, where: str) -> None:
    """``prefill`` and ``decode`` together, each a server URL.  Raises ValueError."""
    if (cfg.prefill is None) != (cfg.decode is None):
        raise ValueError(f"{where}: prefill and decode go together (a path has both workers)")
    for key, url in (("prefill", cfg.prefill), ("decode", cfg.decode)):
        if url is None:
            continue
        problem = url_problem(url) if isinstance(url, str) else "not a string"
        if problem:
            shown = display_url(url) if isinstance(url, str) else url
            raise ValueError(f"{where}: {key} {shown!r}: {problem}")


def path_options(cfg: TargetConfig) -> PathOptions:
    """The target's ``PathOptions`` (none for a single server)."""
    return PathOptions(prefill=cfg.prefill, decode=cfg.decode)


def otlp_options(cfg: TargetConfig) -> OtlpOptions:
    """The target's ``OtlpOptions``: its receiver, and its label and ``otlp_service`` as
    the names that pick its spans."""
    names = tuple(n for n in (cfg.label, cfg.otlp_service) if n)
    return OtlpOptions(listen=cfg.otlp_listen, names=names)


def _coerce(d: dict[str, Any], where: str) -> dict[str, Any]:
    bad = sorted(set(d) & _FORBIDDEN)
    if bad:
        raise ValueError(f"{where}: {bad[0]!r} is not read from files: put the key in an "
                         "environment variable and name it with api_key_env")
    unknown = sorted(set(d) - set(KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(KEYS))})")
    out = dict(d)
    for k, v in d.items():  # by type and range here, so the message names the file
        try:
            out[k] = limits.check(k, v)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    for k in _FLOATS:
        if isinstance(out.get(k), int) and not isinstance(out.get(k), bool):
            out[k] = float(out[k])
    if "slo" in out:  # "ttft=2s@p99" or a list of them -> objectives (model.slo)
        out["slo"] = slo_items(out["slo"], where)
    if "load" in out:  # "decode:2" -> a LoadSpec (model.loadspec)
        try:
            out["load"] = parse_load(out["load"] if isinstance(out["load"], str) else "")
        except ValueError as e:
            raise ValueError(f"{where}: load: {e}") from None
    return out


def slo_items(value: Any, where: str) -> tuple[SloItem, ...]:
    """The TOML ``slo``: one objective ("ttft=2s@p99", "mlperf-server") or a list of
    them, parsed (``model.slo.parse_objective``).

    Raises:
        ValueError: naming ``where`` and the objective that does not parse.
    """
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or len(items) > 16:
        raise ValueError(f"{where}: slo must be an objective such as \"ttft=2s@p99\" or a "
                         "list of up to 16 of them")
    out = []
    for item in items:
        try:
            out.append(parse_objective(item, source="config"))
        except ValueError as e:
            raise ValueError(f"{where}: slo: {e}") from None
    return tuple(out)


def _relative_to(path: str, d: dict[str, Any]) -> dict[str, Any]:
    """``baseline_run`` read relative to the TOML file's directory (``~`` expanded)."""
    run = d.get("baseline_run")
    if isinstance(run, str) and run:
        d["baseline_run"] = str(Path(path).parent / Path(run).expanduser())
    return d


def load_toml(path: str, base: TargetConfig | None = None) -> list[TargetConfig]:
    """Targets from a TOML file (layout in the module docstring).  ``base`` carries the
    command-line defaults (its ``url`` is ignored).

    Raises:
        OSError: the file cannot be read; ValueError: bad TOML or a bad field (the
        message names the target and the field).
    """
    # bounded, BOM dropped, errors name the file; a FIFO read as --config <(...) gives it
    doc = localfile.load_toml(path, pipe=True)
    extra = sorted(set(doc) - {"defaults", "target"})
    if extra:
        raise ValueError(f"{path}: unknown table {extra[0]!r} (expected [defaults] and [[target]])")
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise ValueError(f"{path}: [defaults] must be a table")
    base = base or TargetConfig(url="http://unset")
    kw = _relative_to(path, _coerce(dict(defaults), f"{path} [defaults]"))
    base = target(kw.pop("url", base.url), base, **kw)
    targets = doc.get("target", [])
    if not isinstance(targets, list) or not all(isinstance(t, dict) for t in targets):
        raise ValueError(f"{path}: targets must be [[target]] tables")
    out = []
    for i, t in enumerate(targets, 1):
        where = f"{path} target {i}"
        if "url" not in t:
            raise ValueError(f"{where}: url is missing")
        keys = {"name": "", **_relative_to(path, _coerce(t, where))}
        out.append(check(target(keys.pop("url"), base, **keys), where))
    return out


def unique(targets: list[TargetConfig]) -> list[TargetConfig]:
    """The targets, refusing two with the same label (their series would collide) or
    the same run file name.

    Raises:
        ValueError: on a duplicate label.
    """
    seen: set[str] = set()
    slugs: dict[str, str] = {}
    for t in targets:
        if t.label in seen:
            raise ValueError(f"target {t.label!r} is listed twice (give each a distinct name)")
        if t.slug in slugs:
            raise ValueError(f"targets {slugs[t.slug]!r} and {t.label!r} would share the run file "
                             f"{t.slug}.jsonl (give them distinct names)")
        seen.add(t.label)
        slugs[t.slug] = t.label
    return targets
