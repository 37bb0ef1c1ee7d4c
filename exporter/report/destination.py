"""Where a report goes, and how it is written there, the way a good Unix tool writes its output.

- ``-`` is standard output, and so are ``/dev/stdout``, ``/dev/fd/1`` and ``/proc/self/fd/1`` (and a
  symbolic link to one of them): the text goes to the descriptor the process already holds, as the
  shell does for ``/dev/fd/N``. Reopening it instead would truncate a ``> log`` redirection or
  write over what was printed before; replacing it (as root) would replace the machine's
  ``/dev/stdout`` link with a regular file.
- A path that is not a regular file (a FIFO, a character device such as ``/dev/null`` or a
  terminal) is written through, never replaced.
- A regular file (or a new one) is replaced atomically: readers see the old report or the whole new
  one. A new file gets ``0o666`` less the umask; a file replaced keeps its permission bits, as
  ``> file`` would.
- A symbolic link is followed: its target is replaced atomically and the link is kept; but never one
  inside ``--out`` (``inside``), a folder others may write to (a CI cache, a shared runner): there the
  report is written without following any link below ``--out`` (``nofollow.write_inside``), and a link,
  FIFO or device at its name, or a linked folder on the way, is refused in one line.
- ``append`` (``--markdown-append``, GitHub's ``$GITHUB_STEP_SUMMARY`` convention) adds the text at
  the end, in one ``write`` on an ``O_APPEND`` descriptor, so several checks in one job each add
  their summary.

>>> describe(Path("-"))
'standard output'
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import files

STDOUT_NAME = "-"
_FD_LINK = re.compile(r"^/(?:proc/(?:self|thread-self|\d+)(?:/task/\d+)?|dev)/fd/(\d+)$")
_STD_LINK = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_MAX_HOPS = 40  # the kernel's own limit on symbolic links in one lookup
_OPEN_FLAGS = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


@dataclass(frozen=True)
class Destination:
    """Where a report's bytes go: ``fd`` (a descriptor this process holds), else ``path`` written
    through (``through``: not a regular file) or replaced atomically."""

    shown: Path
    fd: int | None = None
    path: Path | None = None
    through: bool = False


def _fd_alias(path: str) -> int | None:
    """The descriptor number ``path`` names if it is ``/dev/stdout``, ``/dev/fd/N`` or this process's
    ``/proc/self/fd/N``; another process's ``/proc/PID/fd/N`` is written through by path instead."""
    if path in _STD_LINK:
        return _STD_LINK[path]
    match = _FD_LINK.match(path)
    if match is None:
        return None
    pid = path.split("/")[2]
    if path.startswith("/proc/") and pid not in ("self", "thread-self", str(os.getpid())):
        return None
    return int(match.group(1))


def resolve(path: Path) -> Destination:
    """Follow ``path``'s symbolic links one by one (the folders on the way resolved too), stopping at
    a descriptor alias; the last path is the file to write."""
    if str(path) == STDOUT_NAME:
        return Destination(shown=path, fd=1)
    current = os.path.abspath(path)
    for _ in range(_MAX_HOPS):
        folder, name = os.path.split(current)
        current = os.path.join(os.path.realpath(folder), name)
        fd = _fd_alias(current)
        if fd is not None:
            return Destination(shown=path, fd=fd)
        if not os.path.islink(current):
            break
        current = os.path.join(os.path.dirname(current), os.readlink(current))
    else:
        raise OSError(errno.ELOOP, "too many levels of symbolic links", str(path))
    try:
        mode = os.stat(current).st_mode
    except FileNotFoundError:
        return Destination(shown=path, path=Path(current))
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
    return Destination(shown=path, path=Path(current), through=not stat.S_ISREG(mode))


def describe(path: Path) -> str:
    """How a message names a report's destination: ``standard output``, or the path."""
    return "standard output" if str(path) == STDOUT_NAME else str(path)


def is_stdout(path: Path) -> bool:
    """Whether ``path`` writes to this process's standard output (``-``, ``/dev/stdout``, a link to it)."""
    try:
        return resolve(path).fd == 1
    except OSError:
        return False


def write(path: Path, data: bytes, append: bool = False, inside: Path | str | None = None) -> None:
    """Write ``data`` to ``path`` as the module docstring says (``inside``: the run's ``--out``); raises
    ``OSError``, or ``nofollow.Refused`` for a link inside ``inside``."""
    from ..nofollow import within, write_inside

    found = within(path, inside) if str(path) != STDOUT_NAME else None
    if found is not None:
        write_inside(*found, data, append=append)
        return
    where = resolve(path)
    if where.fd is not None:
        _write_descriptor(where.fd, data)
        return
    assert where.path is not None
    if append or where.through:
        flags = _OPEN_FLAGS | (os.O_APPEND | os.O_CREAT if append else 0)
        fd = os.open(where.path, flags, 0o666)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        return
    try:
        kept = stat.S_IMODE(os.stat(where.path).st_mode)
    except FileNotFoundError:
        kept = None
    with files.replacing(where.path, mode=kept) as tmp:
        tmp.write_bytes(data)


def _write_descriptor(fd: int, data: bytes) -> None:
    stream = {1: sys.stdout, 2: sys.stderr}.get(fd)
    if stream is not None:
        stream.flush()  # keep the order of what was printed before
        buffer = getattr(stream, "buffer", None)
        if buffer is None:  # a replaced stream (pytest's capture, io.StringIO)
            stream.write(data.decode("utf-8", errors="replace"))
        else:
            buffer.write(data)
            buffer.flush()
        stream.flush()
        return
    _write_all(fd, data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
