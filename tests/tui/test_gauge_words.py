"""The gauge's words for what each source measures: vendor and model, the
utilization's kind, and whether power is averaged (and over what)."""

from __future__ import annotations

from prefilltui.measure.telemetry import DeviceSnapshot
from prefilltui.tui.widgets.gauges import device_title, power_note, util_word


def dev(**kw) -> DeviceSnapshot:
    return DeviceSnapshot(**{"label": "GPU 0", "name": "", **kw})


def test_title_names_vendor_and_model_once():
    assert device_title(dev(name="AMD Instinct MI300X", vendor="AMD")) == "GPU 0 AMD MI300X"
    assert device_title(dev(name="NVIDIA H200", vendor="NVIDIA")) == "GPU 0 NVIDIA H200"
    assert device_title(dev(name="Intel GPU 0x0bd5", vendor="Intel")) == "GPU 0 Intel GPU 0x0bd5"
    assert device_title(dev(label="CPU", name="Xeon (2 cores)")) == "CPU"  # no vendor: as before


def test_util_word_says_what_is_measured():
    assert util_word(dev(util_kind="kernel_active")) == "util"
    assert util_word(dev(util_kind="busy_percent")) == "busy"
    assert util_word(dev(util_kind="gfx_activity")) == "gfx"
    assert util_word(dev(util_kind="awake_share")) == "awake"
    assert util_word(dev()) == "util"


def test_power_note_instant_vs_averaged():
    assert power_note(dev(power_averaged=False)) == ""
    assert power_note(dev(power_averaged=True, power_window_s=1.0)) == " (1 s avg)"
    assert power_note(dev(power_averaged=True, power_window_s=0.1)) == " (0.1 s avg)"
    assert power_note(dev(power_averaged=True)) == " avg"  # window not documented
    assert power_note(dev(power_averaged=True, power_scope="CPU package",
                          power_window_s=0.1)) == " avg"


def test_help_line_says_what_the_gauges_measure():
    from prefilltui.tui.widgets.gauges import device_measures

    line = device_measures(dev(name="AMD Instinct MI300X", vendor="AMD", source="amdgpu sysfs",
                               util_kind="busy_percent", power_averaged=False))
    assert line == ("GPU 0 AMD MI300X (amdgpu sysfs): busy = the SMU firmware's busy percent "
                    "of the IP cores (amdgpu gpu_busy_percent) (window not documented); "
                    "power instantaneous")
    assert "over 0.1 s" in device_measures(dev(vendor="Intel", util_kind="awake_share",
                                                util_window_s=0.1, power_averaged=True,
                                                power_window_s=0.1))
    assert device_measures(dev()) is None


async def test_gauge_panel_shows_an_amd_and_an_intel_device():
    from textual.app import App

    from prefilltui.measure.telemetry import TelemetrySnapshot
    from prefilltui.tui.widgets.gauges import GaugePanel

    devs = (dev(name="AMD Instinct MI300X", vendor="AMD", source="amdgpu sysfs",
                util_kind="busy_percent", util_pct=87.0, power_w=612.0, power_limit_w=750.0,
                power_averaged=False, history=((9.0, 87.0, 612.0),)),
            dev(label="GPU 1", name="AMD Instinct MI250X", vendor="AMD", source="amdsmi",
                util_kind="gfx_activity", util_pct=20.0,
                na={"power": "reads 0 W: this device reports no power of its own"}),
            dev(label="GPU 2", name="Intel GPU 0x0bd5", vendor="Intel", source="xe sysfs",
                util_kind="awake_share", util_pct=75.0, power_w=300.0, power_averaged=True,
                power_window_s=0.1))
    snap = TelemetrySnapshot(kind="gpu", available=True, devices=devs, t=9.0)

    class GaugeApp(App):
        def compose(self):
            yield GaugePanel()

    app = GaugeApp()
    async with app.run_test(size=(160, 20)) as pilot:
        app.query_one(GaugePanel).show(snap, 10.0)
        await pilot.pause()
        await pilot.pause()
        texts = [str(w.render()) for w in app.query(".gauge-text")]
    assert "GPU 0 AMD MI300X busy  87 %" in texts and "power 612 W / 750 W" in texts
    assert "GPU 1 AMD MI250X gfx  20 %" in texts
    assert any(t.startswith("power N/A (reads 0 W") for t in texts)  # n/a, never 0 W
    assert "GPU 2 Intel GPU 0x0bd5 awake  75 %" in texts
    assert "power 300 W (0.1 s avg)" in texts


def test_help_details_list_what_each_device_measures():
    from prefilltui.measure.telemetry import TelemetrySnapshot
    from prefilltui.tui.feed import FeedConfig
    from prefilltui.tui.help import dashboard_details

    amd = dev(name="AMD Instinct MI300X", vendor="AMD", source="amdgpu sysfs",
              util_kind="busy_percent", power_averaged=False)

    class Sampler:
        def snapshot(self) -> TelemetrySnapshot:
            return TelemetrySnapshot(kind="gpu", available=True, devices=(amd,))

    lines = dashboard_details(FeedConfig(label="t", runner_factory=None, sampler=Sampler()))
    assert lines == [device_measures_of(amd)]


def device_measures_of(d: DeviceSnapshot) -> str:
    from prefilltui.tui.widgets.gauges import device_measures

    line = device_measures(d)
    assert line is not None and line.startswith("GPU 0 AMD MI300X (amdgpu sysfs): busy = ")
    return line
