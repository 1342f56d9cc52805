"""The sampler base: frozen snapshots, per-device state and per-probe attribution.

``Sampler`` owns the background thread and the per-device ``DeviceState``; the leaf
modules ``nvml.py`` (GPUs) and ``cpu.py`` (the CPU fallback) subclass it and implement
``_sample``.  ``Sampler.start()`` / ``.stop()`` / ``.tick()`` / ``.snapshot()`` /
``.attribute(result)`` and the ProbeHook methods ``before_probe(client)`` /
``after_probe(result)`` are the interface the rest of prefilltui uses.

Honesty rules (STYLE.md pattern 2): a value that was not measured is ``None`` and its
reason is in ``DeviceSnapshot.na[field]``, never 0.  Capabilities are probed once when
the sampler opens; a capability that is not supported is never re-queried each tick.
Units: W, J, %, MHz, bytes, degrees C; times are ``time.perf_counter()`` seconds (the
clock ``ProbeResult.t_send`` / ``t_end`` use), injectable for tests.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from prefilltui.measure.telemetry.samples import SampleRing, WindowStats, window_stats
from prefilltui.model.types import DeviceStatus, ProbeResult, TelemetryKind

__all__ = ["DeviceSnapshot", "TelemetrySnapshot", "DeviceState", "Sampler", "NullSampler",
           "describe_error", "HISTORY_S", "RETAIN_S", "METRICS"]

#: Seconds of history handed to the UI in each snapshot.
HISTORY_S = 60.0
#: Seconds of samples kept for attribution (a probe window must fit; probes time out at 120 s).
RETAIN_S = 600.0


#: The metric names used as ``DeviceSnapshot.na`` keys.
METRICS = ("util", "power", "energy", "power_limit", "sm_clock", "memory", "temperature")


def describe_error(exc: BaseException) -> str:
    """One plain line for an exception (NVML errors read "GPU is lost" etc.)."""
    text = str(exc).strip()
    name = type(exc).__name__
    if name.startswith("NVMLError") or isinstance(exc, RuntimeError):
        return text or name
    return f"{name}: {text}" if text else name


@dataclass(frozen=True, slots=True)
class DeviceSnapshot:
    """One device at one tick (GPU or the CPU package).

    label: "GPU 0" (NVML index), "GPU 0 MIG 1" (GPU instance 1 of GPU 0) or "CPU".
    state: "ok" | "error" (a query failed mid-run; retried with back-off 1, 2, 4 ..
    30 s; ``error`` says why, and every metric is then None with
    na[name] = "error: <why> (retrying)", so stale values never show as current).
    Every metric is ``None`` when not measured, with the reason in ``na[name]`` (keys:
    "util", "power", "power_limit", "energy", "sm_clock", "memory", "temperature").
    power_w: instantaneous where the device supports it, else averaged
    (``power_averaged`` True; NVML's nvmlDeviceGetPowerUsage averages over ~1 s on
    Ampere and newer boards; the CPU's RAPL power is averaged over one sample period).
    power_scope: what the power covers: "board", "whole GPU" (a MIG slice shows its
    parent GPU's power), "CPU package" (RAPL, all packages summed).
    energy_j: joules since the sampler opened (energy counter where supported, else
    None).  history: ``(t_perf, util_pct|None, power_w|None)`` for the last ~60 s.
    """

    label: str
    name: str
    index: int | None = None
    uuid: str | None = None
    state: DeviceStatus = "ok"
    error: str | None = None
    t: float | None = None
    util_pct: float | None = None
    power_w: float | None = None
    power_averaged: bool | None = None
    power_scope: str | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None
    sm_clock_mhz: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temperature_c: float | None = None
    mig: bool = False
    na: dict[str, str] = field(default_factory=dict)
    history: tuple[tuple[float, float | None, float | None], ...] = ()

    def reason(self, name: str) -> str | None:
        """Why ``name`` is N/A (None when it has a value or no reason is known)."""
        return self.na.get(name)


@dataclass(frozen=True, slots=True)
class TelemetrySnapshot:
    """Everything the UI shows about telemetry at one moment.

    kind: "gpu" | "cpu" | "none".  available: False when nothing can be sampled.
    reason: one plain line on why this kind was chosen or why nothing is available
    (e.g. "NVML unavailable: NVML Shared Library Not Found — showing CPU"), else None.
    """

    kind: TelemetryKind
    available: bool
    reason: str | None = None
    devices: tuple[DeviceSnapshot, ...] = ()
    t: float | None = None
    hz: float = 0.0
    running: bool = False


@dataclass(slots=True)
class DeviceState:
    """Mutable per-device state owned by the sampler thread (subclasses fill it).

    ring/hist: samples for attribution and for the UI history; ``last``: the latest
    values keyed by ``DeviceSnapshot`` field name (plus "energy_counter_j");
    ``extra``: what a subclass keeps per device (NVML handles, a psutil.Process,
    "display_only", "power_group").
    """

    label: str
    name: str
    ring: SampleRing
    hist: deque = field(default_factory=deque)  # (t, util, power) for the last history_s
    index: int | None = None
    uuid: str | None = None
    state: DeviceStatus = "ok"
    error: str | None = None
    na: dict[str, str] = field(default_factory=dict)
    last: dict[str, Any] = field(default_factory=dict)
    power_averaged: bool | None = None
    power_scope: str | None = None
    mig: bool = False
    energy0: float | None = None  # first energy counter reading (J)
    retry_at: float = 0.0
    backoff_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)  # subclass handles etc.


class Sampler:
    """Base sampler: a background thread calls ``tick()`` at ``hz``; each tick reads
    every device once (``_sample``, implemented by subclasses) into bounded rings.

    clock: a zero-argument callable returning perf_counter-compatible seconds
    (default ``time.perf_counter``); tests pass a fake clock and call ``tick()``
    themselves instead of ``start()``.  Thread-safe: ``snapshot()`` and
    ``attribute()`` may be called from any thread.
    """

    kind: TelemetryKind = "none"

    def __init__(self, hz: float = 10.0, *, clock: Callable[[], float] | None = None,
                 reason: str | None = None, history_s: float = HISTORY_S,
                 retain_s: float = RETAIN_S) -> None:
        if not hz > 0:
            raise ValueError(f"sample rate must be > 0 Hz, got {hz}")
        self.hz = float(hz)
        self.period_s = 1.0 / self.hz
        self.clock = clock or time.perf_counter
        self.reason = reason
        self.history_s = history_s
        self.retain_s = retain_s
        #: rows a device may add per second (a GPU adds the driver's own samples)
        self.rows_per_s = self.hz
        self.capacity = int(math.ceil(retain_s * self.hz)) + 1
        self.devices: list[DeviceState] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ticks = 0
        self._snap: TelemetrySnapshot | None = None
        self._snap_ticks = -1
        self.closed = False

    # -- subclass interface ------------------------------------------------------
    def _sample(self, dev: DeviceState, now: float) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _close(self) -> None:
        """Release resources (NVML shutdown).  Called once by ``stop()``."""

    @property
    def available(self) -> bool:
        return bool(self.devices)

    @property
    def sensor_window_s(self) -> float | None:
        """Seconds one reading averages over (see core/pacing.py); None = unknown.
        Base: one sample period (utilization and power from counter deltas)."""
        return self.period_s if self.devices else None

    def _new_dev(self, label: str, name: str, **kw: Any) -> DeviceState:
        return DeviceState(label=label, name=name, ring=SampleRing(self.capacity),
                           hist=deque(maxlen=int(math.ceil(self.history_s * self.rows_per_s))
                                      + 1), **kw)

    def _append(self, dev: DeviceState, t: float, util: float | None, power: float | None,
                energy: float | None) -> None:
        """Record one sample of ``dev`` (ring for attribution, deque for the UI history)."""
        dev.ring.append(t, util, power, energy)
        h = dev.hist
        h.append((t, util, power))
        cut = t - self.history_s
        while h[0][0] < cut:
            h.popleft()

    # -- sampling --------------------------------------------------------------
    def tick(self, now: float | None = None) -> float:
        """Sample every device once at ``now`` (default ``clock()``); returns the time.

        Never raises for device errors: a failing device goes to state "error"
        and is retried with back-off by later ticks.
        """
        if now is None:
            now = self.clock()
        with self._lock:
            for dev in self.devices:
                if dev.state == "error" and now < dev.retry_at:
                    continue
                try:
                    self._sample(dev, now)
                except Exception as exc:  # noqa: BLE001 - one device never stops the rest
                    self._mark_error(dev, now, describe_error(exc))
                else:
                    if dev.state == "error":
                        self._mark_ok(dev)
            self._ticks += 1
        return now

    def _mark_error(self, dev: DeviceState, now: float, msg: str) -> None:
        """Put ``dev`` in the error state; retry after 1, 2, 4 ... 30 s."""
        dev.backoff_s = min(30.0, dev.backoff_s * 2 if dev.backoff_s else 1.0)
        dev.state = "error"
        dev.error = msg
        dev.retry_at = now + dev.backoff_s

    def _mark_ok(self, dev: DeviceState) -> None:
        dev.state, dev.error, dev.backoff_s, dev.retry_at = "ok", None, 0.0, 0.0

    def start(self) -> "Sampler":
        """Start the background thread (idempotent).  Returns self."""
        if self._thread is None and self.devices and not self.closed:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="prefilltui-telemetry",
                                            daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        nxt = time.perf_counter()
        while not self._stop.is_set():
            self.tick()
            nxt += self.period_s
            delay = nxt - time.perf_counter()
            if delay < 0:  # fell behind (suspended, overloaded): skip, don't burst
                nxt = time.perf_counter()
                delay = 0.0
            self._stop.wait(delay)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and release the library (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if not self.closed:
            self.closed = True
            try:
                self._close()
            except Exception:  # noqa: BLE001 - shutting down; nothing useful to do
                pass

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- snapshots ---------------------------------------------------------------
    def snapshot(self) -> TelemetrySnapshot:
        """A frozen view of the latest tick (cached until the next tick)."""
        with self._lock:
            if self._snap is not None and self._snap_ticks == self._ticks:
                if self._snap.running == self.running:
                    return self._snap
            devs = tuple(self._dev_snapshot(d) for d in self.devices)
            t = max((d.t for d in devs if d.t is not None), default=None)
            snap = TelemetrySnapshot(kind=self.kind, available=self.available,
                                     reason=self.reason, devices=devs, t=t, hz=self.hz,
                                     running=self.running)
            self._snap, self._snap_ticks = snap, self._ticks
            return snap

    def _dev_snapshot(self, d: DeviceState) -> DeviceSnapshot:
        last = d.last
        na = dict(d.na)
        energy = None
        if last.get("energy_counter_j") is not None and d.energy0 is not None:
            energy = last["energy_counter_j"] - d.energy0
        if d.state == "error":  # never show stale values as current
            why = f"error: {d.error} (retrying)"
            last = {"t": last.get("t")}
            energy = None
            for k in METRICS:
                na.setdefault(k, why)
        return DeviceSnapshot(
            label=d.label, name=d.name, index=d.index, uuid=d.uuid, state=d.state,
            error=d.error, t=last.get("t"), util_pct=last.get("util_pct"),
            power_w=last.get("power_w"), power_averaged=d.power_averaged,
            power_scope=d.power_scope, power_limit_w=last.get("power_limit_w"),
            energy_j=energy, sm_clock_mhz=last.get("sm_clock_mhz"),
            mem_used_bytes=last.get("mem_used_bytes"),
            mem_total_bytes=last.get("mem_total_bytes"),
            temperature_c=last.get("temperature_c"), mig=d.mig, na=na,
            history=tuple(d.hist))

    def ring_bytes(self) -> int:
        """Bytes held by the sample rings (constant after construction)."""
        return sum(d.ring.nbytes for d in self.devices)

    # -- attribution -------------------------------------------------------------
    def window(self, t0: float, t1: float) -> WindowStats | None:
        """Telemetry over [t0, t1] (perf_counter seconds); None when no device.
        See ``prefilltui.measure.telemetry.samples.window_stats`` for the rules."""
        devs = [d for d in self.devices if not d.extra.get("display_only")]
        if not devs or t1 < t0:
            return None
        with self._lock:
            per = [d.ring.ordered() for d in devs]
        groups = [d.extra.get("power_group", id(d)) for d in devs]
        first = [groups.index(g) == i for i, g in enumerate(groups)]
        return window_stats(per, "+".join(d.label for d in devs), t0, t1, first)

    def attribute(self, result: ProbeResult) -> None:
        """Fill result.telemetry_device, util_peak_pct, util_mean_pct, power_peak_w and
        energy_j from the samples in [result.t_send, result.t_end]; the mean power goes
        to ``result.power_mean_w``.  Leaves them None when the window is
        missing or nothing was sampled.  Never raises."""
        if result.t_send is None or result.t_end is None:
            return
        try:
            w = self.window(result.t_send, result.t_end)
        except Exception:  # noqa: BLE001 - attribution must never break a sweep
            return
        if w is None or w.n_samples == 0:
            return
        result.telemetry_device = w.device
        result.util_peak_pct = w.util_peak_pct
        result.util_mean_pct = w.util_mean_pct
        result.power_peak_w = w.power_peak_w
        result.energy_j = w.energy_j
        result.power_mean_w = w.power_mean_w
        result.energy_source = w.energy_source

    # -- ProbeHook -----------------------------------------------------------------
    async def before_probe(self, client: Any) -> None:
        """ProbeHook: nothing to do before a probe (samples are continuous)."""
        return None

    async def after_probe(self, result: ProbeResult) -> None:
        """ProbeHook: wait (at most ~3 periods, or the driver's sample period plus 2
        periods on a GPU read from its sample buffer; never over 1 s) until the sample
        covering ``result.t_end`` exists when the thread runs, then ``attribute(result)``."""
        if result.t_end is not None and self.running:
            wait = min(max(3 * self.period_s, self._cover_wait_s), 1.0)
            deadline = time.perf_counter() + wait
            while time.perf_counter() < deadline:
                if self._covered(result.t_end):
                    break
                await asyncio.sleep(self.period_s / 4)
        self.attribute(result)

    def _covered(self, t: float) -> bool:
        """Whether a sample at or after ``t`` exists (then a window ending at ``t``
        can be attributed)."""
        last = max((d.ring.last_t() or -math.inf for d in self.devices), default=math.inf)
        return last >= t

    @property
    def _cover_wait_s(self) -> float:
        """Extra seconds ``after_probe`` may wait for the covering sample."""
        return 0.0


class NullSampler(Sampler):
    """Samples nothing (``--no-telemetry``, or neither NVML nor psutil works)."""

    kind: TelemetryKind = "none"

    def _sample(self, dev: DeviceState, now: float) -> None:  # pragma: no cover
        return None
