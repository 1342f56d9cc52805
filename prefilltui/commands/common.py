"""Argument groups shared by the commands that probe a server or analyse a run, the
builders that turn their parsed flags into typed options, and ``err`` / ``say`` (every
command's text sinks).  The flags' value types are in ``argtypes``.

Precedence for every setting: command-line flag > environment variable (where one
is named) > the server's own metadata > the built-in catalog.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, get_args

from prefilltui.commands.argtypes import (_depth_list, _duty, _int_list, _load_levels, _load_spec,
                                          _positive_int, _sample_hz, _until_pct, otlp_listen,
                                          parse_budget, ranged, slo_objective, _rate_range,
                                          _positive_float, server_url)
from prefilltui.measure.sweep import TIME_CAP_S
from prefilltui.exit_codes import ExitCode
from prefilltui.model import defaults
from prefilltui.model.sanitize import clean
from prefilltui.model.types import FIT_METHODS, Dtype
from prefilltui.options import (API_KEY_ENV, AnalysisOptions, LoadOptions, OtlpOptions,
                                PathOptions, ProbeOptions, RooflineSpec, RunFileOptions, SessionOptions, SweepDesign,
                                TelemetryOptions, read_model_config)


def err(message: str) -> None:
    """Print ``prefilltui: <message>`` on stderr (the one-line error of every command;
    further lines of ``message`` are indented under it with ``  | ``).  Control
    characters are escaped (``model.sanitize.clean``): messages quote servers."""
    first, _, rest = clean(message, multiline=True).partition("\n")
    print(f"prefilltui: {first}", file=sys.stderr)
    for line in rest.splitlines():
        print(f"  | {line}", file=sys.stderr)


def say(text: str, file=None) -> None:
    """Print a block of text output (progress, summary, report) with every control
    character but the newline escaped (``model.sanitize.clean``): the one sink of a
    command's text output, so nothing a server sent is executed by the terminal."""
    print(clean(text, multiline=True), file=sys.stdout if file is None else file, flush=True)


def add_server_args(p: argparse.ArgumentParser) -> None:
    """How to talk to the server: API flavour, model, auth, TLS, timeouts."""
    g = p.add_argument_group("server")
    g.add_argument("--api", choices=("completions", "chat", "responses"), default="completions",
                   help="endpoint: /v1/completions (default), /v1/chat/completions, or "
                        "/v1/responses (the Responses API)")
    g.add_argument("--model", help="model id to request (default: the first of /v1/models)")
    g.add_argument("--api-key-env", default=API_KEY_ENV, metavar="NAME",
                   help=f"environment variable holding the API key (default {API_KEY_ENV}); "
                        "the key is never printed, logged or written")
    g.add_argument("--insecure", action="store_true", help="skip TLS certificate verification")
    g.add_argument("--proxy", metavar="URL",
                   help="send every request through this proxy (http, https, socks5), or "
                        "'none' to go direct; default: HTTPS_PROXY / HTTP_PROXY / ALL_PROXY "
                        "and NO_PROXY from the environment, loopback servers always direct")
    g.add_argument("--timeout", type=ranged("timeout"), default=defaults.TIMEOUT_S, metavar="S",
                   help=f"per-probe time cap in seconds (default {defaults.TIMEOUT_S:g})")


