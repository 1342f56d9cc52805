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

API keys come only from the environment (``api_key_env`` names the variable); a key
written in the file is refused, so it never sits in a config file or a process list.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, replace
from typing import Any

from prefilltui.measure.server import url_problem
from prefilltui.options import (AnalysisOptions, ProbeOptions, RooflineSpec, read_model_config)

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


@dataclass(frozen=True, slots=True)
class TargetConfig:
    """One server to probe: its ``probe`` options and ``roofline`` inputs (the same
    types, and the same defaults, as every other command's), the lengths in prompt
    tokens, the shortest gap between probe starts (``interval_s``) and the window.

    Build one from file or command-line keys with ``target()``; ``check()`` validates
    it.  The per-probe time cap is ``probe.timeout_s``, ``defaults.TIMEOUT_S`` unless set:
    one cap for every tool, so a probe the sweep would wait for is not a failure here.
    """

    url: str
    name: str = ""
    probe: ProbeOptions = ProbeOptions()
    roofline: RooflineSpec = RooflineSpec()
    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    interval_s: float = DEFAULT_INTERVAL_S
    window: int = DEFAULT_WINDOW

    @property
    def label(self) -> str:
        """The ``target`` label value."""
        return self.name or self.url

    @property
    def slug(self) -> str:
        """A file-name-safe form of the label (run file names)."""
        s = re.sub(r"^[a-z]+://", "", self.label)
        return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("_.") or "target"

    @property
    def analysis(self) -> AnalysisOptions:
        """How the window is analysed: the robust fit over ``window`` probes, with the
        target's roofline inputs."""
        return AnalysisOptions(window=self.window, roofline=self.roofline)


#: Every key a target takes (file and command line) -> where it goes: (record, field)
#: pairs, record "" = the TargetConfig itself.  ``model`` is both the model requested
#: and the name the roofline looks up, as on the command line.
KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "url": (("", "url"),), "name": (("", "name"),), "lengths": (("", "lengths"),),
    "interval": (("", "interval_s"),), "window": (("", "window"),),
    "api": (("probe", "api"),), "model": (("probe", "model"), ("roofline", "model")),
    "api_key_env": (("probe", "api_key_env"),), "timeout": (("probe", "timeout_s"),),
    "insecure": (("probe", "insecure"),),
    **{k: (("roofline", k),) for k in ("gpu", "peak_tflops", "bandwidth_tbs", "dtype",
                                       "params", "layers", "hidden", "attn_width",
                                       "model_config", "efficiency")},
}
_FORBIDDEN = {"api_key", "key", "token", "password", "authorization"}
_FLOATS = ("interval", "timeout", "peak_tflops", "bandwidth_tbs", "params", "efficiency")


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


def check(cfg: TargetConfig) -> TargetConfig:
    """Validate one target; returns it with ``lengths`` sorted and unique and its
    ``model_config`` file read (once, here: ``options.read_model_config``).

    Raises:
        ValueError: naming the target and the bad field.
    """
    where = f"target {cfg.label!r}"
    problem = url_problem(cfg.url)
    if problem:
        raise ValueError(f"{where}: url {cfg.url!r}: {problem}")
    if cfg.probe.api not in ("completions", "chat"):
        raise ValueError(f"{where}: api must be 'completions' or 'chat', not {cfg.probe.api!r}")
    if not cfg.lengths or any(not isinstance(n, int) or isinstance(n, bool) or n <= 0
                              for n in cfg.lengths):
        raise ValueError(f"{where}: lengths must be positive integers")
    for k, v in (("interval", cfg.interval_s), ("timeout", cfg.probe.timeout_s)):
        if not _positive(v):
            raise ValueError(f"{where}: {k} must be a positive number of seconds")
    if cfg.interval_s < MIN_INTERVAL_S:
        raise ValueError(f"{where}: interval must be >= {MIN_INTERVAL_S} s")
    if not isinstance(cfg.window, int) or isinstance(cfg.window, bool) or cfg.window < 3:
        raise ValueError(f"{where}: window must be an integer >= 3 probes")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", cfg.probe.api_key_env or ""):
        raise ValueError(f"{where}: api_key_env must be an environment variable name")
    roof = cfg.roofline
    if roof.model_config and roof.config_shape is None and roof.config_problem is None:
        roof = read_model_config(roof)
    return replace(cfg, lengths=tuple(sorted(set(cfg.lengths))), roofline=roof)


def _coerce(d: dict[str, Any], where: str) -> dict[str, Any]:
    bad = sorted(set(d) & _FORBIDDEN)
    if bad:
        raise ValueError(f"{where}: {bad[0]!r} is not read from files: put the key in an "
                         "environment variable and name it with api_key_env")
    unknown = sorted(set(d) - set(KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(KEYS))})")
    out = dict(d)
    if "lengths" in out:
        if not isinstance(out["lengths"], list):
            raise ValueError(f"{where}: lengths must be a list of integers")
        out["lengths"] = tuple(out["lengths"])
    for k in _FLOATS:
        if isinstance(out.get(k), int) and not isinstance(out.get(k), bool):
            out[k] = float(out[k])
    return out


def load_toml(path: str, base: TargetConfig | None = None) -> list[TargetConfig]:
    """Targets from a TOML file (layout in the module docstring).  ``base`` carries the
    command-line defaults (its ``url`` is ignored).

    Raises:
        OSError: the file cannot be read; ValueError: bad TOML or a bad field (the
        message names the target and the field).
    """
    with open(path, "rb") as f:
        try:
            doc = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{path}: {e}") from None
    extra = sorted(set(doc) - {"defaults", "target"})
    if extra:
        raise ValueError(f"{path}: unknown table {extra[0]!r} (expected [defaults] and [[target]])")
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise ValueError(f"{path}: [defaults] must be a table")
    base = base or TargetConfig(url="http://unset")
    kw = _coerce(dict(defaults), f"{path} [defaults]")
    base = target(kw.pop("url", base.url), base, **kw)
    targets = doc.get("target", [])
    if not isinstance(targets, list) or not all(isinstance(t, dict) for t in targets):
        raise ValueError(f"{path}: targets must be [[target]] tables")
    out = []
    for i, t in enumerate(targets, 1):
        where = f"{path} target {i}"
        if "url" not in t:
            raise ValueError(f"{where}: url is missing")
        keys = {"name": "", **_coerce(t, where)}
        out.append(check(target(keys.pop("url"), base, **keys)))
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
