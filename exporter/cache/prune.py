"""The cache kept under a size limit: least recently used entries go first, never one in use.

Every entry folder (``<cache-dir>/v<N>/<2 hex>/<64 hex>/``) records its last use in its own mtime:
storing writes into it, and every hit touches it (``store.ArtifactCache.lookup``). A run holds a
shared ``flock`` on each entry folder it reads or writes until it is done with the cache; eviction
takes an exclusive, non-blocking ``flock`` on the folder first and skips one it cannot get, so an
entry another run (a pytest-xdist worker, a fleet, a second CI job on the runner) is using is never
removed under it. A store or lookup that finds its folder unlinked meanwhile sees a miss.

Why ``flock`` on the folders and not ``filelock``: the kernel drops the locks with a killed process,
there is no lock file to follow through a planted link inside the cache (docs/explanation/trust-model.md,
"nothing below the cache root reached through a link"), and it is how the golden folder is locked
(exporter/golden/lock.py). One evictor at a time: an exclusive ``flock`` on the cache root; a run
that finds another evicting leaves it to that one.

Removal reaches nothing through a link: each folder is opened ``O_NOFOLLOW`` relative to its
parent's descriptor, and only its non-folder names are unlinked (a link is removed, never followed).

>>> parse_gb(5.0), parse_gb(0.5), parse_gb(0)
(5000000000, 500000000, None)
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .. import nofollow

GB = 10**9
DEFAULT_MAX_GB = 5.0
_LAYOUT = re.compile(r"v[0-9]{1,4}")
_SHARD = re.compile(r"[0-9a-f]{2}")
_ENTRY = re.compile(r"[0-9a-f]{64}")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_WAIT_POLL = 0.05


def parse_gb(gb: float) -> int | None:
    """The limit in bytes of ``gb`` (10^9 bytes each); ``None`` for 0, no limit."""
    return None if gb == 0 else int(round(gb * GB))


def shown_size(size: int) -> str:
    """
    >>> shown_size(0), shown_size(12_345), shown_size(5 * GB)
    ('0 B', '12.3 kB', '5.00 GB')
    """
    for unit, scale in (("GB", GB), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}" if unit != "GB" else f"{size / scale:.2f} GB"
    return f"{size} B"


@dataclass(frozen=True)
class EntryUse:
    path: Path
    size: int  # bytes of the files in the entry folder
    last_used: float  # the folder's mtime: its last store or hit


@dataclass(frozen=True)
class Usage:
    root: Path
    entries: tuple[EntryUse, ...]  # least recently used first

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)


@dataclass(frozen=True)
class Pruned:
    removed: int
    freed: int
    in_use: int  # entries over the limit that a running check holds, kept
    left: Usage
    limit: int | None


def _entry_size(fd: int) -> int:
    total = 0
    for name in os.listdir(fd):
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total


def _children(fd: int, pattern: re.Pattern[str]) -> Iterator[tuple[str, int]]:
    """The sub-folders of ``fd`` whose names match, each opened without following a link."""
    for name in sorted(os.listdir(fd)):
        if not pattern.fullmatch(name):
            continue
        try:
            child = os.open(name, _DIR, dir_fd=fd)
        except OSError:  # gone meanwhile, a link, or not a folder: not an entry
            continue
        try:
            yield name, child
        finally:
            os.close(child)


def usage(root: Path) -> Usage:
    """Every entry under ``root``, least recently used first (an absent cache: none)."""
    return Usage(root, _entries(root, sweep=False))


def _entries(root: Path, *, sweep: bool) -> tuple[EntryUse, ...]:
    """Every entry under ``root``, least recently used first; with ``sweep``, each entry's ``.partial`` files that
    killed runs left removed before it is measured (``nofollow.sweep_partials``: only those no writer holds; best
    effort, a folder that cannot be swept is measured as it is)."""
    found = []
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return ()
    try:
        for layout, layout_fd in _children(root_fd, _LAYOUT):
            for shard, shard_fd in _children(layout_fd, _SHARD):
                for name, entry_fd in _children(shard_fd, _ENTRY):
                    if sweep:
                        with contextlib.suppress(OSError):
                            nofollow.sweep_partials(entry_fd)
                    st = os.fstat(entry_fd)
                    found.append(EntryUse(root / layout / shard / name, _entry_size(entry_fd), st.st_mtime))
    finally:
        os.close(root_fd)
    return tuple(sorted(found, key=lambda e: (e.last_used, str(e.path))))


def _remove(entry: EntryUse) -> bool | None:
    """Remove one entry folder if no run holds it: ``True`` removed, ``False`` in use, ``None`` gone
    already or not removable (something other than files in it)."""
    parent, name = entry.path.parent, entry.path.name
    try:
        parent_fd = os.open(parent, _DIR)
    except OSError:
        return None
    try:
        try:
            fd = os.open(name, _DIR, dir_fd=parent_fd)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            if os.fstat(fd).st_nlink == 0:
                return None
            for child in os.listdir(fd):
                with contextlib.suppress(FileNotFoundError):
                    if not stat.S_ISDIR(os.stat(child, dir_fd=fd, follow_symlinks=False).st_mode):
                        os.unlink(child, dir_fd=fd)
            try:
                os.rmdir(name, dir_fd=parent_fd)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    return None  # a folder inside that export-check never makes: left alone
                raise
            return True
        finally:
            os.close(fd)  # drops the lock; a run that waited on it finds the folder unlinked
    finally:
        os.close(parent_fd)


@contextlib.contextmanager
def _evicting(root: Path, wait: float) -> Iterator[bool]:
    """The cache root's eviction lock: ``True`` when held; ``False`` when another evictor kept it for ``wait`` seconds."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield True
        return
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(_WAIT_POLL)
        yield True
    finally:
        os.close(fd)


