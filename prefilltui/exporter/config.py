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

import re
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from prefilltui.measure.server import url_problem
from prefilltui.model import limits
from prefilltui.model.catalog import known_names, lookup_gpu
from prefilltui.model.redact import display_url

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

ApiKind = Literal["completions", "chat"]


@dataclass(frozen=True, slots=True)
class TargetConfig:
    """One server to probe.  Times in seconds, lengths in prompt tokens.

    The roofline fields (``gpu``, ``peak_tflops``, ``params``, ...) have the meaning
    of the sweep's flags of the same names; without a peak there is no MFU.
    """

    url: str
    name: str = ""
    api: ApiKind = "completions"
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    interval: float = DEFAULT_INTERVAL_S
    timeout: float = 60.0
    window: int = DEFAULT_WINDOW
    insecure: bool = False
    gpu: str | None = None
    peak_tflops: float | None = None
    bandwidth_tbs: float | None = None
    dtype: str = "bf16"
    params: float | None = None
    layers: int | None = None
    hidden: int | None = None
    attn_width: int | None = None
    model_config: str | None = None
    efficiency: float = 0.5

    @property
    def shown_url(self) -> str:
        """The URL as it may be shown anywhere (``redact.display_url``: no password, no
        secret query value)."""
        return display_url(self.url) or ""

    @property
    def label(self) -> str:
        """The ``target`` label value: the name, else the shown URL (never a secret;
        it also names the run file and every log line)."""
        return self.name or self.shown_url

    @property
    def slug(self) -> str:
        """A file-name-safe form of the label (run file names)."""
        s = re.sub(r"^[a-z]+://", "", self.label)
        return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("_.") or "target"


_FIELDS = {f.name for f in fields(TargetConfig)}
_FORBIDDEN = {"api_key", "key", "token", "password", "authorization"}


def check(cfg: TargetConfig, where: str | None = None) -> TargetConfig:
    """Validate every field of one target by type and range (``model.limits``);
    returns it with ``lengths`` sorted and unique, and ints given for numbers as floats.

    Raises:
        ValueError: naming the target (``where``, default "target 'LABEL'"), the key
        and the range it must be in.
    """
    if where is None:
        named = isinstance(cfg.name, str) and isinstance(cfg.url, str)
        where = f"target {cfg.label if named else '?'!r}"
    changes: dict[str, Any] = {}
    for f in fields(TargetConfig):
        value = getattr(cfg, f.name)
        if f.name == "name" and value == "":
            continue  # unnamed: the label is the URL
        try:
            checked = limits.check(f.name, value)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        if checked is not value:
            changes[f.name] = checked
    cfg = replace(cfg, **changes)
    problem = url_problem(cfg.url)
    if problem:
        raise ValueError(f"{where}: url {cfg.shown_url!r}: {problem}")
    if cfg.interval < MIN_INTERVAL_S:
        raise ValueError(f"{where}: interval must be >= {MIN_INTERVAL_S} s")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", cfg.api_key_env or ""):
        raise ValueError(f"{where}: api_key_env must be an environment variable name")
    if cfg.gpu is not None and cfg.peak_tflops is None and lookup_gpu(cfg.gpu) is None:
        raise ValueError(f"{where}: gpu = {cfg.gpu[:60]!r} is not in the catalog (known: "
                         f"{', '.join(known_names()['gpus'])}); give peak_tflops instead")
    if cfg.model_config is not None and not Path(cfg.model_config).expanduser().is_file():
        raise ValueError(f"{where}: model_config = {cfg.model_config[:200]!r}: no such file")
    return cfg


def _coerce(d: dict[str, Any], where: str) -> dict[str, Any]:
    bad = sorted(set(d) & _FORBIDDEN)
    if bad:
        raise ValueError(f"{where}: {bad[0]!r} is not read from files: put the key in an "
                         "environment variable and name it with api_key_env")
    unknown = sorted(set(d) - _FIELDS)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_FIELDS))})")
    out = dict(d)
    for k, v in d.items():  # by type and range here, so the message names the file
        try:
            out[k] = limits.check(k, v)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
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
    base = replace(base, **_coerce({k: v for k, v in defaults.items()}, f"{path} [defaults]"))
    targets = doc.get("target", [])
    if not isinstance(targets, list) or not all(isinstance(t, dict) for t in targets):
        raise ValueError(f"{path}: targets must be [[target]] tables")
    out = []
    for i, t in enumerate(targets, 1):
        where = f"{path} target {i}"
        if "url" not in t:
            raise ValueError(f"{where}: url is missing")
        try:
            out.append(check(replace(base, **{"name": "", **_coerce(t, where)}), where))
        except TypeError as e:
            raise ValueError(f"{where}: {e}") from None
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
