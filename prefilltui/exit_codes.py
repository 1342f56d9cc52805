"""Process exit codes of every prefilltui command (``prefilltui ...; echo $?``)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What a command's exit status means."""

    OK = 0  # the command did its job (a sweep with some failed probes included)
    FAILURE = 1  # anything else: unreadable/unwritable file, setup failed, a bug
    USAGE = 2  # bad arguments or environment (also argparse's own code)
    UNREACHABLE = 3  # the server was never reached, or every probe failed
    UNHEALTHY = 4  # `status`: a target is unhealthy by the exporter's alert rules
    HANGUP = 129  # the live app's terminal hung up (128 + SIGHUP, as the signal would)
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, the shell convention)