def prune(root: Path, limit: int | None, *, wait: float = 0.0) -> Pruned | None:
    """Evict least recently used entries until ``root`` holds at most ``limit`` bytes (``None``: no
    limit, nothing evicted; 0: every entry not in use). ``None`` when another process is evicting and
    kept the root's lock for ``wait`` seconds."""
    with _evicting(root, wait) as held:
        if not held:
            return None
        now = Usage(root, _entries(root, sweep=True))  # one walk: abandoned .partial files swept, then every entry measured
        total, removed, freed, in_use = now.size, 0, 0, 0
        if limit is not None:
            for entry in now.entries:
                if total <= limit:
                    break
                outcome = _remove(entry)
                if outcome:
                    removed, freed, total = removed + 1, freed + entry.size, total - entry.size
                elif outcome is False:
                    in_use += 1
        return Pruned(removed, freed, in_use, usage(root) if removed else now, limit)


def evict(root: Path, limit: int | None) -> str | None:
    """After a run stored (while it still holds its own entries: they are never the ones evicted), the least
    recently used entries no run holds, evicted until ``root`` is under ``limit`` (``None``: no limit); what was
    done, as a line for the report, or ``None`` when nothing had to go. Best effort, as the cache."""
    if limit is None:
        return None
    try:
        pruned = prune(root, limit)
    except OSError as exc:
        return f"cache: could not evict old entries from {root} ({exc.strerror or exc}); run `export-check cache prune`"
    if pruned is None or (not pruned.removed and not pruned.in_use):
        return None
    line = f"cache: evicted {pruned.removed} least recently used entries ({shown_size(pruned.freed)}) to keep {root} under {shown_size(limit)}"
    if pruned.in_use:
        line += f"; {pruned.in_use} over the limit are in use by another run and stay"
    return line


def hold(fd: int) -> None:
    """A run's shared hold on an entry folder (``fd`` its open descriptor): eviction skips it while held."""
    fcntl.flock(fd, fcntl.LOCK_SH)


def touch(fd: int) -> None:
    """Record a use of the entry folder ``fd`` (its mtime: eviction removes the oldest first)."""
    with contextlib.suppress(OSError):  # a read-only cache still serves hits
        os.utime(fd)
