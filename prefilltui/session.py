"""One wiring for every command that probes a server: ``build_session(options, url)``.

``sweep``, ``watch``, ``demo`` (through those two) and ``cache-check`` build their
objects here, once, from the parsed options: the probe client factory (URL, API key,
TLS, timeout, prompt seed), the ``/metrics`` hook (which scrapes through the probe
client's own connection pool, so it has the same auth and TLS settings), the telemetry
sampler, the run file and the baseline fit.  Commands stay thin: build, run, report.

``options`` is an ``argparse.Namespace`` (or any object) with the attributes of
``commands/common.py``'s argument groups; a missing attribute takes its default.
Raises ``SessionError`` (a one-line message and the exit code) for bad options or a run
file that cannot be created; nothing is left open then.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from prefilltui.model import defaults
from prefilltui.model.fit import LinearFit
from prefilltui.measure.metrics_hook import MetricsHook
from prefilltui.model.pacing import Pacing, auto_pacing
from prefilltui.measure.probe import ProbeClient
from prefilltui.measure.runfile import (RotatingRunWriter, RunFileBusy, RunWriter,
                                       default_run_path)
from prefilltui.measure.sweep import ProbeHook, SweepConfig, SweepRunner, make_lengths
from prefilltui.measure.telemetry import Sampler
from prefilltui.model.types import ProbeResult
from prefilltui.exit_codes import ExitCode


class SessionError(Exception):
    """The session cannot be built; ``str()`` is the one line to show, ``code`` the
    exit code (``ExitCode.USAGE`` for bad options, ``ExitCode.FAILURE`` otherwise)."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILURE) -> None:
        super().__init__(message)
        self.code = code


def _opt(options: Any, name: str, default: Any = None) -> Any:
    v = getattr(options, name, None)
    return default if v is None else v


def read_api_key(options: Any) -> str | None:
    """The API key from the environment variable named by ``--api-key-env`` (default
    OPENAI_API_KEY; surrounding whitespace removed), or None.

    Raises:
        SessionError: (USAGE) the key cannot be sent in an HTTP header; the message
            never contains the key.
    """
    name = _opt(options, "api_key_env", "OPENAI_API_KEY")
    key = (os.environ.get(name) or "").strip() or None
    if key is not None and not (key.isascii() and key.isprintable()):
        raise SessionError(f"the API key in ${name} contains characters that cannot be sent "
                           "in an HTTP header (a control character or non-ASCII)",
                           ExitCode.USAGE)
    return key


def client_factory(options: Any, base_url: str) -> Callable[..., ProbeClient]:
    """A factory of probe clients for ``base_url`` with the options' API flavour, model,
    API key, timeout, TLS verification and prompt seed (``seed_offset`` added to
    ``--seed``, for a second client whose prompts must differ).

    Raises:
        SessionError: (USAGE) an API key that cannot be sent.
    """
    api_key = read_api_key(options)

    seed = _opt(options, "seed")

    def new_client(seed_offset: int = 0) -> ProbeClient:
        return ProbeClient(base_url, api=_opt(options, "api", "completions"),
                           model=_opt(options, "model"), api_key=api_key,
                           timeout=_opt(options, "timeout", defaults.TIMEOUT_S),
                           verify=not _opt(options, "insecure", False),
                           seed=None if seed is None else seed + seed_offset)

    return new_client


def sweep_lengths(options: Any) -> list[int]:
    """The prompt lengths to probe: ``--lengths``, else ``--points`` log-spaced lengths
    from ``--min-tokens`` to ``--max-tokens``.

    Raises:
        SessionError: (USAGE) min above max, or an empty range.
    """
    if _opt(options, "lengths"):
        return sorted(set(options.lengths))
    lo = _opt(options, "min_tokens", defaults.MIN_TOKENS)
    hi = _opt(options, "max_tokens", defaults.MAX_TOKENS)
    if lo > hi:
        raise SessionError(f"sweep range: --min-tokens ({lo}) is above --max-tokens ({hi})",
                           ExitCode.USAGE)
    try:
        return make_lengths(lo, hi, _opt(options, "points", defaults.POINTS))
    except ValueError as exc:
        raise SessionError(f"sweep range: {exc}", ExitCode.USAGE) from None


def session_pacing(options: Any, sampler: Sampler | None, continuous: bool) -> Pacing | None:
    """How the runner spaces probes (``core.pacing``).  The TUI (``continuous``):
    duty-cycled from the sampler's period and window and ``--duty``/``--pause``
    (``auto_pacing``).  The headless sweep: None (its ``--pause`` gap, back-to-back by
    default) unless ``--duty`` asks for a share.

    Raises:
        SessionError: (USAGE) a duty outside (0, 1].
    """
    duty, pause = getattr(options, "duty", None), getattr(options, "pause", None)
    try:
        if continuous:
            return auto_pacing(sampler.period_s if sampler is not None else None,
                               sampler.sensor_window_s if sampler is not None else None,
                               duty=duty, pause_s=pause)
        return Pacing(duty=duty, idle_floor_s=pause or 0.0) if duty else None
    except ValueError as exc:
        raise SessionError(f"pacing: {exc}", ExitCode.USAGE) from None


