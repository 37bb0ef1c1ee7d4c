"""Files inside the cache or `--out`, reached without following a symbolic link anywhere below its root.

A cache folder may be writable by someone else (a shared runner cache, a CI cache restored from
another branch, a repository that sets ``cache-dir``), who can put a link, a FIFO or a folder where
an entry folder or file is expected. So every level below the cache root is opened relative to its
parent's descriptor with ``O_NOFOLLOW | O_DIRECTORY``: a link is refused, never followed, and a
folder checked once cannot be swapped under a later open, rename or unlink, which all take that
folder's descriptor. Files are opened with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO cannot block the
open) and must be regular files on the open descriptor (``fstat``); reads are bounded. The cache
root itself is the user's choice and may be a link (``~/.cache`` on another disk, say).

Every file export-check writes inside ``--out`` (reports and history there, the reduced subgraph, node
data, a bundle) goes through :func:`write_inside` for the same reason: ``--out`` may be a folder others
can write to, and a writer never follows a link it did not create there.

``pathlib`` and ``shutil`` cannot do this (they resolve every path again from the top and follow
links), hence this module.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import stat
import time
from collections.abc import Iterator
from pathlib import Path

CHUNK = 1 << 20
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
PARTIAL_MIN_AGE = 2.0  # seconds a .partial must be untouched before an unlocked one counts as abandoned


class Refused(Exception):
    """Something in the cache is not what export-check writes there (a link, a FIFO, too large)."""


def describe(mode: int) -> str:
    """What a file of this ``st_mode`` is, for a message: 'a symbolic link', 'a FIFO', ..."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "not a regular file"


