"""Small local files read safely: a model ``config.json``, a theme, the exporter's TOML.

These files are small (a few KiB), but the path is the user's or a server's
(``--model-config``, vLLM's ``/v1/models`` root, a theme directory): it may name
``/dev/zero``, a FIFO, a disk image or a huge log.  ``read_text`` reads at most
``max_bytes`` (a longer file is refused, never read whole), drops a UTF-8 byte-order
mark (Windows editors write one), and names the file in every error.  ``load_toml``
adds TOML: a table nested past the recursion limit is a ``ValueError`` like any
other bad TOML, never a ``RecursionError``.
"""

from __future__ import annotations

import os
import select
import stat
import tomllib
from pathlib import Path
from typing import Any

#: Largest local configuration file read (bytes): a Hugging Face config.json is
#: 1-10 KiB, a theme < 2 KiB, an exporter file with MAX_TARGETS targets < 1 MiB.
MAX_CONFIG_BYTES = 4 * 2**20


def read_text(path: str | Path, max_bytes: int = MAX_CONFIG_BYTES, *,
              pipe: bool = False) -> str:
    """The UTF-8 text of ``path`` (a leading byte-order mark dropped).

    pipe: a FIFO is read too, waiting for its writer as a shell's ``--config <(...)``
    needs (a file read once, at a start or a reload); without it only a regular file
    is read (a file read again and again -- the service discovery's refresh, whose
    thread a FIFO with no writer held for ever).

    Raises:
        OSError: the file cannot be opened or read.
        ValueError: not a regular file (nor, with ``pipe``, a FIFO: a directory, a
            device or a socket is never waited on or read), longer than ``max_bytes``
            (read no further), or not UTF-8; the message names the file.
    """
    # opened without blocking, then checked: a FIFO's open() waits for its writer
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if pipe and stat.S_ISFIFO(mode):
            # wait for the writer on this very descriptor: closing it to open the FIFO
            # again, blocking, lost a writer that came in between (the open above lets
            # a shell's ``<(...)`` writer in, which may write all and close before a
            # second open, which then waited for a writer that never came: a hang).
            # A FIFO that never had a writer polls as not ready, so this waits.
            waiter = select.poll()
            waiter.register(fd, select.POLLIN)
            waiter.poll()
        elif not stat.S_ISREG(mode):
            raise ValueError(f"{path}: not a regular file (a directory, a FIFO, a device "
                             "or a socket); give a file")
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        try:
            os.close(fd)
        except OSError:
            pass
        raise
    with f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{path}: larger than {max_bytes // 2**20} MiB: not a configuration "
                         "file (read no further)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason}); save it "
                         "as UTF-8") from None
    return text[1:] if text.startswith("\ufeff") else text


def load_toml(path: str | Path, max_bytes: int = MAX_CONFIG_BYTES, *,
              pipe: bool = False) -> dict[str, Any]:
    """The TOML document of ``path`` (``read_text``, ``pipe`` as there, + ``tomllib``).

    Raises:
        OSError: unreadable; ValueError: too large, not UTF-8, or not valid TOML (the
        message names the file and, for bad TOML, the line and column).
    """
    return loads_toml(read_text(path, max_bytes, pipe=pipe), str(path))


def loads_toml(text: str, where: str) -> dict[str, Any]:
    """``tomllib.loads(text)``; every failure a ``ValueError`` naming ``where``."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{where}: {e}") from None
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply to read") from None