@dataclass
class Session:
    """Everything one measuring session uses, built once by ``build_session``.

    ``hooks`` run around every probe in this order: the metrics hook first (its
    scrape right after the stream ends sees the fewest other requests), then the
    sampler (which waits for a sample at or after the probe's end).
    ``baseline`` is the fit of ``--baseline RUN.jsonl`` (``runfile.load_baseline``),
    or None with the reason in ``baseline_problem`` when it could not be used.
    """

    base_url: str
    options: Any
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

    @property
    def run_path(self) -> Path:
        return Path(self.writer.path)

    def new_runner(self, on_result: Callable[[ProbeResult], None] | None = None,
                   on_state: Callable[[str, str], None] | None = None, *,
                   on_plan: Callable[[list[int], list[str]], None] | None = None
                   ) -> SweepRunner:
        """The session's SweepRunner (one per session; not started)."""
        self.runner = SweepRunner(self.new_client, self.config, on_result=on_result,
                                  on_state=on_state, on_plan=on_plan, runfile=self.writer,
                                  hooks=self.hooks)
        return self.runner

    def close(self) -> None:
        """Stop the runner and the sampler and close the run file (idempotent)."""
        if self.runner is not None:
            try:
                self.runner.stop(timeout=5.0)
            except Exception:  # noqa: BLE001 - shutting down; the run file is what matters
                pass
        if self.sampler is not None:
            self.sampler.stop()
        self.writer.close()


def build_session(options: Any, base_url: str, *, continuous: bool = False) -> Session:
    """Build the session for ``base_url`` from parsed options (see the module docstring).

    continuous: cycle the sweep until stopped (the TUI, the exporter) instead of one pass.
    Long-running probers (the exporter) also give ``interval_s`` / ``jitter`` /
    ``keep_results`` (``SweepConfig`` pacing and memory) and ``run_max_bytes`` /
    ``run_keep`` (a size-rotated run file).
    The sampler is started; the runner is made by ``Session.new_runner``.

    Raises:
        SessionError: bad options (USAGE: API key, sweep range, ``--gpus``) or a run
            file that cannot be created (FAILURE).
    """
    from prefilltui.measure.runfile import load_baseline

    new_client = client_factory(options, base_url)
    lengths = sweep_lengths(options)
    budget_probes, budget_s = _opt(options, "budget", (None, None))
    config = SweepConfig(lengths=lengths, repeats=_opt(options, "repeats", 1),
                         warmup=_opt(options, "warmup", 1), pause_s=_opt(options, "pause", 0.0),
                         seed=_opt(options, "seed"), continuous=continuous,
                         until_ci_pct=_opt(options, "until_ci"), budget_probes=budget_probes,
                         budget_s=budget_s, interval_s=_opt(options, "interval_s"),
                         jitter=_opt(options, "jitter", 0.0),
                         keep_results=_opt(options, "keep_results"))
    run_path = (Path(options.out).expanduser() if _opt(options, "out")
                else default_run_path())
    try:
        run_path.parent.mkdir(parents=True, exist_ok=True)
        max_bytes = _opt(options, "run_max_bytes")
        writer = (RotatingRunWriter(run_path, max_bytes=max_bytes, keep=_opt(options, "run_keep", 3))
                  if max_bytes else RunWriter(run_path))
    except RunFileBusy as exc:  # another run writes this file: never interleave them
        raise SessionError(str(exc.strerror), ExitCode.USAGE) from None
    except OSError as exc:
        raise SessionError(f"cannot write the run file {run_path}: {exc.strerror or exc}"
                           ) from None
    sampler = None
    if not _opt(options, "no_telemetry", False):
        from prefilltui.measure.telemetry import make_sampler

        try:
            sampler = make_sampler(_opt(options, "gpus"),
                                   hz=_opt(options, "sample_hz", defaults.SAMPLE_HZ),
                                   processes=_opt(options, "telemetry_processes")).start()
        except ValueError as exc:  # a bad --gpus value
            writer.close()
            raise SessionError(str(exc), ExitCode.USAGE) from None
    if sampler is not None:
        snap = sampler.snapshot()
        if snap.kind == "gpu":  # report resolves the GPU (peak, MFU) from these names
            writer.set_session(gpu_names=[d.name for d in snap.devices if d.name])
    config.pacing = session_pacing(options, sampler, continuous)
    metrics = MetricsHook()  # reader made from the probe client: same pool, auth, TLS
    session = Session(base_url=base_url, options=options, new_client=new_client,
                      lengths=lengths, config=config, writer=writer, sampler=sampler,
                      metrics=metrics, hooks=[metrics] + ([sampler] if sampler else []))
    path = _opt(options, "baseline")
    if path:
        try:
            session.baseline = load_baseline(path, method=_opt(options, "fit",
                                                               defaults.FIT_METHOD))
        except (OSError, ValueError) as exc:
            session.baseline_problem = f"--baseline {path}: {exc}"
    return session
