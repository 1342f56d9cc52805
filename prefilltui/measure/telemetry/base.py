"""The sampler base: the sampling thread, snapshots of it, and per-probe attribution.

``Sampler`` owns the background thread and the per-device ``DeviceState`` (that type
and the snapshots are in ``snapshots.py``); the leaf modules ``nvml.py`` (GPUs) and
``cpu.py`` (the CPU fallback) subclass it and implement ``_sample``.
``Sampler.start()`` / ``.stop()`` / ``.tick()`` / ``.snapshot()`` /
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
from typing import Any, Callable

from prefilltui.measure.telemetry.samples import SampleRing, WindowStats, window_stats
from prefilltui.measure.telemetry.snapshots import (HISTORY_S, METRICS, RETAIN_S, DeviceSnapshot,
                                                    DeviceState, TelemetrySnapshot,
                                                    describe_error)
from prefilltui.model.types import ProbeResult, TelemetryKind

__all__ = ["Sampler", "NullSampler", "IDLE_HZ"]

#: Samples a second between probes when a session slows its sampler down
#: (``Sampler.slow_between_probes``): the gauges redraw once a second
#: (``tui.redraw.GAUGE_HZ``) and the 60-s sparklines draw one column per second or
#: more, so between probes a faster rate shows nothing more; CPU utilization and the
#: GPUs' power and energy are counter deltas or driver averages, so a slower reading
#: averages the gap instead of missing it.  The full rate is for the probes: it is what splits a short prefill's
#: window into readings.
IDLE_HZ = 2.0
#: Seconds a probe start keeps the full rate at most: a probe still in flight after a
#: minute (120+ readings at the idle rate by then) or one whose end was never reported
#: (a cancelled sweep) stops holding the full rate.
FAST_MAX_S = 60.0


class Sampler:
    """Base sampler: a background thread calls ``tick()`` at ``hz``; each tick reads
    every device once (``_sample``, implemented by subclasses) into bounded rings.

    clock: a zero-argument callable returning perf_counter-compatible seconds
    (default ``time.perf_counter``); tests pass a fake clock and call ``tick()``
    themselves instead of ``start()``.  Thread-safe: ``snapshot()`` and
    ``attribute()`` may be called from any thread.
    """

    kind: TelemetryKind = "none"
    #: where the readings come from, in words (subclasses: "NVML", "amdgpu sysfs", ...)
    source: str = "nothing"
    #: whether a probe's hooks may read the devices themselves, on the probe's thread
    #: (a local read of well under a millisecond a device: NVML, sysfs, /proc); False
    #: for a source that a read may keep waiting (a remote page over HTTP)
    tick_on_probe: bool = True

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
        #: between probes: samples a second (``slow_between_probes``; = hz: one rate)
        self.idle_hz = self.hz
        #: seconds the full rate lasts after a probe's attribution
        self.linger_s = 0.0
        self._starts: deque[float] = deque(maxlen=1024)  # start times of probes in flight
        self._fast_until = -math.inf  # perf_counter time the lingering full rate ends
        self._wake = threading.Event()  # a hook sampled: the thread's schedule restarts
        self._last_tick_at = -math.inf  # perf_counter time of the newest tick
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
            self._last_tick_at = now
        return now

    def _tick_now(self) -> None:
        """A probe's hook reads the devices now (``tick``) and the thread's schedule
        restarts from this reading, so the thread's next one is a whole period later,
        not a few ms after it (a reading over a few ms is mostly quantization)."""
        self.tick(time.perf_counter())
        self._wake.set()

    def _slow_due(self, dev: DeviceState, now: float, every_s: float) -> bool:
        """Whether this sample of ``dev`` also reads the slow fields (clocks,
        temperature, memory, the power cap): once every ``every_s`` seconds whatever the
        rate (the sampler slows between probes), half a period early at the latest."""
        last = dev.slow_t
        if last is None or now - last >= every_s - 0.5 * self.period_s or now < last:
            dev.slow_t = now
            return True
        return False

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

    def slow_between_probes(self, idle_hz: float = IDLE_HZ, linger_s: float | None = None
                            ) -> "Sampler":
        """Sample at ``idle_hz`` while no probe is in flight, at ``hz`` from each probe's
        start (``before_probe`` wakes the thread, which samples at once) until
        ``linger_s`` after its attribution (default: two of the slower of a period and
        the sensor's own window, the pacing's idle floor, so the reading after a probe
        is as fine as the ones in it).  At one probe a second this halves the sampling
        thread's wake-ups; a session that never probes (an exporter between probes)
        samples at ``idle_hz``.  No effect when ``idle_hz`` >= ``hz``.  Returns self.

        Raises ValueError for ``idle_hz`` <= 0 or a negative ``linger_s``."""
        if not idle_hz > 0:
            raise ValueError(f"idle sample rate must be > 0 Hz, got {idle_hz}")
        if linger_s is not None and not linger_s >= 0:
            raise ValueError(f"linger must be >= 0 s, got {linger_s}")
        self.idle_hz = min(float(idle_hz), self.hz)
        if linger_s is None:
            linger_s = 2 * max(self.period_s, self.sensor_window_s or 0.0)
        self.linger_s = float(linger_s)
        return self

    def _period_now(self, now: float) -> float:
        """Seconds to the next sample: a period while a probe is in flight or lingers,
        else the idle rate's."""
        starts = self._starts
        try:
            while starts and now - starts[0] > FAST_MAX_S:
                starts.popleft()
        except IndexError:  # emptied by after_probe meanwhile
            pass
        if starts or now < self._fast_until:
            return self.period_s
        return 1.0 / self.idle_hz

    def _run(self) -> None:
        nxt = time.perf_counter()
        while not self._stop.is_set():
            now = time.perf_counter()
            if now >= nxt:
                self.tick(now)
                now = time.perf_counter()
                nxt += self._period_now(now)
                if nxt < now:  # fell behind (suspended, overloaded): skip, don't burst
                    nxt = now
            if self._wake.wait(max(0.0, nxt - now)):  # a hook read the devices
                self._wake.clear()
                nxt = self._last_tick_at + self._period_now(time.perf_counter())

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and release the library (idempotent)."""
        self._stop.set()
        self._wake.set()
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
            temperature_c=last.get("temperature_c"),
            tensor_active_pct=last.get("tensor_active_pct"), mig=d.mig, na=na,
            history=tuple(d.hist), vendor=d.vendor, source=d.source,
            util_kind=d.util_kind, util_window_s=d.util_window_s,
            power_window_s=d.power_window_s)

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
        """ProbeHook: samples are continuous; when the sampler slows between probes
        (``slow_between_probes``), back to the full rate from now, from a reading taken
        here, before the request goes out (a reading the thread took on a wake-up could
        land just inside the probe's window, over the idle gap before it)."""
        self._starts.append(time.perf_counter())
        if self.idle_hz < self.hz and self.running:
            if self.tick_on_probe:
                self._tick_now()
            else:
                self._wake.set()

    async def after_probe(self, result: ProbeResult) -> None:
        """ProbeHook: the reading covering ``result.t_end`` taken here when the devices
        may be read on this thread (``tick_on_probe``; half a period after the last one
        at the earliest: a wait of a period / 8 on average instead of / 2, so the next
        probe of a burst starts sooner); else, or when that is not
        enough (a GPU's utilization read from the driver's sample buffer), wait (at most
        ~3 periods, or the driver's sample period plus 2 periods; never over 1 s) until
        it exists when the thread runs; then ``attribute(result)``."""
        if (result.t_end is not None and self.running and self.tick_on_probe
                and not self._covered(result.t_end)):
            # half a period after the last reading at the earliest: a reading over a
            # few ms is mostly the counters' quantization (10-ms CPU ticks), and it
            # would count as much as a whole period in the window's mean
            wait = self._last_tick_at + self.period_s / 2 - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(min(wait, self.period_s))
            if not self._covered(result.t_end):
                self._tick_now()
        if result.t_end is not None and self.running:
            wait = min(max(3 * self.period_s, self._cover_wait_s), 1.0)
            deadline = time.perf_counter() + wait
            while (now := time.perf_counter()) < deadline and not self._covered(result.t_end):
                # one sleep until the next sample is due (a quarter period late), not a
                # poll every quarter period: ~1 ms of the sweep thread's CPU per probe
                # at 10 Hz went to the polling's wake-ups
                last = self._last_sample_t()
                due = (last + self.period_s if last is not None else now) + self.period_s / 4
                await asyncio.sleep(min(max(due - now, self.period_s / 8), deadline - now))
        self.attribute(result)
        self._fast_until = time.perf_counter() + self.linger_s
        try:
            self._starts.popleft()
        except IndexError:  # expired (FAST_MAX_S) or never started here
            pass

    def _last_sample_t(self) -> float | None:
        """The newest sample's time over the devices (perf_counter s), None before any."""
        ts = [t for d in self.devices if (t := d.ring.last_t()) is not None]
        return max(ts) if ts else None

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
