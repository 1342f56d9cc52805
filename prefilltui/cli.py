"""Command-line entry point: ``prefilltui [URL | COMMAND] ...``.

``prefilltui URL`` opens the live TUI against a server (the ``watch`` command);
every other use goes through a subcommand.  Each subcommand lives in
``prefilltui/commands/<name>.py`` and exposes ``register(subparsers)``.
Exit codes: ``exit_codes.ExitCode`` (0 ok, 2 usage error, 3 server unreachable / every
probe failed, 4 ``status`` found an unhealthy target, 1 any other failure, always with a
one-line reason, never a traceback).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from prefilltui import __version__
from prefilltui.exit_codes import ExitCode

#: (subcommand, module) in the order --help lists them.
COMMANDS = (
    ("watch", "prefilltui.commands.watch"),
    ("demo", "prefilltui.commands.demo"),
    ("sweep", "prefilltui.commands.sweep"),
    ("estimate", "prefilltui.commands.estimate"),
    ("report", "prefilltui.commands.report"),
    ("cache-check", "prefilltui.commands.cache_check"),
    ("exporter", "prefilltui.commands.exporter"),
    ("status", "prefilltui.commands.status"),
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (tests and docs use it too)."""
    parser = argparse.ArgumentParser(
        prog="prefilltui",
        description=(
            "Measure the prefill phase of LLM inference: fire one-token probes at an "
            "OpenAI-compatible server, fit TTFT = a + b*n over prompt length n, and hold "
            "the prefill throughput 1/b against the hardware's roofline.\n\n"
            "  prefilltui URL            live TUI against a server (same as 'prefilltui watch URL')\n"
            "  prefilltui URL URL ...    fleet overview, one row per server (or --config FILE)\n"
            "  prefilltui demo           live TUI against a local llama.cpp + SmolLM2 server\n"
            "  prefilltui COMMAND -h     help for one command"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"prefilltui {__version__}")
    parser.set_defaults(func=None)  # each subcommand sets its own
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _name, module in COMMANDS:
        importlib.import_module(module).register(sub)
    return parser


def _normalise_argv(argv: list[str]) -> list[str]:
    """``prefilltui URL ...`` -> ``prefilltui watch URL ...``; ``prefilltui --config F``
    (the fleet overview of a target file; ``--file-sd F`` / ``--http-sd U`` alike) ->
    ``prefilltui watch --config F``."""
    names = {name for name, _ in COMMANDS}
    lists = ("--config", "--file-sd", "--http-sd")  # a target list: the fleet overview
    if argv and (argv[0] in lists or argv[0].startswith(tuple(f"{f}=" for f in lists))):
        return ["watch"] + argv
    for i, a in enumerate(argv):
        if a.startswith("-"):
            if a in ("-h", "--help", "--version"):
                return argv
            continue
        if a not in names:
            return argv[:i] + ["watch"] + argv[i:]
        return argv
    return argv


class _OneLine(logging.Formatter):
    """``prefilltui: <message>`` without the traceback (the user sees one line)."""

    def formatException(self, ei) -> str:  # noqa: N802 (logging's name)
        return ""

    def format(self, record: logging.LogRecord) -> str:
        from prefilltui.model.sanitize import clean

        record.exc_text = ""
        line = super().format(record)
        if record.exc_info and record.exc_info[1] is not None:
            e = record.exc_info[1]
            line += f": {type(e).__name__}: {e}"
        return clean(line, multiline=True)  # log lines quote servers: escape controls


class _CurrentStderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is at emit time (the TUI redirects it)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def _setup_logging() -> None:
    root = logging.getLogger("prefilltui")
    if not root.handlers:
        handler = _CurrentStderr()
        handler.setFormatter(_OneLine("prefilltui: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
        root.propagate = False


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    from prefilltui.commands.signals import defer_sighup

    restore = defer_sighup(argv)  # first: the exporter's reload signal must not kill it
    try:
        return _main(argv)
    finally:
        restore()


def _main(argv: list[str]) -> int:
    _setup_logging()
    parser = build_parser()
    args = parser.parse_args(_normalise_argv(argv))
    if args.func is None:
        parser.print_help()
        return ExitCode.USAGE
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("prefilltui: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # stdout closed early (`prefilltui report X | head`): not an error.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return ExitCode.OK
