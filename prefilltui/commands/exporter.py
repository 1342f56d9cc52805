"""``prefilltui exporter [URL ...] [--config targets.toml]``: probe servers gently and
forever, and serve their prefill health on ``/metrics`` for Prometheus.

Per target: one probe in flight at most, probe starts at least ``--interval``
seconds apart (plus up to 20 % jitter), lengths reshuffled every round, a
sliding-window robust fit.  /metrics is served at once; the targets start in the
background.  SIGHUP reads the targets again (the Prometheus convention: a bad file
is refused and the running targets kept).  Runs until SIGTERM or SIGINT, then cancels
the probes in flight, flushes the run files and exits 0.  ``--file-sd`` / ``--http-sd``
add the targets of Prometheus' discovery formats, looked at every ``--sd-refresh``
seconds (``exporter.discovery``); ``--shard I/N`` keeps this replica's share.  Exit: 2
usage error (no target, bad target file, a key that cannot be sent, too many targets or too low an
open-file limit), 1 the listen address or the run directory is unusable.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path

from prefilltui.commands.argtypes import (_int_list, _positive_float, _positive_int, _shard,
                                          server_url, slo_objective)
from prefilltui.commands.common import (add_hardware_args, add_load_args, add_otlp_args,
                                        add_path_args, add_server_args, path_options,
                                        probe_options, roofline_spec)
from prefilltui.commands.signals import take_early_sighups
from prefilltui.exit_codes import ExitCode
from prefilltui.exporter.config import (DEFAULT_INTERVAL_S, DEFAULT_LENGTHS, DEFAULT_WINDOW,
                                        MIN_INTERVAL_S, RUN_FILE_KEEP, RUN_FILE_MAX_BYTES,
                                        TargetConfig, check, load_toml, unique)
from prefilltui.session import SessionError

log = logging.getLogger("prefilltui.exporter")

#: Seconds SIGTERM waits for the probes in flight before closing the run files anyway.
STOP_TIMEOUT_S = 5.0
#: Most targets given one line each at start or on a change (more: the count only).
ANNOUNCE_MAX = 50


def register(sub) -> None:
    p = sub.add_parser(
        "exporter", help="serve the prefill health of servers to Prometheus",
        description="Probe OpenAI-compatible servers continuously (one probe per --interval "
                    "seconds per target at most) and serve the fit, throughput, MFU, TTFT "
                    "histograms and probe outcomes on /metrics.  Targets come from the URLs "
                    "and/or a TOML file (--config); the flags give every target's defaults. "
                    "API keys are read only from the environment variable named by "
                    "--api-key-env (or api_key_env in the file), never printed.")
    p.add_argument("urls", nargs="*", metavar="URL", type=server_url, help="server base URLs")
    p.add_argument("--config", metavar="FILE", help="TOML file of targets ([defaults], [[target]])")
    p.add_argument("--listen", default="127.0.0.1:9464", metavar="HOST:PORT",
                   help="address to serve /metrics on (default 127.0.0.1:9464; port 0: any free port)")
    add_server_args(p)
    add_path_args(p)
    g = p.add_argument_group("probing")
    g.add_argument("--interval", type=_interval, default=DEFAULT_INTERVAL_S, metavar="S",
                   help=f"shortest gap between probe starts per target, in seconds (default "
                        f"{DEFAULT_INTERVAL_S:g}; the rate ceiling; up to 20 %% random extra is added)")
    g.add_argument("--lengths", type=_int_list, default=list(DEFAULT_LENGTHS), metavar="N,N,...",
                   help="prompt lengths in tokens, probed in a reshuffled rotation (default "
                        f"{','.join(map(str, DEFAULT_LENGTHS))})")
    g.add_argument("--window", type=_window, default=DEFAULT_WINDOW, metavar="N",
                   help=f"probes in the sliding-window fit (default {DEFAULT_WINDOW})")
    g.add_argument("--seed", type=int, default=None, help="seed for the length order and prompts")
    g.add_argument("--slo", type=slo_objective, action="append", default=[], metavar="OBJECTIVE",
                   help="every target's TTFT objective (ttft=2s@p99, mlperf-server; repeat for "
                        "several; the TOML slo wins; docs/slo.md)")
    r = p.add_argument_group("run files")
    r.add_argument("--run-dir", metavar="DIR",
                   help="directory of the per-target run files (default: the user data dir's "
                        "prefilltui/exporter)")
    r.add_argument("--run-file-max-mb", type=_positive_float, default=RUN_FILE_MAX_BYTES / 2**20,
                   metavar="MB", help=f"rotate a target's run file at this size in MiB (default "
                                      f"{RUN_FILE_MAX_BYTES / 2**20:g})")
    r.add_argument("--run-file-keep", type=int, default=RUN_FILE_KEEP, metavar="K",
                   help=f"rotated run files kept per target (default {RUN_FILE_KEEP})")
    add_hardware_args(p)
    add_load_args(p)  # every target's default; a target's own load key wins
    add_discovery_args(p)
    add_otlp_args(p)  # every target's default; a target's own otlp_listen key wins
    p.set_defaults(func=run)


def add_discovery_args(p: argparse.ArgumentParser) -> None:
    """``--file-sd``, ``--http-sd``, ``--sd-refresh``, ``--shard`` (exporter and fleet)."""
    from prefilltui.exporter.discovery import DEFAULT_REFRESH_S

    g = p.add_argument_group("service discovery and sharding (docs/kubernetes.md)")
    g.add_argument("--file-sd", action="append", default=[], metavar="FILE",
                   help="a Prometheus file_sd file (JSON or YAML list of {targets, labels}); "
                        "looked at every --sd-refresh seconds, read again when it changed")
    g.add_argument("--http-sd", action="append", default=[], metavar="URL",
                   help="a Prometheus http_sd URL answering that JSON, fetched every "
                        "--sd-refresh seconds")
    g.add_argument("--sd-refresh", type=_positive_float, default=DEFAULT_REFRESH_S,
                   metavar="S", help=f"seconds between looks at each discovery source "
                                     f"(default {DEFAULT_REFRESH_S:g})")
    g.add_argument("--shard", type=_shard, default=None, metavar="I/N",
                   help="probe only the targets whose entry (the file_sd/http_sd string, "
                        "else the URL; never the name) falls to shard I of N (Prometheus' "
                        "hashmod: md5, last 8 bytes, mod N)")


def _interval(text: str) -> float:
    v = _positive_float(text)
    if v < MIN_INTERVAL_S:
        raise argparse.ArgumentTypeError(f"expected an interval >= {MIN_INTERVAL_S} s, got {text!r}")
    return v


def _window(text: str) -> int:
    v = _positive_int(text)
    if v < 3:
        raise argparse.ArgumentTypeError(f"expected a window of 3 probes or more, got {text!r}")
    return v


def _err(msg: str) -> None:
    from prefilltui.model.sanitize import clean

    print(f"prefilltui: {clean(msg, multiline=True)}", file=sys.stderr)


def _base(args) -> TargetConfig:
    """Every target's defaults from the flags."""
    return TargetConfig(url="http://unset", probe=probe_options(args),
                        roofline=roofline_spec(args), lengths=tuple(args.lengths),
                        interval_s=args.interval, window=args.window, load=args.load,
                        otlp_listen=args.otlp_listen, slo=tuple(args.slo))