def add_sweep_args(p: argparse.ArgumentParser, *, min_tokens: int = defaults.MIN_TOKENS,
                   max_tokens: int = defaults.MAX_TOKENS, points: int = defaults.POINTS) -> None:
    """Which prompt lengths to probe and how (defaults: log-spaced from a few tokens,
    so the fit's intercept is anchored by short prompts; see core.sweep)."""
    g = p.add_argument_group("sweep")
    g.add_argument("--lengths", type=_int_list, metavar="N,N,...",
                   help="explicit prompt lengths in tokens (overrides min/max/points)")
    g.add_argument("--min-tokens", type=ranged("lengths"), default=min_tokens, metavar="N",
                   help=f"shortest prompt in tokens (default {min_tokens}: short prompts "
                        "anchor the fixed cost TTFT(0))")
    g.add_argument("--max-tokens", type=ranged("lengths"), default=max_tokens, metavar="N",
                   help=f"longest prompt in tokens (default {max_tokens}; capped at the "
                        "server's context and, in sweep, demo and the live TUI, where one "
                        f"probe is expected to take over {TIME_CAP_S:g} s (the TUI's + and - "
                        "then set the range); --lengths is never capped by time)")
    g.add_argument("--points", type=ranged("points"), default=points, metavar="K",
                   help=f"number of log-spaced lengths between min and max (default {points})")
    g.add_argument("--repeats", type=ranged("repeats"), default=defaults.REPEATS, metavar="R",
                   help=f"probes per length (default {defaults.REPEATS})")
    g.add_argument("--warmup", type=ranged("warmup"), default=defaults.WARMUP, metavar="W",
                   help=f"warm-up probes, recorded but kept out of the fit (default "
                        f"{defaults.WARMUP})")
    g.add_argument("--pause", type=ranged("pause"), default=None, metavar="S",
                   help="seconds of idle after each probe; 0 = back-to-back (default: the "
                        "headless sweep 0; the TUI and demo 2 sampler periods or 2 s of "
                        "NVML averaging, whichever is longer, as the least gap under --duty)")
    g.add_argument("--duty", type=_duty, default=None, metavar="F",
                   help="busiest share of the time probes may take, 0 < F <= 1: idle after "
                        "each probe >= TTFT x (1-F)/F (default: the TUI and demo 0.5, idle >= "
                        "TTFT, so each spike on the gauges has a trough after it; the headless "
                        "sweep 1, or --pause alone: a fixed gap)")
    g.add_argument("--seed", type=int, default=None, help="seed for the randomized order")
    g.add_argument("--until-ci", type=_until_pct, metavar="PCT",
                   help="after the first round keep probing, where a repeat shrinks the "
                        "throughput interval most (every 4th repeat spread over the range), "
                        "until the prefill throughput's 95 %% interval is within +-PCT %% "
                        "(e.g. 2); see --budget")
    g.add_argument("--budget", type=parse_budget, metavar="N|TIME",
                   help="stop after N probes and/or a time (90s, 10m, 1h; e.g. 200,10m), "
                        "whether or not --until-ci's target was reached")
    g.add_argument("--out", metavar="FILE",
                   help="run file (JSONL; default: a new file in the user data dir)")


def add_depth_arg(p: argparse.ArgumentParser) -> None:
    """``--depth D,D,...``: prefill after a cached prefix of D tokens (headless sweep)."""
    p.add_argument("--depth", type=_depth_list, metavar="D,D,...",
                   help="after the sweep, measure prefill at these context depths: a "
                        "prefix of D tokens is sent once (cached), then probes add the "
                        "sweep's lengths as new tokens after it; cached tokens are "
                        "verified, and the slope vs depth is set against the formula's "
                        "attention term. Depth 0 is the sweep itself")


def add_hardware_args(p: argparse.ArgumentParser) -> None:
    """Roofline inputs: the GPU and the model shape (override the catalog)."""
    g = p.add_argument_group("hardware and model (roofline)")
    g.add_argument("--gpu", metavar="NAME", help="GPU catalog name (default: NVML's device name)")
    g.add_argument("--peak-tflops", type=ranged("peak_tflops"), metavar="T",
                   help="dense peak in TFLOP/s (overrides the catalog; needed for MFU on a CPU)")
    g.add_argument("--bandwidth-tbs", type=ranged("bandwidth_tbs"), metavar="B",
                   help="memory bandwidth in TB/s (overrides the catalog)")
    g.add_argument("--dtype", choices=get_args(Dtype), default=defaults.DTYPE,
                   help=f"datatype whose peak to use (default {defaults.DTYPE})")
    g.add_argument("--params", type=ranged("params"), metavar="P",
                   help="parameters doing matmuls (active params for MoE), e.g. 8.03e9")
    g.add_argument("--layers", type=ranged("layers"), metavar="L", help="transformer layers")
    g.add_argument("--hidden", type=ranged("hidden"), metavar="D", help="hidden size")
    g.add_argument("--attn-width", type=ranged("attn_width"), metavar="D_ATTN",
                   help="attention width heads*head_dim (default: hidden)")
    g.add_argument("--model-config", metavar="PATH",
                   help="a Hugging Face config.json to compute the model shape from")
    g.add_argument("--efficiency", type=ranged("efficiency"), default=defaults.EFFICIENCY,
                   metavar="F",
                   help=f"fraction of peak for the expected-time line "
                        f"(default {defaults.EFFICIENCY:g})")


def add_telemetry_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("telemetry")
    g.add_argument("--gpus", metavar="I,J", help="GPU indices to sample (default: all visible; "
                   "CUDA_VISIBLE_DEVICES is respected); a prefix amd:, intel: or nvidia: "
                   "picks the vendor (default: NVIDIA, else AMD, else Intel)")
    g.add_argument("--sample-hz", type=_sample_hz, default=defaults.SAMPLE_HZ, metavar="HZ",
                   help=f"GPU/CPU sampling rate (default {defaults.SAMPLE_HZ:g})")
    g.add_argument("--no-telemetry", action="store_true", help="do not sample GPU/CPU")
    g.add_argument("--gpu-metrics-url", metavar="URL",
                   help="read the server's GPUs from this dcgm-exporter, nvitop exporter or "
                        "AMD device-metrics-exporter page (e.g. http://HOST:9400/metrics); "
                        "without it only a server on this machine shows GPU gauges (this "
                        "machine's GPUs), another shows 'no GPU source'")


