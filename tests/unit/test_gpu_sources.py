"""GPU readings from where the GPU is: dcgm-exporter and nvitop exporter pages served by
a real loopback HTTP server, read by the remote sampler; this machine's NVML only for a
target on this machine; "no GPU source" otherwise."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fakeserver import Reply

from prefilltui.measure.telemetry import RemoteGpuSampler, choose_gpu_source, is_local, poll_hz
from prefilltui.model.gpu_pages import parse_gpu_page

FIX = Path(__file__).parent / "fixtures"
DCGM = (FIX / "dcgm_exporter_h100x2.prom").read_text()
NVITOP = (FIX / "nvitop_exporter_h100.prom").read_text()


def test_dcgm_page_readings():
    kind, gpus = parse_gpu_page(DCGM)
    assert kind == "dcgm-exporter" and [g.key for g in gpus] == ["0", "1"]
    g = gpus[0]
    assert g.name == "NVIDIA H100 80GB HBM3" and g.uuid.startswith("GPU-5fb4")
    assert (g.util_pct, g.power_w, g.sm_clock_mhz, g.temperature_c) == (93, 612.345, 1980, 61)
    assert g.tensor_active_pct == pytest.approx(41.4321)  # ratio 0.414321 -> %
    assert g.mem_used_bytes == 76103 * 2**20 and g.mem_total_bytes == (76103 + 3012) * 2**20
    assert g.energy_j == pytest.approx(884210345.123)  # mJ -> J
    assert g.power_limit_w is None  # not on the page: None, never 0
    # one GPU of the page, by index or UUID
    assert [x.key for x in parse_gpu_page(DCGM, ("1",))[1]] == ["1"]
    assert [x.key for x in parse_gpu_page(DCGM, (gpus[0].uuid,))[1]] == ["0"]


def test_nvitop_page_readings():
    kind, gpus = parse_gpu_page(NVITOP)
    assert kind == "nvitop-exporter" and len(gpus) == 1
    g = gpus[0]
    assert (g.util_pct, g.power_w, g.power_limit_w) == (87, 498.2, 700)
    assert g.mem_total_bytes == 81559 * 2**20 and g.temperature_c == 58
    assert g.tensor_active_pct is None and g.energy_j is None


def test_a_page_without_gpu_series():
    assert parse_gpu_page("# HELP up x\n# TYPE up gauge\nup 1\n") == (None, ())
    with pytest.raises(ValueError):
        parse_gpu_page("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\" 93\n")


def test_remote_sampler_reads_a_dcgm_exporter_page(fake_server):
    srv = fake_server({"GET /metrics": Reply.text(DCGM)})
    s = RemoteGpuSampler(srv.base_url + "/metrics", hz=5.0)
    try:
        s.tick()
        snap = s.snapshot()
        assert snap.kind == "gpu" and [d.label for d in snap.devices] == ["GPU 0", "GPU 1"]
        d = snap.devices[0]
        assert d.name == "NVIDIA H100 80GB HBM3" and d.util_pct == 93 and d.power_w == 612.345
        assert d.tensor_active_pct == pytest.approx(41.4321) and d.sm_clock_mhz == 1980
        assert "dcgm-exporter" in snap.reason and srv.base_url in snap.reason
        assert d.na.get("power_limit", "").startswith("not on the dcgm-exporter page")
        # per-probe attribution works as with NVML: a window around the sample
        s.tick()
        w = s.window(time.perf_counter() - 5, time.perf_counter())
        assert w is not None and w.util_peak_pct == 50.0  # (93 + 7) / 2 GPUs
    finally:
        s.stop()


def test_remote_sampler_page_down_then_back(fake_server):
    srv = fake_server({"GET /metrics": Reply.text(NVITOP)})
    s = RemoteGpuSampler(srv.base_url + "/metrics")
    try:
        s.tick()
        assert s.snapshot().devices[0].util_pct == 87
        srv.set("GET /metrics", Reply.text("busy", status=503))
        s.tick()
        snap = s.snapshot()
        dev = snap.devices[0]
        assert dev.state == "error" and dev.util_pct is None  # never a stale value
        assert snap.reason.startswith("no GPU source now:") and "HTTP 503" in snap.reason
        srv.set("GET /metrics", Reply.text(NVITOP))
        s.tick()
        assert s.snapshot().devices[0].util_pct == 87 and s.snapshot().devices[0].state == "ok"
    finally:
        s.stop()


def test_remote_sampler_polls_in_its_thread(fake_server):
    srv = fake_server({"GET /metrics": Reply.text(DCGM)})
    s = RemoteGpuSampler(srv.base_url + "/metrics", hz=20.0).start()
    try:
        deadline = time.monotonic() + 5
        while not s.snapshot().devices and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(s.snapshot().devices) == 2
    finally:
        s.stop()
    assert poll_hz(1) == 0.5 and poll_hz(100) == pytest.approx(0.02)  # <= 2 pages/s in all


def test_locality():
    assert is_local("http://127.0.0.1:8000") and is_local("http://localhost:1/v1")
    assert is_local("http://[::1]:8000")
    assert not is_local("http://10.9.8.7:8000", addresses={"127.0.0.1", "192.168.1.5"})
    assert is_local("http://192.168.1.5:8000", addresses={"127.0.0.1", "192.168.1.5"})
    # a name: resolved, local only when it resolves to one of this machine's addresses
    assert is_local("http://box:1", resolve=lambda h: ["192.168.1.5"],
                    addresses={"192.168.1.5"})
    assert not is_local("http://gpu-01:1", resolve=lambda h: ["10.0.0.1"],
                        addresses={"192.168.1.5"})

    def fails(host):
        raise OSError("no such host")

    assert not is_local("http://nowhere.invalid:1", resolve=fails)


class _Local:
    kind = "gpu"
    source = "NVML"


def test_choose_source_never_shows_this_machine_under_another_name():
    calls = []
    local = lambda: calls.append("local") or _Local()  # noqa: E731
    remote = lambda url: ("remote", url)  # noqa: E731
    src = choose_gpu_source("http://10.0.0.7:8000", None, local=local, remote=remote,
                            local_host=False)
    assert src.words == "no GPU source" and calls == []
    snap = src.sampler.snapshot()
    assert snap.kind == "none" and snap.reason.startswith("no GPU source: 10.0.0.7 is another")
    page = choose_gpu_source("http://10.0.0.7:8000", "http://10.0.0.7:9400/metrics",
                             local=local, remote=remote, local_host=False)
    assert page.sampler == ("remote", "http://10.0.0.7:9400/metrics") and calls == []
    here = choose_gpu_source("http://127.0.0.1:8000", None, local=local, remote=remote)
    assert here.words == "this machine's NVML" and calls == ["local"]


def test_probe_clients_share_one_tls_context():
    """A fleet of 100 targets held 100 copies of the CA bundle (84 MiB, measured): one
    context per verify setting (``probe.shared_ssl_context``)."""
    from prefilltui.measure.probe import ProbeClient
    from prefilltui.measure.probe.sending import shared_ssl_context

    a, b = ProbeClient("http://127.0.0.1:1"), ProbeClient("https://example.invalid")
    ctx = shared_ssl_context(True)
    assert a.sender.transport._pool._ssl_context is b.sender.transport._pool._ssl_context is ctx
    c = ProbeClient("https://example.invalid", verify=False)
    assert c.sender.transport._pool._ssl_context is shared_ssl_context(False) is not ctx


AMD_PAGE = (FIX / "amd_metrics_exporter_mi300x2.prom").read_text()


def test_amd_device_metrics_exporter_page_readings():
    kind, gpus = parse_gpu_page(AMD_PAGE)
    assert kind == "amd-device-metrics-exporter" and [g.key for g in gpus] == ["0", "1"]
    g, h = gpus
    assert (g.name, g.vendor, g.uuid) == ("AMD Instinct MI300X", "AMD",
                                          "5ad9b7c1-0000-1000-80f8-cb5b93f7c1d6")
    assert (g.util_pct, g.power_w, g.power_averaged) == (91, 702, False)
    assert g.energy_j == pytest.approx(3.5218762e7)  # µJ -> J
    assert g.mem_used_bytes == 180224 * 2**20 and g.mem_total_bytes == 196592 * 2**20
    assert g.temperature_c == 71 and g.sm_clock_mhz == 2050  # the system clocks' mean
    # without the card_series label the board part number is all there is (no MFU)
    assert h.name == "AMD 102-D65209-0C" and h.power_w == 141 and h.mem_used_bytes is None
    assert [x.key for x in parse_gpu_page(AMD_PAGE, ("1",))[1]] == ["1"]


def _amd_line(name: str, gpu_id: str, part: str, value: float, **extra: str) -> str:
    labels = {"card_model": "102-D65209-0C", "gpu_id": gpu_id, "gpu_partition_id": part,
              "hostname": "h", **extra}
    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{text}}} {value}"


def test_amd_page_partitions_and_zero_power_are_na_never_zero():
    page = "\n".join([
        _amd_line("gpu_gfx_activity", "0", "0", 80),
        _amd_line("gpu_gfx_activity", "1", "1", 0),
        _amd_line("gpu_power_usage", "0", "0", 650),
        _amd_line("gpu_power_usage", "1", "1", 0),     # "all other partitions report 0"
        _amd_line("gpu_average_package_power", "2", "0", 0),  # an MI250's second die
        _amd_line("gpu_gfx_activity", "2", "0", 12),
    ]) + "\n"
    kind, (p0, p1, die) = parse_gpu_page(page)
    assert p0.power_w == 650 and p0.util_pct == 80
    assert p1.power_w is None and p1.util_pct is None
    assert "partition" in dict(p1.na)["power"]
    assert die.power_w is None and "no power of its own" in dict(die.na)["power"]
    assert die.util_pct == 12


def test_remote_sampler_reads_an_amd_page(fake_server):
    srv = fake_server({"GET /metrics": Reply.text(AMD_PAGE)})
    s = RemoteGpuSampler(srv.base_url + "/metrics", hz=5.0)
    try:
        s.tick()
        snap = s.snapshot()
        d = snap.devices[0]
        assert (d.vendor, d.source, d.util_kind) == ("AMD", "amd-device-metrics-exporter",
                                                     "gfx_activity")
        assert d.util_pct == 91 and d.power_w == 702 and d.power_averaged is False
        assert "amd-device-metrics-exporter" in snap.reason
        assert snap.devices[1].na["memory"] == "not on the amd-device-metrics-exporter page"
    finally:
        s.stop()


def test_a_vendor_prefix_in_gpus_selects_by_index_on_a_page(fake_server):
    from prefilltui.options import TelemetryOptions
    from prefilltui.session import session_sampler

    srv = fake_server({"GET /metrics": Reply.text(AMD_PAGE)})
    tel = TelemetryOptions(gpus="amd:1", gpu_metrics_url=srv.base_url + "/metrics")
    sampler, words = session_sampler(tel, "http://gpu-01.example:8000")
    try:
        sampler.tick()
        assert [d.label for d in sampler.snapshot().devices] == ["GPU 1"]
        assert words.startswith("GPU page")
    finally:
        sampler.stop()


def test_fleet_file_takes_a_vendor_prefix_in_gpus(tmp_path):
    """``gpus = "amd:0"`` (the flag's own spelling) is a valid fleet-file value; a
    stray colon elsewhere is still refused with the message."""
    import pytest

    from prefilltui.exporter.config import load_toml

    ok = tmp_path / "ok.toml"
    ok.write_text('[[target]]\nurl = "http://127.0.0.1:9"\ngpus = "amd:0,1"\n')
    assert [t.gpus for t in load_toml(str(ok))] == ["amd:0,1"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[[target]]\nurl = "http://127.0.0.1:9"\ngpus = "0:1"\n')
    with pytest.raises(ValueError, match="vendor prefix"):
        load_toml(str(bad))