def targets_from_args(args, discovered: list[TargetConfig] | tuple = ()) -> list[TargetConfig]:
    """The targets of a parsed command line (URLs, then the file's, then ``discovered``),
    labels unique, then this replica's ``--shard``.  Raises ValueError / OSError (the
    file)."""
    base = _base(args)
    path = path_options(args)  # the URL's workers when it is a router (one URL only)
    if path.enabled and len(args.urls) != 1:
        raise ValueError("--prefill / --decode name the workers of one router URL; for "
                         "several paths give prefill = / decode = per target in --config")
    targets = [check(replace(base, url=u, prefill=path.prefill, decode=path.decode))
               for u in args.urls]
    if args.config:
        targets += load_toml(args.config, base)
    shard = getattr(args, "shard", None)
    targets = unique(targets + list(discovered))
    return shard.select(targets) if shard else targets


def make_discovery(args, validate=lambda targets: None):
    """The ``Discovery`` of ``--file-sd`` / ``--http-sd`` (None without any), read once
    (a source that fails now is said and retried every ``--sd-refresh``)."""
    from prefilltui.exporter.discovery import Discovery, FileSource, HttpSource

    sources = ([FileSource(f) for f in getattr(args, "file_sd", [])]
               + [HttpSource(u, args.sd_refresh) for u in getattr(args, "http_sd", [])])
    if not sources:
        return None
    disc = Discovery(sources, _base(args), refresh_s=args.sd_refresh, validate=validate)
    disc.refresh()
    return disc


