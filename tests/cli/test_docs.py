"""The docs show what the code does: every command in README.md, CONTRIBUTING.md and
docs/*.md is run by this test (offline: against the loopback fake server or the
fixture run file) or at least parsed by the real argument parser; every code block is
a command, a checked reference (an option list, a code layout, a call path) or says it
is a copy of a real run's output (``<!-- copied from a real run: ... -->``); and the run
summary's JSON fields are the ones docs/schema.md documents."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest

from prefilltui.cli import COMMANDS, build_parser, main
from tests.fakeserver import llama_routes
from tests.unit.test_depth import AttentionLlama

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
FIXTURE = ROOT / "tests" / "fixtures" / "runfile_3cadfd7.jsonl"
COPY = re.compile(r"<!-- copied from a real run: [^>]+-->\s*$")
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
#: Placeholders the docs write for a value, and a value that parses in their place.
PLACEHOLDERS = {"URL": "http://127.0.0.1:9", "RUN.jsonl": str(FIXTURE), "N": "64",
                "NAME": "m", "FILE": "out.txt", "…": "x"}
#: Programs a command line of a code block may start with, besides prefilltui.
OTHER_PROGRAMS = ("make", "python", "python3", ".venv/bin/python", ".venv/bin/pip",
                  ".venv/bin/lint-imports", "PREFILLTUI_SKIP_INTEGRATION=1", "docker", "helm")


def blocks() -> list[tuple[str, str, str, bool]]:
    """(doc, language, body, marked as a copy) of every fenced code block."""
    out = []
    for path in DOCS:
        text = path.read_text()
        for m in BLOCK.finditer(text):
            before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            out.append((path.name, m.group(1), m.group(2), bool(COPY.search(before))))
    return out


def _lines(body: str) -> list[str]:
    """Logical lines of a block: ``\\`` continuations joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [ln.split("  #")[0].strip() for ln in joined.splitlines() if ln.strip()]


def commands() -> list[tuple[str, str]]:
    """(doc, command) for every prefilltui command: a code-block line starting with it
    (or ``$ `` and it) and every inline code span running it."""
    out = []
    for doc, _lang, body, copy in blocks():
        for i, ln in enumerate(_lines(body)):
            ln = ln.removeprefix("$ ").removeprefix(".venv/bin/")
            if ln.startswith("prefilltui ") and (not copy or i == 0):
                out.append((doc, ln))
    for path in DOCS:
        text = BLOCK.sub("", path.read_text())
        for m in re.finditer(r"`([^`\n]*\bprefilltui [^`\n]*)`", text):
            span = m.group(1)
            out.append((path.name, span[span.index("prefilltui "):]))
    return out


def argv_of(command: str) -> list[str] | None:
    """The argv of a documented command with its placeholders filled in; None for a
    bare command name in prose ("`prefilltui sweep`")."""
    words = [w for w in shlex.split(command.replace("...", "").replace("[", "").replace("]", ""))
             if w != "prefilltui"]
    if len(words) == 1 and words[0] in {name for name, _ in COMMANDS}:
        return None
    return [PLACEHOLDERS.get(w, w) for w in words]


@pytest.mark.parametrize("doc,command", commands(), ids=lambda v: v[:60])
def test_every_documented_command_parses(doc, command):
    argv = argv_of(command)
    if argv is None:
        return
    from prefilltui.cli import _normalise_argv

    try:
        args = build_parser().parse_args(_normalise_argv(argv))
    except SystemExit as e:  # --help, or a usage error
        assert e.code == 0, f"{doc}: {command!r} does not parse"
        return
    assert args.func is not None, f"{doc}: {command!r} names no command"


def test_make_targets_and_bench_flags_of_the_docs_exist():
    """``make X`` names a Makefile target; ``python -m tests.bench`` flags exist."""
    makefile = (ROOT / "Makefile").read_text()
    bench_help = io.StringIO()
    from tests.bench.__main__ import main as bench_main

    with contextlib.redirect_stdout(bench_help), pytest.raises(SystemExit):
        bench_main(["--help"])
    for doc, _lang, body, _copy in blocks():
        for ln in _lines(body):
            words = ln.split()
            if "make" in words:
                target = words[words.index("make") + 1]
                assert re.search(rf"^{target}:", makefile, re.M), f"{doc}: make {target}?"
            if "tests.bench" in words:
                for flag in _flags(ln):
                    assert flag in bench_help.getvalue(), f"{doc}: tests.bench {flag}?"


