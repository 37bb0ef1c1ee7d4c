"""Files: the one atomic write, sha256, readable-file checks and the output directory and its lock.

Atomic writes, shared by artifacts, golden sets, the cache and reports: a reader of ``path`` sees
the previous file (or none) or the complete new one, never half of one. The data goes to a
temporary sibling, is fsynced, then ``os.replace``-d onto ``path``, and the directory entry is
fsynced. A failure removes the temporary file and re-raises. The file gets the mode a plain
``open(path, "w")`` would give (``0o666`` less the umask), not ``mkstemp``'s private ``0o600``.

Reading untrusted files (``read_regular``, ``open_beneath``): only regular files are read (checked
with ``fstat`` on the open descriptor, opened ``O_NONBLOCK`` so a FIFO cannot block the open),
never through a symbolic link (``O_NOFOLLOW`` at every level below the folder the caller trusts),
and never more than the caller's limit; a Git LFS pointer left in a checkout in place of the file is
recognised and said so (``lfs_pointer``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
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
def replacing(path: Path, tmp: Path | None = None, mode: int | None = None) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write; on success it becomes ``path`` atomically.

    ``tmp`` names the temporary file (e.g. after the writer's pid, so a crashed writer's leftovers
    can be found); by default a fresh hidden ``.partial`` name is made in ``path``'s folder.
    ``mode`` is the new file's permission bits (a report keeps those of the file it replaces);
    by default ``0o666`` less the umask.
    """
    if tmp is None:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~current_umask() if mode is None else mode)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    fsync_dir(path.parent)


def current_umask() -> int:
    """The process umask, read without changing it where the system says it (Linux ``/proc``)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii", errors="replace") as fh:
        for line in fh:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # elsewhere: set and restore (not thread-safe, but nothing here writes in threads)
    os.umask(mask)
    return mask


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


class UnsafeFile(OSError):
    """A file that is not read: not a regular file, a symbolic link, or larger than allowed."""


_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _refuse_link(exc: OSError, shown: Path) -> OSError:
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return UnsafeFile(exc.errno, "is a symbolic link", str(shown))
    if exc.errno == errno.ENOTDIR:
        return UnsafeFile(exc.errno, "a folder on the way is not a directory (or is a symbolic link)", str(shown))
    return exc


def open_beneath(root: Path, rel: str) -> int:
    """A read descriptor of the regular file ``root/rel`` (``rel`` a POSIX relative path), following
    no symbolic link below ``root``: every folder is opened ``O_NOFOLLOW|O_DIRECTORY`` from the one
    above, the file ``O_NOFOLLOW|O_NONBLOCK``, and its type is checked on the descriptor.

    Raises ``FileNotFoundError``, :class:`UnsafeFile` (a link, a FIFO, a device, a directory) or
    another ``OSError``. ``root`` itself is the caller's choice and may be a link.
    """
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise UnsafeFile(errno.EINVAL, "not a path inside the folder", rel)
    shown = root.joinpath(*parts)
    fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _refuse_link(exc, shown) from None
            # the next folder is held before the last is closed: a Ctrl-C between the two must not leave
            # the finally below closing a closed descriptor (EBADF, which would stand in for the interrupt)
            fd, previous = nxt, fd
            os.close(previous)
        try:
            file_fd = os.open(parts[-1], _READ_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise _refuse_link(exc, shown) from None
    finally:
        os.close(fd)
    _require_regular(file_fd, shown)
    return file_fd


def _require_regular(fd: int, shown: Path) -> None:
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
        raise UnsafeFile(errno.EINVAL, f"is {kind}, not a regular file", str(shown))


def open_regular(path: Path, follow: bool = False) -> int:
    """A read descriptor of ``path`` if it is a regular file (checked on the descriptor), opened
    non-blocking; a symbolic link is refused unless ``follow``."""
    flags = _READ_FLAGS & ~getattr(os, "O_NOFOLLOW", 0) if follow else _READ_FLAGS
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise _refuse_link(exc, path) from None
    _require_regular(fd, path)
    return fd


def read_fd(fd: int, limit: int, shown: Path) -> bytes:
    """All of the open file ``fd`` (closed afterwards), refusing more than ``limit`` bytes: the size
    is checked before reading, and a file growing meanwhile is cut at ``limit + 1`` and refused."""
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise UnsafeFile(errno.EFBIG, f"is {size:,} bytes, more than the {limit:,} allowed", str(shown))
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UnsafeFile(errno.EFBIG, f"grew past the {limit:,} bytes allowed while being read", str(shown))
    return data


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (no symbolic link, no FIFO), at most ``limit`` of them."""
    return read_fd(open_regular(path), limit, path)


# A Git LFS pointer (https://github.com/git-lfs/git-lfs/blob/main/docs/spec.md): under 1024 bytes, its
# first line the spec's URL; a checkout without `git lfs pull` holds these instead of the files.
_LFS_VERSIONS = (b"version https://git-lfs.github.com/spec/", b"version https://hawser.github.com/spec/")
_LFS_POINTER_MAX = 1024


def lfs_pointer(data: bytes) -> str | None:
    r"""What to say about a Git LFS pointer file standing in for the file, or None if ``data`` is not one.

    >>> lfs_pointer(b"version https://git-lfs.github.com/spec/v1\noid sha256:ab12cd34ef56ab12\nsize 2048\n")[:65]
    'is a Git LFS pointer, not the file (2,048 bytes, oid ab12cd34ef56'
    """
    if len(data) >= _LFS_POINTER_MAX or not data.startswith(_LFS_VERSIONS):
        return None
    size = re.search(rb"^size (\d{1,20})$", data, re.M)
    oid = re.search(rb"^oid sha256:([0-9a-f]{12})", data, re.M)
    facts = ", ".join(([f"{int(size.group(1)):,} bytes"] if size else []) + ([f"oid {oid.group(1).decode()}…"] if oid else []))
    return (f"is a Git LFS pointer, not the file{f' ({facts})' if facts else ''}: the checkout did not download it; run "
            "`git lfs pull` (in GitHub Actions: actions/checkout with `lfs: true`), then rerun")


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
    """A file as the report shows it: where, how big, its sha256. An artifact of several files (an ONNX graph
    and its external weights, artifacts/parts.py) is its file's path and sha256, ``parts`` the files beside
    it as (name, bytes, sha256), and ``size_bytes`` the total of all of them."""

    path: str
    size_bytes: int
    sha256: str
    parts: tuple[tuple[str, int, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"path": self.path, "size_bytes": self.size_bytes, "sha256": self.sha256}
        if self.parts:
            shown["parts"] = [{"name": n, "size_bytes": s, "sha256": h} for n, s, h in self.parts]
        return shown


def file_info(path: Path) -> FileInfo:
    """Path, size and sha256 of a file, as the report shows it."""
    return FileInfo(path=str(path), size_bytes=path.stat().st_size, sha256=sha256_file(path))


def zip_entry(name: str, compress_type: int) -> Any:
    """A ``zipfile.ZipInfo`` for ``name`` whose bytes do not depend on when or by whom it is written: the
    zip format's epoch as its time, mode 0644 (a bundle, a zipped Core ML package: the same inputs, the same bytes)."""
    import zipfile

    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = 0o644 << 16
    info.compress_type = compress_type
    return info
