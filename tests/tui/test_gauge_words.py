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
