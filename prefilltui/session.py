"""One wiring for every command that probes a server: ``build_session(options, url)``.

``sweep``, ``watch``, ``demo`` (through those two), ``cache-check`` and the exporter
build their objects here, once, from typed options (``prefilltui.options``): the probe
client factory (URL, API key, TLS, timeout, prompt seed), the ``/metrics`` hook (which
scrapes through the probe client's own connection pool, so it has the same auth and TLS
settings), the telemetry sampler, the run file and the baseline fit.  Commands stay
thin: build the options, build the session, run, report.

Raises ``SessionError`` (a one-line message and the exit code) for bad options or a run
file that cannot be created; nothing is left open then.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from prefilltui.model.fit import LinearFit
from prefilltui.measure.load import LoadGenerator
from prefilltui.measure.load import LoadHook
from prefilltui.measure.metrics_hook import MetricsHook
from prefilltui.measure.path_hook import PathHook
from prefilltui.measure.otlp import (OtlpReceiver, SpanHook, UsersTrace, acquire_receiver,
                                     release_receiver, target_names)
from prefilltui.measure.users_metrics import UsersMetrics
from prefilltui.model.pacing import Pacing, auto_pacing
from prefilltui.measure.probe import AZURE_KEY_ENV, ProbeClient, Rejections, is_azure
from prefilltui.measure.runfile import (SERVER_CHANGE_RECORD, RotatingRunWriter, RunFileBusy,
                                       RunWriter, default_run_path)
from prefilltui.measure.server_watch import ServerWatch
from prefilltui.measure.sweep import SweepRunner
from prefilltui.measure.sweep import TIME_CAP_S, ProbeHook, SweepConfig, make_lengths
from prefilltui.measure.telemetry import Sampler
from prefilltui.model.redact import display_url
from prefilltui.model.types import ProbeResult, ServerInfo
from prefilltui.exit_codes import ExitCode
from prefilltui.options import (API_KEY_ENV, ProbeOptions, SessionOptions, SweepDesign,
                                TelemetryOptions)


#: Prompt seed offset between successive runners of one session (the first keeps
#: ``--seed`` itself; depth probes use +1, the load +2 and +7).
RUNNER_SEED_STRIDE = 100


class SessionError(Exception):
    """The session cannot be built; ``str()`` is the one line to show, ``code`` the
    exit code (``ExitCode.USAGE`` for bad options, ``ExitCode.FAILURE`` otherwise)."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILURE) -> None:
        super().__init__(message)
        self.code = code


def read_api_key(probe: ProbeOptions, base_url: str | None = None) -> str | None:
    """The API key from the environment variable named by ``probe.api_key_env``
    (``--api-key-env``, default OPENAI_API_KEY; surrounding whitespace removed), or None.
    For an Azure OpenAI ``base_url`` (``measure.probe.is_azure``) with the default
    variable, AZURE_OPENAI_API_KEY (the OpenAI SDK's ``AzureOpenAI`` reads it) comes
    first, then OPENAI_API_KEY.

    Raises:
        SessionError: (USAGE) the key cannot be sent in an HTTP header; the message
            never contains the key.
    """
    names = [probe.api_key_env]
    if base_url is not None and probe.api_key_env == API_KEY_ENV and is_azure(base_url):
        names.insert(0, AZURE_KEY_ENV)
    name, key = names[-1], None
    for name in names:
        key = (os.environ.get(name) or "").strip() or None
        if key is not None:
            break
    if key is not None and not (key.isascii() and key.isprintable()):
        raise SessionError(f"the API key in ${name} contains characters that cannot be sent "
                           "in an HTTP header (a control character or non-ASCII)",
                           ExitCode.USAGE)
    return key


