"""GPU readings from where the GPU is: a remote metrics page, or the local NVML only for
a target on this host, else "no GPU source" (never this machine's GPU under another
machine's name).

``RemoteGpuSampler(url)`` polls a dcgm-exporter, nvitop-exporter or AMD
device-metrics-exporter page
(``model.gpu_pages``) in the sampler thread and keeps the same rings and snapshots as
the NVML sampler, so the gauges, the per-probe attribution and the roofline's GPU name
work unchanged.  ``is_local(url)`` tells whether a target's host is this machine;
``choose_gpu_source`` picks the source of one target and says it in words.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlsplit

import httpx

from prefilltui.measure.telemetry.base import NullSampler, Sampler
from prefilltui.measure.telemetry.snapshots import DeviceState, describe_error
from prefilltui.model.gpu_pages import GpuReading, PageKind, parse_gpu_page
from prefilltui.model.redact import display_url
from prefilltui.model.types import TelemetryKind

#: Polls per second of one remote page (dcgm-exporter collects every 1-30 s itself).
REMOTE_HZ = 0.5
#: Seconds one page fetch may take.
FETCH_TIMEOUT_S = 2.0
#: Largest page read (bytes): a dcgm page of 8 GPUs with profiling metrics is ~100 kB.
MAX_PAGE_BYTES = 4 * 2**20
NO_SOURCE = "no GPU source"


class RemoteGpuSampler(Sampler):
    """Polls a GPU metrics page at ``hz`` (see the module docstring).

    url: the page (``http://host:9400/metrics``); select: GPU indices or UUIDs to keep
    (None: all on the page); fetch: a test's ``fetch(url) -> text`` (default: httpx).
    Devices appear with the first page that lists them; a failed fetch marks every
    device "error" (its values N/A with the reason) and is retried at the next tick.
    """

    #: a reading is a page fetch over HTTP (up to ``FETCH_TIMEOUT_S``): never on a
    #: probe's thread
    tick_on_probe = False

    kind: TelemetryKind = "gpu"
    source = "GPU page"

    def __init__(self, url: str, *, hz: float = REMOTE_HZ, select: tuple[str, ...] | None = None,
                 fetch: Callable[[str], str] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        shown = display_url(url) or url
        super().__init__(hz, clock=clock, reason=f"GPU readings from {shown} (waiting for the "
                         "first page)")
        self.url = url
        self.shown = shown
        self.select = select
        self.page_kind: PageKind | None = None
        self.problem: str | None = None
        self._fetch = fetch or self._http_fetch
        self._client: httpx.Client | None = None
        self._by_key: dict[str, DeviceState] = {}

    def _http_fetch(self, url: str) -> str:
        if self._client is None:
            self._client = httpx.Client(timeout=FETCH_TIMEOUT_S, follow_redirects=False)
        with self._client.stream("GET", url, headers={"Accept": "text/plain"}) as r:
            if r.status_code != 200:
                raise RuntimeError(f"HTTP {r.status_code}")
            chunks, size = [], 0
            for chunk in r.iter_bytes():
                size += len(chunk)
                if size > MAX_PAGE_BYTES:
                    raise RuntimeError(f"page over {MAX_PAGE_BYTES // 2**20} MiB")
                chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")

    @property
    def available(self) -> bool:
        return True  # a remote page may list its GPUs later: keep polling

    def start(self) -> "RemoteGpuSampler":
        """Start polling (the base class starts only with devices; a page has none
        before its first fetch)."""
        if self._thread is None and not self.closed:
            import threading

            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="prefilltui-gpu-page",
                                            daemon=True)
            self._thread.start()
        return self

    def tick(self, now: float | None = None) -> float:
        """Fetch the page once and record every GPU on it.  Never raises."""
        if now is None:
            now = self.clock()
        try:
            kind, gpus = parse_gpu_page(self._fetch(self.url), self.select)
        except Exception as exc:  # noqa: BLE001 - a page that fails is said, not fatal
            self._failed(now, describe_error(exc))
            return now
        with self._lock:
            if kind is None or not gpus:
                self.problem = ("no GPU readings on the page (none of dcgm-exporter's "
                                "DCGM_FI_DEV_*, nvitop's gpu_* or AMD device-metrics-"
                                "exporter's gpu_gfx_activity/gpu_package_power series"
                                + (f" for GPU {','.join(self.select)}" if self.select else "")
                                + ")")
                self.reason = f"{NO_SOURCE}: {self.shown}: {self.problem}"
            else:
                self.page_kind, self.problem = kind, None
                self.reason = (f"GPU readings from {kind} at {self.shown}, every "
                               f"{self.period_s:g} s")
                for g in gpus:
                    self._record(g, now)
            self._ticks += 1
        return now

    def _record(self, g: GpuReading, now: float) -> None:
        dev = self._by_key.get(g.key)
        if dev is None:
            dev = self._new_dev(f"GPU {g.key}", g.name, uuid=g.uuid,
                                index=int(g.key) if g.key.isdigit() else None)
            dev.power_averaged = g.power_averaged
            # dcgm and nvitop read NVML's power, averaged over ~1 s; AMD's average
            # socket power has no documented window
            dev.power_window_s = 1.0 if g.vendor == "NVIDIA" else None
            dev.power_scope = "board" if g.vendor == "NVIDIA" else "socket"
            dev.vendor, dev.source = g.vendor, self.page_kind
            dev.util_kind = "kernel_active" if g.vendor == "NVIDIA" else "gfx_activity"
            dev.mig = "/" in g.key
            self._by_key[g.key] = dev
            self.devices.append(dev)
        if dev.state == "error":
            self._mark_ok(dev)
        dev.na.clear()
        dev.na.update(g.na)
        for field, value in (("util", g.util_pct), ("power", g.power_w),
                             ("power_limit", g.power_limit_w), ("sm_clock", g.sm_clock_mhz),
                             ("memory", g.mem_used_bytes), ("temperature", g.temperature_c),
                             ("energy", g.energy_j)):
            if value is None:
                dev.na.setdefault(field, f"not on the {self.page_kind} page")
        if g.energy_j is not None and dev.energy0 is None:
            dev.energy0 = g.energy_j
        dev.last = {"t": now, "util_pct": g.util_pct, "power_w": g.power_w,
                    "power_limit_w": g.power_limit_w, "sm_clock_mhz": g.sm_clock_mhz,
                    "mem_used_bytes": int(g.mem_used_bytes) if g.mem_used_bytes else None,
                    "mem_total_bytes": int(g.mem_total_bytes) if g.mem_total_bytes else None,
                    "temperature_c": g.temperature_c, "energy_counter_j": g.energy_j,
                    "tensor_active_pct": g.tensor_active_pct}
        self._append(dev, now, g.util_pct, g.power_w, g.energy_j)

    def _failed(self, now: float, why: str) -> None:
        with self._lock:
            self.problem = f"{self.shown}: {why}"
            self.reason = f"{NO_SOURCE} now: {self.problem} (retrying)"
            for dev in self.devices:
                self._mark_error(dev, now, why)
                dev.retry_at = 0.0  # the next tick fetches again
            self._ticks += 1

    def _close(self) -> None:
        if self._client is not None:
            self._client.close()


def _host(url: str) -> str:
    return (urlsplit(url if "://" in url else f"http://{url}").hostname or "").strip("[]")


def local_addresses() -> set[str]:
    """Every address of this machine's interfaces (psutil), plus loopback."""
    out = {"127.0.0.1", "::1"}
    try:
        import psutil

        for addrs in psutil.net_if_addrs().values():
            for a in addrs:
                if a.family in (socket.AF_INET, socket.AF_INET6):
                    out.add(a.address.split("%", 1)[0])
    except Exception:  # noqa: BLE001 - no psutil data: loopback only
        pass
    return out


def is_local(url: str, *, resolve: Callable[[str], list[str]] | None = None,
             addresses: set[str] | None = None) -> bool:
    """Whether the server at ``url`` runs on this machine: a loopback host, this
    machine's name, or a name resolving to one of its interface addresses.  A name
    that does not resolve counts as remote (never this machine's GPU by mistake)."""
    host = _host(url).lower()
    if not host:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
        return ip.is_loopback or str(ip) in (addresses or local_addresses())
    except ValueError:
        pass
    if host in (socket.gethostname().lower(), socket.getfqdn().lower()):
        return True
    try:
        found = (resolve or _resolve)(host)
    except OSError:
        return False
    mine = addresses or local_addresses()
    return any(ipaddress.ip_address(a).is_loopback or a in mine for a in found)


def _resolve(host: str) -> list[str]:
    return sorted({info[4][0].split("%", 1)[0] for info in socket.getaddrinfo(host, None)})


@dataclass(frozen=True)
class GpuSource:
    """Where one target's GPU readings come from: the sampler and the words."""

    sampler: Sampler
    words: str


def choose_gpu_source(url: str, gpu_metrics_url: str | None, *,
                      local: Callable[[], Sampler], remote: Callable[[str], Sampler],
                      local_host: bool | None = None) -> GpuSource:
    """The GPU source of the target at ``url``: its ``gpu_metrics_url`` page when given,
    else this machine's sampler (``local()``: NVML, or the CPU without it) only when
    the target runs here, else a ``NullSampler`` saying "no GPU source".  ``local`` and
    ``remote(url)`` return shared samplers (one per machine / page).  ``local_host``:
    the answer of ``is_local(url)`` when the caller has it."""
    if gpu_metrics_url:
        return GpuSource(remote(gpu_metrics_url), f"GPU page {display_url(gpu_metrics_url)}")
    here = is_local(url) if local_host is None else local_host
    if here:
        sampler = local()
        words = f"this machine's {sampler.source}" if sampler.kind == "gpu" else (
            "this machine's CPU (no GPU here)" if sampler.kind == "cpu" else NO_SOURCE)
        return GpuSource(sampler, words)
    why = (f"{NO_SOURCE}: {_host(url)} is another machine; set gpu_metrics_url to its "
           "dcgm-exporter, nvitop exporter or AMD device-metrics-exporter page")
    return GpuSource(NullSampler(1.0, reason=why), NO_SOURCE)


def poll_hz(pages: int, fleet_pages_per_s: float = 2.0) -> float:
    """Each page's poll rate so the fleet fetches at most ``fleet_pages_per_s`` pages a
    second (and a page at most ``REMOTE_HZ``)."""
    return min(REMOTE_HZ, fleet_pages_per_s / max(1, pages))

