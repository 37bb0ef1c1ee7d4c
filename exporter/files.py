"""Files: the one atomic write, sha256, readable-file checks and the output directory and its lock.

Atomic writes, shared by artifacts, golden sets, the cache and reports: a reader of ``path`` sees
the previous file (or none) or the complete new one, never half of one. The data goes to a
temporary sibling, is fsynced, then ``os.replace``-d onto ``path``, and the directory entry is
fsynced. A failure removes the temporary file and re-raises.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import CheckpointError, ExportCheckError, OutputError


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


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def check_readable_file(path: Path, what: str, fix: str, error: type[ExportCheckError] = CheckpointError) -> None:
    """Fail early, before expensive work, when ``path`` is not a readable, non-empty file."""
    if not path.exists():
        parent = next((p for p in path.parents if p.exists()), None)
        if parent is not None and not parent.is_dir():
            raise error(f"{path}: {what} not found ({parent} is a file, not a folder); {fix}")
        raise error(f"{path}: {what} not found; {fix}")
    if not path.is_file():
        # Directories, FIFOs, sockets, devices: opening some of them would block or never end.
        raise error(f"{path}: {what} is not a regular file; {fix}")
    try:
        with open(path, "rb") as fh:
            empty = not fh.read(1)
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror or exc}); check its permissions") from None
    if empty:
        raise error(f"{path}: {what} is empty (0 bytes); re-save it with torch.save(model.state_dict(), path)")


@contextlib.contextmanager
def locked_out_dir(out_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the output directory so two runs never interleave their artifacts.

    Another run holding it is waited for rather than failed: the outcome is the same files.
    """
    from filelock import FileLock

    lock = FileLock(str(out_dir / ".export-check.lock"))
    try:
        lock.acquire()
    except OSError as exc:
        raise OutputError(f"{out_dir}: cannot write there ({exc.strerror or exc}); pass --out to a writable directory") from None
    try:
        yield
    finally:
        lock.release()


def prepare_out_dir(out_dir: Path) -> Path:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(
            f"{out_dir}: cannot create the output directory ({exc.strerror or exc}); pass --out to a writable directory"
        ) from None
    if not out_dir.is_dir():
        raise OutputError(f"{out_dir}: exists and is not a directory; pass --out to a directory")
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise OutputError(f"{out_dir}: not writable; pass --out to a writable directory")
    return out_dir


@dataclass(frozen=True)
class FileInfo:
    """A file as the report shows it: where, how big, its sha256."""

    path: str
    size_bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size_bytes": self.size_bytes, "sha256": self.sha256}


def file_info(path: Path) -> FileInfo:
    """Path, size and sha256 of a file, as the report shows it."""
    return FileInfo(path=str(path), size_bytes=path.stat().st_size, sha256=sha256_file(path))
