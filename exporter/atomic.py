"""Atomic file writes, shared by artifacts, golden sets, the cache and reports.

A reader of ``path`` sees the previous file (or none) or the complete new one, never half of one:
the data goes to a temporary sibling, is fsynced, then ``os.replace``-d onto ``path``, and the
directory entry is fsynced. A failure removes the temporary file and re-raises.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (best effort: some filesystems refuse directory fsync)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def replacing(path: Path, tmp: Path | None = None) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write; on success it becomes ``path`` atomically.

    ``tmp`` names the temporary file (e.g. after the writer's pid, so a crashed writer's leftovers
    can be found); by default a fresh hidden ``.partial`` name is made in ``path``'s folder.
    """
    if tmp is None:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    fsync_dir(path.parent)


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with replacing(path) as tmp:
        tmp.write_bytes(data)