def add_analysis_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("analysis")
    g.add_argument("--fit", choices=FIT_METHODS, default=defaults.FIT_METHOD,
                   help="fit shown: robust (bisquare from a Theil-Sen start, default) or ordinary least squares")
    g.add_argument("--window", type=_positive_int, default=defaults.WINDOW, metavar="N",
                   help=f"sliding-window fit over the last N probes (default {defaults.WINDOW})")
    g.add_argument("--baseline", metavar="RUN.jsonl",
                   help="a saved run to compare the live fit against (drift warning)")
    g.add_argument("--slo", type=slo_objective, action="append", default=[],
                   metavar="OBJECTIVE",
                   help="a TTFT objective: ttft=2s@p99, ttft=500ms@p90 (s or ms, p50..p99.9), "
                        "or mlperf-server / mlperf-interactive (MLPerf Inference's limit for "
                        "the server's model); repeat for several (docs/slo.md)")


def add_load_args(p: argparse.ArgumentParser, *, levels: bool = False) -> None:
    """``--load`` (and, for the headless sweep, ``--load-levels``): background load on
    the target while probing.  Off unless given: a monitor never loads a server
    unasked (docs/load.md says what it costs the target)."""
    g = p.add_argument_group("background load (opt-in; docs/load.md)")
    g.add_argument("--load", type=_load_spec, metavar="SPEC",
                   help="keep load on the server while probing and measure what each "
                        "prefill costs it: decode:N (N decode streams: short prompts, long "
                        "outputs, restarted when they end; every token's arrival recorded) "
                        "or rate:R,tokens:L (Poisson arrivals, R requests/s of L-token "
                        "prompts); bounded: add ,requests:K and/or ,for:10m (default "
                        "5000 requests, 1h); probes under load never enter the idle fit")
    if levels:
        g.add_argument("--load-levels", type=_load_levels, metavar="L,L,...",
                       help="run the sweep once per load level (decode streams, or "
                            "requests/s with --load rate:...), e.g. 0,1,2,4,8: TTFT split "
                            "into queue/prefill/overhead, the fit, decode ITL p50/p99 and "
                            "stall per level, and where queueing takes over")
        g.add_argument("--rate-search", type=_rate_range, metavar="LO:HI",
                       help="with --load rate:... and --slo: instead of the sweep, find the "
                            "highest offered rate (requests/s, between LO and HI) whose "
                            "requests meet the objective, by bisection, each step "
                            "--rate-dwell seconds; prints each step's attainment with its "
                            "95 %% interval and the answer (docs/slo.md)")
        g.add_argument("--rate-dwell", type=_positive_float, default=20.0, metavar="S",
                       help="seconds each rate of --rate-search is offered (default 20)")


def run_app(app: Any, close: Callable[[], None]) -> int:
    """Run the Textual ``app`` until it quits, then ``close()``; its exit code (0 when
    it gives none)."""
    # The probe thread must get the GIL back as soon as the first token's bytes
    # arrive; the default 5 ms switch interval lets the UI thread hold it for that
    # long (measured: TUI-vs-headless TTFT 1.42 -> 0.73 ms, tests/bench).
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, 0.0005))
    try:
        code = app.run()
        return ExitCode.OK if code is None else int(code)
    finally:
        sys.setswitchinterval(switch)
        close()


def add_otlp_args(p: argparse.ArgumentParser) -> None:
    """``--otlp-listen``: receive the server's OpenTelemetry traces (docs/users.md)."""
    g = p.add_argument_group("users' requests (the server's traces; docs/users.md)")
    g.add_argument("--otlp-listen", type=otlp_listen, metavar="HOST:PORT", default=None,
                   help="receive the server's OTLP/HTTP traces here (POST /v1/traces; e.g. "
                        "vLLM --otlp-traces-endpoint http://HOST:PORT/v1/traces with "
                        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf): the probes get "
                        "the server's own TTFT, queue and prefill, and the users' requests "
                        "are shown beside them (default: off)")


