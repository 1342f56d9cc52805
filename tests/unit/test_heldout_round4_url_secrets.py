"""Held-out round 4, URL shapes: a secret query parameter after a ``;`` separator
(``?api-version=2024-10-21;api-key=...``, as some gateways and older frameworks split
queries) was shown in full by ``display_url``, the one function every screen, log line,
label and file name uses, while ``scrub_secrets`` masked it; service discovery let such
an entry through (Prometheus would store the key as a label)."""

from __future__ import annotations

import pytest

from prefilltui.exporter.config import TargetConfig
from prefilltui.exporter.discovery import parse_groups
from prefilltui.model.redact import display_url, scrub_secrets

SECRET = "azk-7f3e9d2c1b0a"


@pytest.mark.parametrize("url", [
    f"https://r.openai.azure.com/openai/deployments/d?api-version=2024-10-21;api-key={SECRET}",
    f"https://r/x?a=1;api-key={SECRET}",
    f"https://r/x?a=1;token={SECRET}&b=2",
    f"https://r/x?api-key={SECRET};b=2",
])
def test_a_secret_after_a_semicolon_is_never_shown(url):
    shown = display_url(url)
    assert SECRET not in shown and "***" in shown, shown
    assert SECRET not in scrub_secrets(url)


def test_display_url_keeps_what_is_no_secret():
    url = "https://r/x?api-version=2024-10-21;tenant=a&model=m"
    assert display_url(url) == url


def test_a_discovered_entry_with_a_secret_after_a_semicolon_is_refused():
    doc = [{"targets": [f"https://r/v1?a=1;api-key={SECRET}"]}]
    with pytest.raises(ValueError) as e:
        parse_groups(doc, "sd.json", TargetConfig(url="http://unset"))
    assert "credential" in str(e.value) and SECRET not in str(e.value)