def client_factory(probe: ProbeOptions, base_url: str, seed: int | None = None
                   ) -> Callable[..., ProbeClient]:
    """A factory of probe clients for ``base_url`` with ``probe``'s API flavour, model,
    API key, time cap (``timeout_s``: the one route of ``--timeout`` to the client), TLS
    verification and proxy (``measure.proxy``), and the prompt seed ``seed``
    (``seed_offset`` added, for a second client whose prompts must differ;
    ``max_connections``: the pool's size, raised for the background load's streams).
    Its clients share one ``Rejections``: a field the server rejected, learned by the
    probes or the background load, is sent by none of them again.

    Raises:
        SessionError: (USAGE) an API key that cannot be sent, or an unusable proxy.
    """
    from prefilltui.measure.proxy import ProxyError, choose_proxy

    api_key = read_api_key(probe, base_url)
    try:
        choose_proxy(base_url, probe.proxy)  # a bad --proxy or proxy variable: said up front
    except ProxyError as exc:
        raise SessionError(str(exc), ExitCode.USAGE) from None
    rejections = Rejections()

    def new_client(seed_offset: int = 0, max_connections: int = 4) -> ProbeClient:
        return ProbeClient(base_url, api=probe.api, model=probe.model, api_key=api_key,
                           timeout=probe.timeout_s, verify=not probe.insecure,
                           proxy=probe.proxy,
                           seed=None if seed is None else seed + seed_offset,
                           max_connections=max_connections, rejections=rejections)

    return new_client


def sweep_lengths(design: SweepDesign) -> list[int]:
    """The prompt lengths to probe: ``--lengths``, else ``--points`` log-spaced lengths
    from ``--min-tokens`` to ``--max-tokens`` (the sweep caps these where a probe would
    take over ``measure.sweep.TIME_CAP_S``, ``build_session``).

    Raises:
        SessionError: (USAGE) min above max, or an empty range.
    """
    if design.lengths:
        return sorted(set(design.lengths))
    lo, hi = design.min_tokens, design.max_tokens
    if lo > hi:
        raise SessionError(f"sweep range: --min-tokens ({lo}) is above --max-tokens ({hi})",
                           ExitCode.USAGE)
    try:
        return make_lengths(lo, hi, design.points)
    except ValueError as exc:
        raise SessionError(f"sweep range: {exc}", ExitCode.USAGE) from None


def session_pacing(design: SweepDesign, sampler: Sampler | None, continuous: bool
                   ) -> Pacing | None:
    """How the runner spaces probes (``core.pacing``).  The TUI (``continuous``):
    duty-cycled from the sampler's period and window and ``--duty``/``--pause``
    (``auto_pacing``).  The headless sweep: None (its ``--pause`` gap, back-to-back by
    default) unless ``--duty`` asks for a share.

    Raises:
        SessionError: (USAGE) a duty outside (0, 1].
    """
    duty, pause = design.duty, design.pause_s
    try:
        if continuous:
            return auto_pacing(sampler.period_s if sampler is not None else None,
                               sampler.sensor_window_s if sampler is not None else None,
                               duty=duty, pause_s=pause)
        return Pacing(duty=duty, idle_floor_s=pause or 0.0) if duty else None
    except ValueError as exc:
        raise SessionError(f"pacing: {exc}", ExitCode.USAGE) from None


def session_sampler(tel: TelemetryOptions, base_url: str) -> tuple[Sampler, str]:
    """The started telemetry sampler of a session against ``base_url`` and its source
    in words: the server's GPU page (``--gpu-metrics-url``), else this machine's
    NVML / CPU only when the server runs on this machine, else a sampler that says "no
    GPU source" (``measure.telemetry.remote.choose_gpu_source``): never this machine's
    GPU under another machine's name.

    Raises:
        ValueError: a bad ``--gpus``.
    """
    from prefilltui.measure.telemetry import make_sampler
    from prefilltui.measure.telemetry import RemoteGpuSampler, choose_gpu_source

    from prefilltui.measure.telemetry import split_vendor

    picked = split_vendor(tel.gpus)[1]  # a page's GPUs by index/UUID, without "amd:"
    select = tuple(x.strip() for x in picked.split(",")) if picked else None
    src = choose_gpu_source(
        base_url, tel.gpu_metrics_url,
        local=lambda: make_sampler(tel.gpus, hz=tel.sample_hz,
                                   processes=dict(tel.processes) or None),
        remote=lambda url: RemoteGpuSampler(url, select=select))
    # full rate around each probe, IDLE_HZ between (the app's own cost while idle)
    return src.sampler.slow_between_probes().start(), src.words