def test_every_code_block_is_a_command_a_checked_reference_or_a_marked_copy():
    for doc, _lang, body, copy in blocks():
        lines = _lines(body)
        runs = lines and lines[0].removeprefix("$ ").startswith(("prefilltui",) + OTHER_PROGRAMS)
        checked = any(first_line(body).startswith(start) for start in REFERENCE_CHECKS)
        assert runs or copy or checked, \
            f"{doc}: a code block that is neither a command, a checked reference nor " \
            f"marked as a copy of a real run: {body[:80]!r}"


def first_line(body: str) -> str:
    return body.strip().splitlines()[0].strip()


# ------------------------------------------------------------- checked references


def _block_starting(doc: str, start: str) -> str:
    (body,) = [b for d, _l, b, _c in blocks() if d == doc and first_line(b).startswith(start)]
    return body


def _flags(body: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", body))


def _parser_flags(*commands: str) -> set[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return {o for c in commands for a in sub.choices[c]._actions for o in a.option_strings}


def check_option_summary() -> None:
    body = _block_starting("commands.md", "server     --api")
    missing = _flags(body) - _parser_flags("sweep", "watch", "report", "demo")
    assert not missing, f"docs/commands.md lists options no command has: {missing}"


def check_demo_options() -> None:
    body = _block_starting("demo-targets.md", "--threads N")
    missing = {f for f in _flags(body) if not f.startswith("--batch") and f != "--no-mmap"} \
        - _parser_flags("demo")
    assert not missing, f"docs/demo-targets.md lists options demo does not have: {missing}"


def check_code_layout() -> None:
    body = _block_starting("architecture.md", "prefilltui/")
    where = ROOT / "prefilltui"
    folder = where
    for ln in body.splitlines()[1:]:
        words = ln.split()
        if not words:
            continue
        if words[0].endswith("/") and not ln.startswith("    "):
            folder, words = where / words[0], words[1:]
        elif not ln.startswith("    "):
            folder = where  # files at the top of the package
        for w in words:
            assert (folder / w).exists(), f"docs/architecture.md names {folder / w}, not there"


def check_layers() -> None:
    body = _block_starting("architecture.md", "cli.py")
    for name in re.findall(r"\b[a-z_]+(?:\.py|/)", body):
        assert (ROOT / "prefilltui" / name).exists(), f"docs/architecture.md: {name}?"


def check_call_path(start: str = "prefilltui sweep URL --timeout 30") -> None:
    """Every ``pkg/module.name`` of an option's path (--timeout, --load) resolves to a
    real object."""
    body = _block_starting("architecture.md", start)
    refs = re.findall(r"\b((?:commands|measure|model|render|exporter|tui)(?:/[a-z_]+)+|session)"
                      r"\.([A-Za-z_]+)\b", body)
    assert len(refs) >= 5
    for module, name in refs:
        mod = importlib.import_module("prefilltui." + module.replace("/", "."))
        assert hasattr(mod, name), f"docs/architecture.md: {module}.{name} does not exist"


def check_exporter_toml() -> None:
    """The exporter target shown in docs/exporter.md loads as the exporter reads it,
    with its alert inputs (the explicit baseline, hang and staleness settings)."""
    import tempfile

    from prefilltui.exporter.config import load_toml

    body = _block_starting("exporter.md", "[[target]]")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "targets.toml"
        path.write_text(body)
        (t,) = load_toml(str(path))
    assert t.expected_throughput and t.hang_after_s and t.stale_window_s, t


def check_fleet_toml() -> None:
    """docs/fleet.md's target file loads with the exporter's loader, GPU pages and all."""
    import tempfile

    from prefilltui.exporter.config import load_toml

    body = _block_starting("fleet.md", "# fleet.toml")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "targets.toml"
        path.write_text(body)
        targets = load_toml(str(path))
    assert [t.name for t in targets] == ["gpu-01", "gpu-02"]
    assert targets[0].gpu_metrics_url and targets[0].gpus == "0" and targets[1].interval_s == 4


def check_file_sd_example():
    """docs/kubernetes.md's file_sd example is a list the exporter reads, labels applied."""
    from prefilltui.exporter.config import TargetConfig
    from prefilltui.exporter.discovery import decode, parse_groups

    body = _block_starting("kubernetes.md", '[{"targets": [')
    a, b = parse_groups(decode(body, "doc", True), "doc", TargetConfig(url="http://unset"))
    assert (a.label, b.url) == ("http://vllm-0.vllm.llm.svc:8000", "http://vllm-1.vllm.llm.svc:8000")
    assert a.probe.api_key_env == "VLLM_API_KEY" and a.roofline.gpu == "H100 SXM"


REFERENCE_CHECKS = {
    "server     --api completions|chat|responses": check_option_summary,
    "--threads N           CPU threads [-t] (default: all cores)": check_demo_options,
    "prefilltui/": check_code_layout,
    "cli.py                     argv -> the subcommand": check_layers,
    "prefilltui sweep URL --timeout 30": check_call_path,
    "prefilltui sweep URL --load decode:4": lambda: check_call_path(
        "prefilltui sweep URL --load decode:4"),
    "[[target]]": check_exporter_toml,
    "# fleet.toml (the exporter's target file)": check_fleet_toml,
    '[{"targets": [': check_file_sd_example,
}


@pytest.mark.parametrize("start", list(REFERENCE_CHECKS), ids=lambda s: s[:30])
def test_checked_references_hold(start):
    REFERENCE_CHECKS[start]()


# ------------------------------------------------------------- commands run offline


def _run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    return rc, out.getvalue()


def test_estimate_prints_what_the_page_shows():
    body = _block_starting("commands.md", "$ prefilltui estimate")
    command, _, shown = body.partition("\n")
    rc, out = _run(argv_of(command.removeprefix("$ ")))
    assert rc == 0 and out == shown


def test_report_commands_of_the_docs_run_on_a_run_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out = _run(["report", str(FIXTURE), "--svg", "fig.svg", "--html", "report.html",
                    "--no-plot"])
    assert rc == 0 and "Probes:" in out
    assert (tmp_path / "fig.svg").read_text().startswith("<svg")
    assert "<svg" in (tmp_path / "report.html").read_text()
    rc, out = _run(["report", str(FIXTURE), "--format", "json"])
    assert rc == 0 and json.loads(out)["schema"] == "prefilltui.summary/2"


def test_server_commands_of_the_docs_run_against_the_fake_server(fake_server, tmp_path,
                                                                 monkeypatch):
    """``sweep URL``, ``sweep URL --format json`` and ``cache-check URL --tokens N`` as
    the docs write them, against a llama.cpp-like fake server."""
    from tests.unit.test_diagnose import CachingLlama

    monkeypatch.chdir(tmp_path)
    srv = fake_server({**llama_routes(), "POST /v1/completions": AttentionLlama()})
    small = ["--lengths", "16,64,256", "--no-telemetry", "--out", str(tmp_path / "r.jsonl")]
    rc, out = _run(["sweep", srv.base_url, *small])
    assert rc == 0 and "requested  counted" in out and "Verdict:" in out
    rc, out = _run(["sweep", srv.base_url, "--format", "json", *small])
    assert rc == 0 and json.loads(out)["live"]["base_url"] == srv.base_url
    cache = fake_server({**llama_routes(), "POST /v1/completions": CachingLlama()})
    rc, out = _run(["cache-check", cache.base_url, "--tokens", "64"])
    assert rc == 0 and out.startswith("cache ")


# ------------------------------------------------------------- the summary schema


def _documented(section: str) -> str:
    text = (ROOT / "docs" / "schema.md").read_text()
    start = text.index(f"## {section}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_every_summary_field_is_documented(fake_server, tmp_path):
    srv = fake_server({**llama_routes(), "POST /v1/completions": AttentionLlama()})
    rc, out = _run(["sweep", srv.base_url, "--lengths", "16,64,256", "--repeats", "2",
                    "--depth", "0,200", "--no-telemetry", "--format", "json",
                    "--out", str(tmp_path / "r.jsonl"), "--peak-tflops", "2"])
    assert rc == 0
    d = json.loads(out)
    top = _documented("Top level")
    for key in d:
        assert f"`{key}`" in top, f"docs/schema.md does not document the field {key!r}"
    parts = {"`probes`": d["probes"], "`percentiles`": d["percentiles"]["by_length"][0],
             "`window`": d["window"], "`roofline`": d["roofline"],
             "`fixed_cost`": d["fixed_cost"], "`depth`": d["depth"]["rows"][0],
             "`diagnosis`": d["diagnosis"], "`live`": d["live"], "A fit": d["fit"]}
    for section, obj in parts.items():
        text = _documented(section)
        for key in obj:
            assert f"`{key}`" in text, f"docs/schema.md ({section}) lacks {key!r}"


def test_readme_is_the_front_page():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
