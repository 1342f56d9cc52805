"""Held-out, URL shapes: a secret query parameter after a ``;`` separator
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


# -- a URL pasted without its scheme, or in a shape urllib cannot parse, in an error

@pytest.mark.parametrize("url", [f"user:{SECRET}@gpu-01:8000", f"http://[u:{SECRET}@h]:1",
                                 f"u:{SECRET}@h/metrics"])
def test_display_url_masks_a_password_in_a_url_without_its_scheme(url):
    assert SECRET not in display_url(url) and "***@" in display_url(url)


@pytest.mark.parametrize("url", [f"user:{SECRET}@gpu-01:8000", f"http://[u:{SECRET}@h]:1"])
def test_the_command_line_refusing_such_a_url_never_prints_its_password(url, capsys):
    from prefilltui.cli import main

    with pytest.raises(SystemExit) as e:
        main(["sweep", url])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "is not a server URL" in err and SECRET not in err, err


@pytest.mark.parametrize("page", [f"ftp://u:{SECRET}@h/metrics", f"u:{SECRET}@h/metrics"])
def test_a_gpu_page_refused_in_a_target_never_shows_its_password(page):
    from prefilltui.exporter.config import check, target

    with pytest.raises(ValueError) as e:
        check(target("http://h:1", TargetConfig(url="http://unset"), gpu_metrics_url=page),
              "targets.toml target 1")
    assert "gpu_metrics_url" in str(e.value) and SECRET not in str(e.value)
    with pytest.raises(ValueError) as e:  # the same key from service discovery
        parse_groups([{"targets": ["h:1"], "labels": {"__prefilltui_gpu_metrics_url": page}}],
                     "sd.json", TargetConfig(url="http://unset"))
    assert SECRET not in str(e.value)