@dataclass
class Session:
    """Everything one measuring session uses, built once by ``build_session``.

    ``hooks`` run around every probe in this order: the metrics hook first (its
    scrape right after the stream ends sees the fewest other requests), then the
    sampler (which waits for a sample at or after the probe's end).
    ``baseline`` is the fit of ``--baseline RUN.jsonl`` (``runfile_read.load_baseline``),
    or None with the reason in ``baseline_problem`` when it could not be used.
    ``gpu_source``: where the GPU readings come from, in words (``session_sampler``).
    """

    base_url: str
    options: SessionOptions
    new_client: Callable[..., ProbeClient]
    lengths: list[int]
    config: SweepConfig
    writer: RunWriter
    sampler: Sampler | None
    metrics: MetricsHook
    baseline: LinearFit | None = None
    baseline_problem: str | None = None
    runner: SweepRunner | None = None
    hooks: list[ProbeHook] = field(default_factory=list)
    gpu_source: str | None = None
    #: the background load (``--load``), not started; None unless asked for
    load: LoadGenerator | None = None
    load_hook: LoadHook | None = None
    #: the users' requests as one face (``window`` / ``before`` / ``recent`` /
    #: ``stats``): the server's traces (``trace``, ``--otlp-listen``), falling back to
    #: its /metrics histograms (``users_metrics``) while no user span has come
    users: UsersTrace | UsersMetrics | None = None
    trace: UsersTrace | None = None
    users_metrics: UsersMetrics | None = None
    otlp: OtlpReceiver | None = None
    #: what the server says about itself, watched for restarts and changes (fed by the
    #: metrics hook's scrapes; each change is a ``server_change`` line of the run file)
    server_watch: ServerWatch | None = None
    #: a target that is a path (``--prefill`` / ``--decode``): the hops of each probe
    #: and the prefill worker's own probes (``measure.path_hook``); None: one server
    path: PathHook | None = None
    #: unix seconds the session was built (the users' window of a sweep starts here)
    started_s: float = field(default_factory=time.time)
    _runners: int = 0

    @property
    def run_path(self) -> Path:
        return Path(self.writer.path)

    def new_runner(self, on_result: Callable[[ProbeResult], None] | None = None,
                   on_state: Callable[[str, str], None] | None = None, *,
                   on_plan: Callable[[list[int], list[str]], None] | None = None
                   ) -> SweepRunner:
        """The session's SweepRunner (not started).  A new one (the next load level)
        replaces the last; the metrics hook then reads through the new client."""
        factory = self.new_client
        if self.runner is not None:
            self.metrics.rebind()
            # new prompts for each runner: a level's probes must never hit the prefix
            # cache with an earlier level's prompts (same --seed, same words)
            self._runners += 1
            offset = RUNNER_SEED_STRIDE * self._runners
            factory = lambda: self.new_client(seed_offset=offset)  # noqa: E731
        self.runner = SweepRunner(factory, self.config, on_result=on_result,
                                  on_state=on_state, on_plan=on_plan, runfile=self.writer,
                                  hooks=self.hooks)
        return self.runner

    def start_load(self, *, wait_s: float = 60.0, min_tokens: int = 4) -> bool:
        """Start the background load (when configured) and wait up to ``wait_s`` for it
        to reach its level (every decode stream ``min_tokens`` tokens in); returns whether it did (False: no load, a fault, or still
        starting; ``load.fault`` / ``load.detail`` say why)."""
        if self.load is None:
            return False
        if self.load.state == "off":
            self.load.start()
        return self.load.wait_steady(wait_s, min_tokens) if wait_s > 0 else self.load.alive

    def path_summary(self, results: list[ProbeResult], info: ServerInfo | None = None):
        """The path's summary over ``results`` (``model.path.summarize_path``; None for
        a single server), the expected KV bytes per token from the model shape
        discovery found or the user gave, in the KV dtype of ``--dtype``."""
        from prefilltui.model.path import kv_bytes_per_token, summarize_path
        from prefilltui.model.roofline import lookup_model

        if self.path is None:
            return None
        spec = self.options.analysis.roofline
        shape = spec.config_shape or lookup_model(spec.model or (info.model if info else None))
        expected = kv_bytes_per_token(shape, spec.dtype)
        return summarize_path(results, list(self.path.prefill_probes),
                              urls=(display_url(self.base_url), self.path.prefill.shown,
                                    self.path.decode.shown),
                              roles=self.path.roles, expected_bytes_per_token=expected,
                              notices=self.path.notices)

    def close(self) -> None:
        """Stop the load, the runner and the sampler and close the run file
        (idempotent)."""
        if self.load is not None:
            try:
                self.load.stop(timeout=5.0)
            except Exception:  # noqa: BLE001 - shutting down
                pass
        if self.runner is not None:
            try:
                self.runner.stop(timeout=5.0)
            except Exception:  # noqa: BLE001 - shutting down; the run file is what matters
                pass
        if self.sampler is not None:
            self.sampler.stop()
        if self.otlp is not None:
            if self.trace is not None:
                self.otlp.router.remove(self.trace)
            release_receiver(self.otlp)
            self.otlp = None
        self.writer.close()


