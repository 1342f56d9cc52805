"""A missing real component skips exactly its tests with the line that installs it,
the same way for every component, and fails them under PREFILLTUI_REQUIRE_COMPONENTS=1."""

from __future__ import annotations

import dataclasses

import pytest

from tests import components as C


@pytest.mark.parametrize("name", sorted(C.COMPONENTS))
def test_a_missing_component_skips_with_its_install_line(name, monkeypatch):
    monkeypatch.delenv(C.REQUIRE_ENV, raising=False)
    monkeypatch.setitem(C.COMPONENTS, name,
                        dataclasses.replace(C.COMPONENTS[name], find=lambda: None))
    with pytest.raises(pytest.skip.Exception) as e:
        C.require(name)
    msg = str(e.value)
    assert msg.startswith(f"{name} is not available; install it with `")
    assert C.COMPONENTS[name].install in msg


def test_in_ci_a_missing_component_fails(monkeypatch):
    monkeypatch.setenv(C.REQUIRE_ENV, "1")
    monkeypatch.setitem(C.COMPONENTS, "vllm",
                        dataclasses.replace(C.COMPONENTS["vllm"], find=lambda: None))
    with pytest.raises(pytest.fail.Exception) as e:
        C.require("vllm")
    assert "prefilltui demo --engine vllm --prepare-only" in str(e.value)
    assert "PREFILLTUI_REQUIRE_COMPONENTS=1" in str(e.value)


def test_apt_components_name_their_package():
    for c in C.COMPONENTS.values():
        if c.apt:
            assert c.install == "apt-get install " + " ".join(c.apt)