def add_path_args(p: argparse.ArgumentParser) -> None:
    """``--prefill URL --decode URL``: the URL given is a router in front of a prefill
    and a decode worker (docs/disaggregated.md)."""
    g = p.add_argument_group("disaggregated path (docs/disaggregated.md)")
    g.add_argument("--prefill", type=server_url, metavar="URL", default=None,
                   help="the prefill worker's base URL: the URL given is the router; each "
                        "probe's TTFT is split into router, prefill, KV transfer and decode "
                        "from the workers' /metrics, and the prefill worker is probed "
                        "directly too (its own line); needs --decode")
    g.add_argument("--decode", type=server_url, metavar="URL", default=None,
                   help="the decode worker's base URL (needs --prefill)")


def path_options(args: argparse.Namespace) -> PathOptions:
    """``add_path_args``'s flags.

    Raises:
        ValueError: one of the two without the other (a usage error).
    """
    prefill, decode = args.prefill, args.decode
    if bool(prefill) != bool(decode):
        raise ValueError("--prefill and --decode go together: a path has both workers")
    return PathOptions(prefill=prefill, decode=decode)


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text summary (default) or one JSON object on stdout")


# ------------------------------------------------------- options, built once here
# Every command turns its parsed arguments into the typed options of
# ``prefilltui.options`` with these builders; nothing below ``commands/`` sees argparse.
# Each builder reads only the argument groups above that add its flags.


def probe_options(args: argparse.Namespace) -> ProbeOptions:
    """``add_server_args``'s flags."""
    return ProbeOptions(api=args.api, model=args.model, api_key_env=args.api_key_env,
                        insecure=args.insecure, proxy=args.proxy, timeout_s=args.timeout)


def sweep_design(args: argparse.Namespace, *, depths: list[int] | None = None) -> SweepDesign:
    """``add_sweep_args``'s flags, and ``--depth`` for the commands that have it."""
    budget_probes, budget_s = args.budget or (None, None)
    return SweepDesign(
        lengths=tuple(args.lengths) if args.lengths else None, min_tokens=args.min_tokens,
        max_tokens=args.max_tokens, points=args.points, repeats=args.repeats,
        warmup=args.warmup, pause_s=args.pause, duty=args.duty, seed=args.seed,
        until_ci_pct=args.until_ci, budget_probes=budget_probes, budget_s=budget_s,
        depths=tuple(depths or ()))


def roofline_spec(args: argparse.Namespace) -> RooflineSpec:
    """``add_hardware_args``'s flags and ``--model`` (every command with the hardware
    group has one); a ``--model-config`` file is read here, once."""
    return read_model_config(RooflineSpec(
        model=args.model, model_config=args.model_config, params=args.params,
        layers=args.layers, hidden=args.hidden, attn_width=args.attn_width, gpu=args.gpu,
        peak_tflops=args.peak_tflops, bandwidth_tbs=args.bandwidth_tbs, dtype=args.dtype,
        efficiency=args.efficiency))


def analysis_options(args: argparse.Namespace) -> AnalysisOptions:
    """``add_analysis_args``'s and ``add_hardware_args``'s flags."""
    return AnalysisOptions(fit=args.fit, window=args.window, baseline=args.baseline,
                           roofline=roofline_spec(args), slo=tuple(args.slo))


def telemetry_options(args: argparse.Namespace) -> TelemetryOptions:
    """``add_telemetry_args``'s flags."""
    return TelemetryOptions(enabled=not args.no_telemetry, gpus=args.gpus,
                            sample_hz=args.sample_hz, gpu_metrics_url=args.gpu_metrics_url)


def load_options(args: argparse.Namespace, *, levels: bool = False) -> LoadOptions:
    """``add_load_args``'s flags (``--load-levels`` where ``levels``)."""
    if not levels:
        return LoadOptions(spec=args.load)
    return LoadOptions(spec=args.load, levels=tuple(args.load_levels or ()),
                       search=args.rate_search, search_dwell_s=args.rate_dwell)


def otlp_options(args: argparse.Namespace) -> OtlpOptions:
    """``add_otlp_args``'s flag."""
    return OtlpOptions(listen=args.otlp_listen)


def session_options(args: argparse.Namespace, *, depths: list[int] | None = None,
                    load: LoadOptions = LoadOptions(),
                    otlp: OtlpOptions = OtlpOptions(),
                    path: PathOptions = PathOptions()) -> SessionOptions:
    """The options of a measuring command (server, sweep, hardware, telemetry and
    analysis groups, ``--out``; ``load``: the command's ``load_options``, none by
    default; ``otlp``: its ``otlp_options``, no receiver by default)."""
    return SessionOptions(probe=probe_options(args), design=sweep_design(args, depths=depths),
                          telemetry=telemetry_options(args),
                          run_file=RunFileOptions(path=args.out),
                          analysis=analysis_options(args), load=load, otlp=otlp, path=path)