def _check_discovered(args, found: list[TargetConfig]) -> None:
    """Refuse a discovered list the exporter would refuse at start (``_preflight`` on the
    whole set, after sharding).  Raises ValueError (a key that cannot be sent included)."""
    try:
        _preflight(targets_from_args(args, found))
    except SessionError as e:
        raise ValueError(str(e)) from None


def _restart_note(args, targets: list[TargetConfig], listed: int) -> str:
    """What a restart of this replica loses (its own targets' windows, no other's)."""
    shard = args.shard
    span = max((t.window * t.interval_s for t in targets), default=0.0)
    mine = (f"shard {shard}: {len(targets)} of {listed} listed targets" if shard
            else f"{len(targets)} targets")
    others = ", none of the other shards'" if shard and shard.count > 1 else ""
    return (f"{mine}; each window lives only in this process: a restart loses these "
            f"{len(targets)} windows{others} (refilled within ~{span / 60:.0f} min)")


def _default_run_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("prefilltui", appauthor=False)) / "exporter"


def _preflight(targets: list[TargetConfig]) -> int:
    """What must hold before serving, checked up front (a usage error, never a target
    that silently fails in the background): each target's API key can be sent, its
    ``baseline_run`` holds a fit, the count of targets and the open-file limit fit.

    Raises:
        SessionError: a key that cannot be sent (USAGE; the message holds no key).
        ValueError: a baseline without a fit, too many targets, too low a file limit.
    Returns: the HTTP connections the file limit leaves (``fleet.check_capacity``).
    """
    from prefilltui.exporter.fleet import check_capacity
    from prefilltui.exporter.health import explicit_baseline
    from prefilltui.session import read_api_key

    for t in targets:
        try:
            read_api_key(t.probe)
        except SessionError as e:
            raise SessionError(f"target {t.label!r}: {e}", e.code) from None
        explicit_baseline(t)  # ValueError naming the target
    return check_capacity(len(targets))


def _announce(targets: list[TargetConfig]) -> None:
    for t in targets:
        load = sum(t.lengths) / len(t.lengths) / t.interval_s
        where = t.label if t.label == t.shown_url else f"{t.label} ({t.shown_url})"
        print(f"  {where}: at most {1 / t.interval_s:.3g} probes/s, "
              f"~{load:.0f} prompt tokens/s", file=sys.stderr, flush=True)


def _reload(args, fleet, server, disc=None, why: str = "") -> None:
    """SIGHUP (or a discovery source's new list, ``why``): read the targets again (the
    command line, --config and the sources' last good lists); apply them, or keep the
    running ones and say why when the new set is not valid."""
    try:
        targets = targets_from_args(args, disc.targets() if disc else ())
        if not targets and disc is None:
            raise ValueError("no target")
        room = _preflight(targets)
    except (ValueError, OSError, SessionError) as e:
        print(f"prefilltui exporter: reload refused, the running targets are kept: {e}",
              file=sys.stderr, flush=True)
        return
    server.max_connections = room
    change = fleet.apply(targets)
    print(f"prefilltui exporter: reloaded {why or args.config or 'the command line'}: "
          f"{change.line()}", file=sys.stderr, flush=True)
    fresh = [t for t in targets if t.label in change.added + change.restarted]
    if len(fresh) <= ANNOUNCE_MAX:
        _announce(fresh)


