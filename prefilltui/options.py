"""Every option of prefilltui as a frozen record, built once at the edge.

``commands/`` builds them from the parsed command line (``commands/common.py``), the
exporter from its TOML file (``exporter/config.py``); below that, code reads typed
fields only: no argparse object, no ``getattr`` with a default.  Each default is set
once, in ``model.defaults`` (or next to the option here when only one command has it),
and is also the documented default of its flag.

- ``ProbeOptions``     how one probe is sent (API flavour, model id, key variable, TLS,
                       per-probe time cap).
- ``SweepDesign``      which prompt lengths, how often, how spaced, when to stop
                       (lengths, repeats, warm-up, pacing, depth, until-CI, budget) and
                       the exporter's rate ceiling.
- ``TelemetryOptions`` what the GPU/CPU sampler watches.
- ``RunFileOptions``   where the run file goes and how it rotates.
- ``AnalysisOptions``, ``RooflineSpec`` (``model.spec``) the fit shown and the roofline
                       inputs: defined in the model, which reads them, and re-exported
                       here so this module names every option.
- ``LoadOptions``      the background load (``--load``, ``--load-levels``), off by default.
- ``OtlpOptions``      where the server's OpenTelemetry traces arrive (``--otlp-listen``)
                       and the names that pick this target's spans.
- ``DisplayOptions``   what only the TUI reads.
- ``FleetOptions``     how the fleet overview spaces its targets' probes, and its columns.
- ``SessionOptions``   what ``session.build_session`` needs: the records above together.

Seconds in data (``timeout_s``, ``pause_s``), tokens for lengths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from prefilltui.model import defaults
from prefilltui.model.loadspec import LoadSpec
from prefilltui.model.spec import AnalysisOptions, RooflineSpec, read_model_config

__all__ = ["ApiKind", "ProbeOptions", "SweepDesign", "TelemetryOptions", "RunFileOptions",
           "LoadOptions", "LoadSpec", "OtlpOptions", "PathOptions", "DisplayOptions", "FleetOptions",
           "SessionOptions",
           "AnalysisOptions", "RooflineSpec",
           "read_model_config", "API_KEY_ENV"]

#: Which endpoint a probe uses: /v1/completions, /v1/chat/completions or /v1/responses.
ApiKind = Literal["completions", "chat", "responses"]
#: The environment variable the API key is read from unless ``--api-key-env`` names another.
API_KEY_ENV = "OPENAI_API_KEY"


@dataclass(frozen=True, slots=True)
class ProbeOptions:
    """How one probe is sent.

    api: the endpoint; model: the model id to request (None: the first of /v1/models);
    api_key_env: the environment variable holding the key (the key itself is read by
    ``session.read_api_key`` and never stored here); insecure: skip TLS verification;
    proxy: the proxy URL or "none" (None: the environment's proxy variables,
    ``measure.proxy``); timeout_s: the per-probe time cap in seconds
    (``defaults.TIMEOUT_S``).
    """

    api: ApiKind = "completions"
    model: str | None = None
    api_key_env: str = API_KEY_ENV
    insecure: bool = False
    proxy: str | None = None
    timeout_s: float = defaults.TIMEOUT_S


@dataclass(frozen=True, slots=True)
class SweepDesign:
    """Which prompt lengths to probe, how often and how spaced, and when to stop.

    lengths: explicit prompt lengths in tokens, else ``points`` log-spaced lengths from
        ``min_tokens`` to ``max_tokens`` (``session.sweep_lengths``).
    repeats: probes per length; warmup: warm-up probes kept out of the fit.
    pause_s: idle after each probe in seconds (None: the command's default pacing, see
        ``session.session_pacing``); duty: the busiest share of time probes may take.
    seed: the seed of the randomized order and of the prompts (None: random).
    until_ci_pct: keep probing until the throughput's 95 % interval is within +-this %;
    budget_probes / budget_s: stop after this many probes / seconds.
    depths: context depths of the ``--depth`` phase (tokens of cached prefix; 0 = cold).
    interval_s / jitter / keep_results: the exporter's rate ceiling (probe starts at
        least ``interval_s`` apart plus up to ``jitter`` of it) and the results a
        long-running runner keeps in memory (``measure.sweep.runner.SweepConfig``).
    """

    lengths: tuple[int, ...] | None = None
    min_tokens: int = defaults.MIN_TOKENS
    max_tokens: int = defaults.MAX_TOKENS
    points: int = defaults.POINTS
    repeats: int = defaults.REPEATS
    warmup: int = defaults.WARMUP
    pause_s: float | None = None
    duty: float | None = None
    seed: int | None = None
    until_ci_pct: float | None = None
    budget_probes: int | None = None
    budget_s: float | None = None
    depths: tuple[int, ...] = ()
    interval_s: float | None = None
    jitter: float = 0.0
    keep_results: int | None = None


@dataclass(frozen=True, slots=True)
class TelemetryOptions:
    """What the sampler watches: ``enabled`` (``--no-telemetry`` turns it off), ``gpus``
    (indices "0,1", a vendor prefix "amd:0" / "intel:0" / "nvidia:0"; None: every
    visible GPU of the first vendor found), ``sample_hz``, ``processes``
    ((label, pid) pairs shown beside the CPU gauge, e.g. the demo's llama-server), and
    ``gpu_metrics_url`` (``--gpu-metrics-url``: the server's GPUs from its
    dcgm-exporter, nvitop or AMD device-metrics-exporter page; without it a server on another host has
    no GPU source, ``measure.telemetry.remote``)."""

    enabled: bool = True
    gpus: str | None = None
    sample_hz: float = defaults.SAMPLE_HZ
    processes: tuple[tuple[str, int], ...] = ()
    gpu_metrics_url: str | None = None


@dataclass(frozen=True, slots=True)
class RunFileOptions:
    """The run file: ``path`` (None: a new file in the user data dir), and size rotation
    (``max_bytes`` None: one file; else rotate at that size keeping ``keep`` old files)."""

    path: str | None = None
    max_bytes: int | None = None
    keep: int = 3


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """The background load (docs/load.md): ``spec`` (``--load``; None: no load, the
    default: nothing is sent unasked) and ``levels`` (``--load-levels``: the sweep runs
    once per level, decode streams or requests/s as the spec's kind says); ``search``
    (``--rate-search``): the rate search's bounds instead of a sweep."""

    spec: LoadSpec | None = None
    levels: tuple[float, ...] = ()
    #: ``--rate-search LO:HI`` (requests/s): the highest rate holding the objective,
    #: each step ``search_dwell_s`` long (``commands/rate_search``); None: no search
    search: tuple[float, float] | None = None
    search_dwell_s: float = 20.0

    def effective(self) -> LoadSpec | None:
        """The load the session runs: the spec at the highest level when levels are
        given (a decode load when no spec is), else the spec; None for no load.

        Raises:
            ValueError: a level the spec's kind does not take (``LoadSpec.at``).
        """
        if self.search is not None and self.spec is not None:
            return self.spec.at(self.search[0])  # the search's first step
        if not self.levels:
            return self.spec
        return (self.spec or LoadSpec("decode", 1.0)).at(max(self.levels))


@dataclass(frozen=True, slots=True)
class OtlpOptions:
    """The OTLP trace receiver (docs/users.md): ``listen`` is ``HOST:PORT`` of the
    receiver the server's spans are sent to (``--otlp-listen``; None: none, the
    default), shared by every session of the process that names the same address;
    ``names``: resource attribute values (``service.name`` ...) that name this target
    when several share one receiver (the target's label and ``host:port`` are added)."""

    listen: str | None = None
    names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DisplayOptions:
    """What only the TUI reads: ``theme`` (a theme name or a theme TOML file)."""

    theme: str | None = None


@dataclass(frozen=True, slots=True)
class FleetOptions:
    """How the fleet overview watches several targets (``prefilltui URL URL ...``).

    interval_s: each target's shortest gap between probe starts (``--interval``; a TOML
    target's ``interval`` wins); fleet_rate: the most probe starts per second across
    the fleet (``--fleet-rate``: each gap is stretched to targets / rate); ref_tokens:
    the TTFT column's prompt length; itl_goal_s: the advisor's ITL goal; run_dir: the
    directory of the per-target run files (None: a new one in the user data dir).
    """

    interval_s: float = defaults.FLEET_INTERVAL_S
    fleet_rate: float = defaults.FLEET_RATE
    ref_tokens: int = defaults.REF_TOKENS
    itl_goal_s: float = defaults.ITL_GOAL_S
    run_dir: str | None = None


@dataclass(frozen=True, slots=True)
class PathOptions:
    """A target that is a path (docs/disaggregated.md): the probes' URL is the router;
    ``prefill`` / ``decode`` the workers' base URLs (both or neither; None: a single
    server)."""

    prefill: str | None = None
    decode: str | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.prefill and self.decode)


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """Everything ``session.build_session`` builds a measuring session from."""

    probe: ProbeOptions = ProbeOptions()
    design: SweepDesign = SweepDesign()
    telemetry: TelemetryOptions = TelemetryOptions()
    run_file: RunFileOptions = RunFileOptions()
    analysis: AnalysisOptions = AnalysisOptions()
    load: LoadOptions = LoadOptions()
    otlp: OtlpOptions = OtlpOptions()
    path: PathOptions = PathOptions()
