"""The exclusive lock every golden writer holds around its whole read-modify-commit.

``golden record`` and ``golden approve`` read the old manifest, compute, write and collect the old
set's files; two at once could each delete the reference the other just committed. The lock
serialises them: a second writer waits up to ``LOCK_TIMEOUT`` seconds, then fails with one line.

The lock is an ``flock`` on the golden folder itself (its directory descriptor), so there is no lock
file to be mistaken for golden data, counted when a folder must be empty, or left behind by a killed
writer (the kernel drops the lock with the process). Where the filesystem cannot ``flock`` a folder
(some network filesystems) it falls back to ``filelock`` on ``<golden folder>/.export-check.lock``,
a hidden name outside the golden data's names (``inputs/``, ``reference-*``), which nothing collects
or lists. Why not ``filelock`` first: its lock file stays in the user's golden folder after every
run and after a SIGKILL (the kill tests in tests/integration/test_faults.py found it as a leftover),
and beside the folder it would land in the user's own folder.

Readers (``check``, ``verify``) take no lock: the manifest is replaced atomically and names only
complete files.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import GoldenError, one_line

LOCK_TIMEOUT = 300.0  # seconds a second writer waits for the first
LOCK_NAME = ".export-check.lock"  # the fallback lock file, where folders cannot be flocked
_POLL = 0.05


def lock_path(golden_dir: Path) -> Path:
    """The fallback lock file of ``golden_dir`` (used only where a folder cannot be flocked)."""
    return golden_dir / LOCK_NAME


def _busy(golden_dir: Path, timeout: float) -> GoldenError:
    return GoldenError(f"{one_line(str(golden_dir))}: another export-check has been writing this golden set for over {timeout:.0f} s; "
                       "wait for it to finish, then run again")


@contextlib.contextmanager
def golden_lock(golden_dir: Path, timeout: float | None = None) -> Iterator[None]:
    """Hold the golden folder's write lock (waiting up to ``timeout`` seconds, ``LOCK_TIMEOUT`` by
    default), creating the folder if need be and removing it again if the block fails and leaves it empty."""
    import fcntl

    timeout = LOCK_TIMEOUT if timeout is None else timeout

    created = not os.path.lexists(golden_dir)
    try:
        golden_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(golden_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise GoldenError(f"{one_line(str(golden_dir))}: cannot create or open the golden folder ({exc.strerror or exc}); pass --golden "
                          "a writable folder") from None
    try:
        deadline = time.monotonic() + timeout
        fallback = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise _busy(golden_dir, timeout) from None
                time.sleep(_POLL)
            except OSError as exc:
                if exc.errno not in (errno.EBADF, errno.ENOLCK, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise
                fallback = True
                break
        with _file_lock(golden_dir, timeout) if fallback else contextlib.nullcontext():
            try:
                yield
            except BaseException:
                if created:
                    _remove_if_empty(golden_dir)
                raise
    finally:
        os.close(fd)  # drops the flock


@contextlib.contextmanager
def _file_lock(golden_dir: Path, timeout: float) -> Iterator[None]:
    from filelock import FileLock, Timeout

    path = lock_path(golden_dir)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise GoldenError(f"{one_line(str(path))}: the golden set's lock file is a symbolic link or not a regular file; remove it and "
                          "run again")
    lock = FileLock(str(path), timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise _busy(golden_dir, timeout) from None
    try:
        yield
    finally:
        lock.release()


def _remove_if_empty(golden_dir: Path) -> None:
    """Undo creating ``golden_dir`` (a failed first record): remove it if nothing is in it but an empty ``inputs``."""
    with contextlib.suppress(OSError):
        inputs = golden_dir / "inputs"
        if inputs.is_dir() and not inputs.is_symlink() and not any(inputs.iterdir()):
            inputs.rmdir()
        golden_dir.rmdir()  # fails, as it should, unless empty


__all__ = ["LOCK_NAME", "LOCK_TIMEOUT", "golden_lock", "lock_path"]