def _plain(name: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise Refused(f"{name!r} is not a plain file name")
    return name


def check_regular(fd: int, shown: Path | str) -> os.stat_result:
    """``fstat`` of an open descriptor, which must be a regular file."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{shown} is {describe(st.st_mode)}, not a regular file")
    return st


def open_regular(path: Path, *, follow: bool = True) -> int:
    """A read descriptor on ``path``, which must be a regular file (checked on the descriptor; a
    FIFO does not block the open). ``follow=False`` refuses a symbolic link at ``path`` itself."""
    try:
        fd = os.open(path, _FILE if not follow else _FILE & ~os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise Refused(f"{path} is a symbolic link; not followed") from None
        raise
    try:
        check_regular(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def sha256_fd(fd: int, limit: int | None = None) -> tuple[str, int]:
    """sha256 and size of what ``fd`` reads from its current position; ``Refused`` beyond ``limit`` bytes."""
    return copy_fd(fd, None, limit)


def sha256_regular(path: Path) -> str:
    """sha256 of a regular file (a link to one is followed: used for the user's own source files)."""
    fd = open_regular(path)
    try:
        return sha256_fd(fd)[0]
    finally:
        os.close(fd)


def copy_fd(src: int, dst: int | None, limit: int | None = None) -> tuple[str, int]:
    """Copy ``src`` to ``dst`` (``None``: only hash) to the end; the sha256 and size of the bytes read.
    ``Refused`` beyond ``limit``."""
    digest, size = hashlib.sha256(), 0
    while block := os.read(src, CHUNK):
        size += len(block)
        if limit is not None and size > limit:
            raise Refused(f"more than the {limit} bytes expected")
        digest.update(block)
        if dst is not None:
            view = memoryview(block)
            while view:
                view = view[os.write(dst, view):]
    return digest.hexdigest(), size


def _lstat_at(folder_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(_plain(name), dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def sweep_partials(folder_fd: int, min_age: float = PARTIAL_MIN_AGE) -> int:
    """Remove the ``.partial`` files of writers that are gone (a run killed by SIGKILL between
    creating and committing one) from the folder open at ``folder_fd``: a regular file no process holds a
    ``flock`` on, untouched for ``min_age`` seconds (the moment between a writer's create and its lock).
    How many were removed."""
    removed = 0
    now = time.time()
    for name in os.listdir(folder_fd):
        if not (name.startswith(".") and name.endswith(".partial")):
            continue
        st = _lstat_at(folder_fd, name)
        if st is None or not stat.S_ISREG(st.st_mode) or now - st.st_mtime < min_age:
            continue
        try:
            fd = os.open(name, _FILE, dir_fd=folder_fd)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_ino != st.st_ino:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: a writer is at work on it
                continue
            again = _lstat_at(folder_fd, name)
            if again is not None and again.st_ino == st.st_ino:
                os.unlink(name, dir_fd=folder_fd)
                removed += 1
        finally:
            os.close(fd)
    return removed


class Folder:
    """An open folder below the cache root: every name in it is opened, replaced and removed
    through this descriptor, never through a path."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    @classmethod
    @contextlib.contextmanager
    def walk(cls, root: Path, parts: tuple[str, ...], *, create: bool) -> Iterator[Folder | None]:
        """The folder ``root/part/part/...``, every part opened without following links and made
        when ``create``; ``None`` when one is missing (and not ``create``). A part that is a link,
        a file or anything but a folder is ``Refused``."""
        if create:
            root.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if create:
                raise
            yield None
            return
        folder: Folder | None = cls(fd, root)
        try:
            for part in parts:
                assert folder is not None
                child = folder.child(part, create=create)
                folder.close()
                folder = child
                if folder is None:
                    break
            yield folder
        finally:
            if folder is not None:
                folder.close()

    def child(self, name: str, *, create: bool = False) -> Folder | None:
        """The sub-folder ``name``, opened without following a link; made when ``create``."""
        _plain(name)
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=self.fd)
        try:
            fd = os.open(name, _DIR, dir_fd=self.fd)
        except FileNotFoundError:
            if create:
                raise
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Refused(f"{self.path / name} is {self.what(name)}, not a folder export-check made; not followed") from None
            raise
        return Folder(fd, self.path / name)

    def lstat(self, name: str) -> os.stat_result | None:
        return _lstat_at(self.fd, name)

    def what(self, name: str) -> str:
        st = self.lstat(name)
        return "missing" if st is None else describe(st.st_mode)

    def open_file(self, name: str) -> tuple[int, os.stat_result]:
        """A read descriptor on the regular file ``name`` (not a link, not a FIFO) and its ``fstat``."""
        try:
            fd = os.open(_plain(name), _FILE, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused(f"{name} is a symbolic link; not followed") from None
            raise
        try:
            return fd, check_regular(fd, name)
        except BaseException:
            os.close(fd)
            raise

    def read(self, name: str, limit: int) -> bytes:
        """The bytes of the regular file ``name``, at most ``limit`` of them (``Refused`` if larger)."""
        fd, st = self.open_file(name)
        try:
            if st.st_size > limit:
                raise Refused(f"{name} is {st.st_size} bytes, more than the {limit} it may hold")
            data = bytearray()
            while len(data) <= limit and (block := os.read(fd, min(CHUNK, limit + 1 - len(data)))):
                data += block
            if len(data) > limit:
                raise Refused(f"{name} grew beyond the {limit} bytes it may hold")
            return bytes(data)
        finally:
            os.close(fd)

    def new_temp(self, label: str) -> tuple[str, int]:
        """A fresh hidden ``.partial`` file in this folder (its umask-honouring mode), open for writing.
        The descriptor holds an exclusive ``flock`` on it until it is closed: keep it open until the file
        is committed, so that :meth:`sweep_partials` of another run can tell it from an abandoned one."""
        name = f".{label}.{secrets.token_hex(8)}.partial"
        fd = os.open(name, _NEW, 0o666, dir_fd=self.fd)
        with contextlib.suppress(OSError):  # a filesystem without flock: an abandoned file then stays, as before
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return name, fd

    def sweep_partials(self, min_age: float = PARTIAL_MIN_AGE) -> int:
        """:func:`sweep_partials` of this folder."""
        return sweep_partials(self.fd, min_age)

    def commit(self, temp: str, name: str) -> None:
        """Rename ``temp`` onto ``name`` atomically (a link at ``name`` is replaced, not followed)."""
        os.replace(temp, _plain(name), src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def discard(self, temp: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=self.fd)

    def write_atomic(self, name: str, data: bytes, mode: int | None = None) -> None:
        """Write ``name`` whole or not at all: a temporary file, fsynced, renamed onto it, folder fsynced.
        ``mode``: its permission bits (else ``0o666`` less the umask)."""
        temp, fd = self.new_temp(name)
        try:
            try:
                if mode is not None:
                    os.fchmod(fd, mode)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
                self.commit(temp, name)  # while the descriptor (and its lock) is open: never swept as abandoned
            finally:
                os.close(fd)
        except BaseException:
            self.discard(temp)
            raise
        self.fsync()

    def remove_file(self, name: str) -> bool:
        """Unlink ``name`` if it is a regular file (a link, folder or FIFO there is left alone)."""
        st = self.lstat(name)
        if st is None or not stat.S_ISREG(st.st_mode):
            return False
        os.unlink(name, dir_fd=self.fd)
        return True

    def fsync(self) -> None:
        with contextlib.suppress(OSError):  # some filesystems refuse a directory fsync
            os.fsync(self.fd)


def _parts(root: Path, rel: str) -> tuple[str, ...]:
    parts = tuple(p for p in rel.split("/") if p not in ("", "."))
    if not parts:
        raise Refused(f"{rel!r} names no file inside {root}")
    return parts


def _no_link_at(folder: Folder, name: str, root: Path) -> os.stat_result | None:
    """``lstat`` of ``name``, refused when it is anything a writer must not write through: a symbolic
    link, a FIFO, a device, a folder."""
    st = folder.lstat(name)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise Refused(f"{folder.path / name}: is {describe(st.st_mode)} inside {root} that export-check did not make; "
                      "not written through it: remove it")
    return st


def within(path: Path, folder: Path | str | None) -> tuple[Path, str] | None:
    """``(folder, path relative to it)`` when ``path`` lies inside ``folder`` (as spelt, or below the
    folder's real path; no link below ``folder`` is resolved to decide), else None.

    >>> within(Path("/out/r.json"), "/out"), within(Path("/elsewhere/r.json"), "/out")
    ((PosixPath('/out'), 'r.json'), None)
    """
    if folder is None:
        return None
    target = os.path.abspath(path)
    for root in dict.fromkeys((os.path.abspath(folder), os.path.realpath(folder))):
        if target.startswith(root.rstrip("/") + "/"):
            return Path(root), os.path.relpath(target, root)
    return None


@contextlib.contextmanager
def appending(root: Path, rel: str) -> Iterator[int]:
    """An ``O_APPEND`` descriptor on the regular file ``root/rel`` (made when missing), reached as
    :func:`write_inside` reaches it; a file with another name (a hard link) is ``Refused`` too: what is
    added would land in the file outside as well."""
    parts = _parts(root, rel)
    with Folder.walk(root, parts[:-1], create=True) as folder:
        assert folder is not None
        name = _plain(parts[-1])
        _no_link_at(folder, name, root)
        try:
            fd = os.open(name, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666,
                         dir_fd=folder.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused(f"{folder.path / name}: is a symbolic link inside {root} that export-check did not make; "
                              "not written through it: remove it") from None
            raise
        try:
            got = check_regular(fd, folder.path / name)
            if got.st_nlink > 1:
                raise Refused(f"{folder.path / name}: has {got.st_nlink - 1} other name(s) (a hard link) inside {root}; "
                              "appending would change the file outside too: remove it")
            yield fd
        finally:
            os.close(fd)


def write_inside(root: Path, rel: str, data: bytes, *, append: bool = False, mode: int | None = None) -> Path:
    """Write ``data`` to ``root/rel`` without following a link anywhere below ``root`` (``--out``, the
    cache): every folder on the way is opened ``O_NOFOLLOW`` (made when missing), and a symbolic link,
    FIFO, device or folder at the file's own name is ``Refused``, never written through or replaced. The
    file is replaced atomically (a hard link there keeps its other name's bytes: only the name is
    replaced), or, with ``append``, added to in one write on an ``O_APPEND|O_NOFOLLOW`` descriptor, which
    refuses a file with another name (a hard link: the bytes would land in the file outside too).
    The path written; ``Refused`` (one line naming the path) or ``OSError``. For example
    ``write_inside(out, "reduced/onnx.onnx", data)`` where ``out/reduced`` links to ``~/models``:
    ``Refused("out/reduced is a symbolic link, not a folder export-check made; not followed")``.
    """
    parts = _parts(root, rel)
    if append:
        with appending(root, rel) as fd:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        return root.joinpath(*parts)
    with Folder.walk(root, parts[:-1], create=True) as folder:
        assert folder is not None
        name = _plain(parts[-1])
        st = _no_link_at(folder, name, root)
        folder.write_atomic(name, data, mode if mode is not None or st is None else stat.S_IMODE(st.st_mode))
        return folder.path / name