def replace_shard(args):
    """``args`` without ``--shard`` (to count every listed target)."""
    copy = argparse.Namespace(**vars(args))
    copy.shard = None
    return copy


class _SdCollector:
    """The ``prefilltui_sd_*`` and ``prefilltui_shard_targets`` series on /metrics."""

    def __init__(self, disc, shard, fleet) -> None:
        self.disc, self.shard, self.fleet = disc, shard, fleet

    def collect(self):
        from prefilltui.exporter.discovery import Shard, sd_metrics

        if self.disc is None and self.shard is None:
            return iter(())
        return sd_metrics(self.disc, self.shard or Shard(), len(self.fleet))


def run(args) -> int:
    from prefilltui.exporter.fleet import Fleet
    from prefilltui.exporter.http import MetricsServer
    from prefilltui.exporter.target import TargetProber
    from prefilltui.measure.httpserver import parse_listen

    try:
        host, port = parse_listen(args.listen, default_host="0.0.0.0")
        disc = make_discovery(args, validate=lambda found: _check_discovered(args, found))
        targets = targets_from_args(args, disc.targets() if disc else ())
        room = _preflight(targets)
    except SessionError as e:
        _err(str(e))
        return int(e.code)
    except (ValueError, OSError) as e:
        _err(str(e))
        return ExitCode.USAGE
    if not targets and disc is None:
        _err("no target: give server URLs, --config FILE, --file-sd FILE or --http-sd URL")
        return ExitCode.USAGE
    run_dir = Path(args.run_dir or _default_run_dir())
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        _err(f"cannot create the run directory {run_dir}: {e.strerror or e}")
        return ExitCode.FAILURE
    fleet = Fleet(lambda t: TargetProber(
        t, run_dir=run_dir, run_max_bytes=int(args.run_file_max_mb * 2**20),
        run_keep=max(0, args.run_file_keep), seed=args.seed))
    try:
        server = MetricsServer(host, port, fleet, max_connections=room,
                               extra=[_SdCollector(disc, args.shard, fleet)])
    except OSError as e:
        _err(f"cannot listen on {args.listen}: {e.strerror or e}")
        return ExitCode.FAILURE
    stop, reload = threading.Event(), threading.Event()
    handlers = {signal.SIGTERM: lambda *_: stop.set(), signal.SIGINT: lambda *_: stop.set()}
    if hasattr(signal, "SIGHUP"):  # the Prometheus convention: reload, never exit
        handlers[signal.SIGHUP] = lambda *_: reload.set()
    old = {s: signal.signal(s, h) for s, h in handlers.items()}
    if take_early_sighups():  # a reload asked for while starting: read the files again
        reload.set()
    try:
        server.start()  # served from the first moment; targets start in the background
        shown = host if ":" not in host else f"[{host}]"
        print(f"prefilltui exporter: serving http://{shown}:{server.port}/metrics for "
              f"{len(targets)} target(s); run files in {run_dir}",
              file=sys.stderr, flush=True)
        fleet.apply(targets)
        if len(targets) <= ANNOUNCE_MAX:
            _announce(targets)
        if args.shard or disc is not None:
            listed = len(targets_from_args(replace_shard(args), disc.targets() if disc else ()))
            print(f"prefilltui exporter: {_restart_note(args, targets, listed)}",
                  file=sys.stderr, flush=True)
        sd_changed = threading.Event()
        if disc is not None:
            disc.on_change = sd_changed.set
            disc.start()
        while not stop.wait(1.0):
            if reload.is_set():
                reload.clear()
                _reload(args, fleet, server, disc)
            if sd_changed.is_set():
                sd_changed.clear()
                _reload(args, fleet, server, disc, why="service discovery")
        print("prefilltui exporter: stopping", file=sys.stderr, flush=True)
        return ExitCode.OK
    finally:
        if disc is not None:
            disc.stop()
        fleet.stop(STOP_TIMEOUT_S)
        server.stop()
        for s, h in old.items():
            signal.signal(s, h)