def attach_users(session: Session, listen: str, names: tuple[str, ...] = ()) -> UsersTrace:
    """Receive the server's traces on ``listen`` (the process's shared receiver there,
    ``measure.otlp.shared``) into a new ``UsersTrace`` for this session's target, whose
    probes register with it (``SpanHook``, after the metrics hook so a span's exact
    values win) and whose late spans go to the run file.

    Raises:
        SessionError: (USAGE) not HOST:PORT; (FAILURE) the address cannot be bound.
        The run file and sampler are closed first.
    """
    try:
        rx = acquire_receiver(listen)
    except (ValueError, OSError) as exc:
        session.close()
        code = ExitCode.USAGE if isinstance(exc, ValueError) else ExitCode.FAILURE
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise SessionError(f"--otlp-listen {listen}: {why}", code) from None
    label = names[0] if names else ""
    trace = UsersTrace(label, names + target_names(label, session.base_url),
                       runfile=session.writer)
    trace.fallback = session.users_metrics
    rx.router.add(trace)
    session.otlp, session.trace, session.users = rx, trace, trace
    session.hooks.append(SpanHook(trace))
    return trace


def build_session(options: SessionOptions, base_url: str, *, continuous: bool = False
                  ) -> Session:
    """Build the session for ``base_url`` from ``options`` (see the module docstring).

    continuous: cycle the sweep until stopped (the TUI, the exporter) instead of one pass.
    Long-running probers (the exporter) also set ``design.interval_s`` / ``jitter`` /
    ``keep_results`` (``SweepConfig`` pacing and memory) and ``run_file.max_bytes`` /
    ``keep`` (a size-rotated run file).
    The sampler is started; the runner is made by ``Session.new_runner``.

    ``options.otlp.listen``: the server's traces are received there (``attach_users``).

    Raises:
        SessionError: bad options (USAGE: API key, sweep range, ``--gpus``,
            ``--otlp-listen``) or a run file / listen address that cannot be had (FAILURE).
    """
    from prefilltui.measure.runfile import load_baseline

    design, rf, tel = options.design, options.run_file, options.telemetry
    new_client = client_factory(options.probe, base_url, design.seed)
    lengths = sweep_lengths(design)
    config = SweepConfig(lengths=lengths, repeats=design.repeats, warmup=design.warmup,
                         pause_s=design.pause_s or 0.0, seed=design.seed, continuous=continuous,
                         until_ci_pct=design.until_ci_pct, budget_probes=design.budget_probes,
                         budget_s=design.budget_s, interval_s=design.interval_s,
                         jitter=design.jitter, keep_results=design.keep_results,
                         # the default lengths, one pass or the TUI's: no probe of a minute
                         # on a slow target; --lengths are run as given
                         time_cap_s=None if design.lengths else TIME_CAP_S)
    run_path = Path(rf.path).expanduser() if rf.path else default_run_path()
    try:
        run_path.parent.mkdir(parents=True, exist_ok=True)
        writer = (RotatingRunWriter(run_path, max_bytes=rf.max_bytes, keep=rf.keep)
                  if rf.max_bytes else RunWriter(run_path))
    except RunFileBusy as exc:  # another run writes this file: never interleave them
        raise SessionError(str(exc.strerror), ExitCode.USAGE) from None
    except OSError as exc:
        raise SessionError(f"cannot write the run file {run_path}: {exc.strerror or exc}"
                           ) from None
    if options.analysis.slo:  # report judges the run by the same objectives
        writer.set_session(slo=[item.key for item in options.analysis.slo])
    sampler, gpu_source = None, None
    if tel.enabled:
        try:
            sampler, gpu_source = session_sampler(tel, base_url)
        except ValueError as exc:  # a bad --gpus value
            writer.close()
            raise SessionError(str(exc), ExitCode.USAGE) from None
    if sampler is not None:
        snap = sampler.snapshot()
        if snap.kind == "gpu":  # report resolves the GPU (peak, MFU) from these names
            writer.set_session(gpu_names=[d.name for d in snap.devices if d.name])
    config.pacing = session_pacing(design, sampler, continuous)
    metrics = MetricsHook()  # reader made from the probe client: same pool, auth, TLS
    session = Session(base_url=base_url, options=options, new_client=new_client,
                      lengths=lengths, config=config, writer=writer, sampler=sampler,
                      metrics=metrics, hooks=[metrics] + ([sampler] if sampler else []),
                      gpu_source=gpu_source)
    try:
        spec = options.load.effective()
    except ValueError as exc:
        writer.close()
        if sampler is not None:
            sampler.stop()
        raise SessionError(f"--load-levels: {exc}", ExitCode.USAGE) from None
    if spec is not None:
        session.load = LoadGenerator(spec, new_client, runfile=writer, seed=design.seed)
        session.load_hook = LoadHook(session.load, metrics)
        session.hooks.append(session.load_hook)
        writer.set_session(load=spec.to_json())
    # the users' window from /metrics, read from the scrapes the metrics hook makes
    session.users = session.users_metrics = UsersMetrics()
    metrics.on_text = session.users_metrics.feed
    session.hooks.append(session.users_metrics)
    if session.load is not None:  # the load's requests are prefilltui's, not users'
        session.users_metrics.load_requests = session.load.requests_between
    # restarts and changes of the server, read from the same scrapes (and its stated
    # facts now and then), each written to the run file as it is confirmed
    session.server_watch = watch = ServerWatch()
    metrics.on_sample = watch.feed_sample
    session.hooks.append(watch)
    if options.path.enabled:
        session.path = PathHook(options.path.prefill, options.path.decode,
                                new_prefill_client=client_factory(options.probe,
                                                                  options.path.prefill,
                                                                  design.seed),
                                runfile=writer)
        # right after the metrics hook: the workers are scraped as close around the
        # probe as the router's page is
        session.hooks.insert(1, session.path)
        writer.set_session(path={"prefill": display_url(options.path.prefill),
                                 "decode": display_url(options.path.decode)})
    watch.on_change.append(lambda c: writer.append_record(SERVER_CHANGE_RECORD, c.to_json()))
    if options.otlp.listen:
        attach_users(session, options.otlp.listen, options.otlp.names)
    path = options.analysis.baseline
    if path:
        try:
            session.baseline = load_baseline(path, method=options.analysis.fit)
        except (OSError, ValueError) as exc:
            session.baseline_problem = f"--baseline {path}: {exc}"
    return session
