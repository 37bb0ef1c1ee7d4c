"""An artifact's files into and out of a cache entry: each stored by content name with the identities that
let a hit put it in ``--out`` later without writing or hashing its bytes again where that proves nothing new
(``store_file``, ``restore_file``; the files of an artifact: artifacts/parts.py).

A stored file's sealed description (``sealed.Stored``) carries, beside its sha256 and size, two
identities, each ``[boot, device, inode, size, mtime_ns]``: ``seen``, of the file in the entry folder
as it was written and hashed, and ``placed``, of the file in ``--out`` the run measured. An identity
matches only on the same boot of the same machine (``/proc/sys/kernel/random/boot_id``; where the
system has none, nothing matches and every file is hashed as before), for the same inode, unchanged
since (a write moves ``mtime``). Per file, in order:

1. The entry's file still has its ``seen`` identity, is owned by this user and writable by no one else
   (so its bytes are still the ones hashed when stored), and ``--out`` already holds the ``placed`` file
   (the warm run after a cold one in the same ``--out``) or that very file: nothing is written, nothing hashed.
2. The entry's file is unaltered so (as in 1), ``--out`` holds something else: it is hard-linked into ``--out`` (a graph, a
   TorchScript or ``.pt2`` file: no byte written) or, for an ONNX ``.data`` file, copied without hashing
   (onnx refuses external data with more than one link, "a potential hardlink attack", so a linked
   ``.data`` would fail anyone's ``onnx.load`` of the file in ``--out``).
3. Anything else: copied into ``--out`` and the copy hashed against the sealed sha256 (the bytes as
   they will ship), as every hit was before. A mismatch is ``Damaged``: the entry is rebuilt.

What this trusts (docs/explanation/trust-model.md, "The artifact cache"): an untrusted writer of the
cache folder can replace a file (a new inode: no match) but not rewrite one this user owns and no one
else may write; a file restored from a CI cache or another machine is a new inode on another boot.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

from ..files import current_umask
from ..nofollow import Folder, Refused, copy_fd, open_regular
from .sealed import Stored

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
CHUNK = 16 << 20


class Mismatch(Exception):
    """The bytes put in ``--out`` are not the sealed ones (the caller marks the entry damaged)."""


def boot() -> str:
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip()
    except OSError:
        return ""


def identity(st: os.stat_result) -> tuple[Any, ...]:
    """What says a file is the one described: this boot, its device, inode, size and mtime; () where the system has no boot id."""
    found = boot()
    return (found, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) if found else ()


def _matches(st: os.stat_result | None, recorded: tuple[Any, ...]) -> bool:
    return bool(recorded) and st is not None and stat.S_ISREG(st.st_mode) and identity(st) == tuple(recorded)


def _unaltered(st: os.stat_result, recorded: tuple[Any, ...]) -> bool:
    """The entry's file is the one hashed when stored, and only this user could have written it since."""
    return _matches(st, recorded) and st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def store_file(folder: Folder, path: Path, expected_sha256: str | None) -> dict[str, Any]:
    """Copy the regular file ``path`` (a link there is refused) into the entry ``folder`` under its content name,
    ``<sha256[:16]><suffix>``; its sealed description as :meth:`Stored.to_meta` gives it, less ``as``, with its
    identities in the folder (``seen``) and at ``path`` (``placed``). ``Mismatch`` when the bytes are not ``expected_sha256``."""
    src = open_regular(path, follow=False)
    try:
        temp, out = folder.new_temp("artifact")
        try:
            try:
                os.fchmod(out, 0o644 & ~current_umask())  # writable by this user only: what lets a hit trust it unhashed
                sha, size = copy_fd(src, out)
                os.fsync(out)
                if expected_sha256 is not None and sha != expected_sha256:
                    raise Mismatch(f"{path.name} changed while being stored")
                target = f"{sha[:16]}{path.suffix}"
                folder.commit(temp, target)  # while its descriptor holds the lock (Folder.sweep_partials)
                seen, placed = record(out), record(src)
            finally:
                os.close(out)
        except BaseException:
            folder.discard(temp)
            raise
    finally:
        os.close(src)
    return {"file": target, "sha256": sha, "size": size, "seen": list(seen), "placed": list(placed)}


def restore_file(folder: Folder, stored: Stored, dest: Path, linkable: bool) -> str:
    """Put ``stored`` (in the entry ``folder``) at ``dest``; how: "in place", "linked", "copied" or "copied, hashed".
    ``Mismatch`` when the bytes are not the sealed ones; ``Refused``/``OSError`` as the folder's reads raise."""
    here = _lstat(dest)
    src, st = folder.open_file(stored.file)
    try:
        trusted = _unaltered(st, stored.seen) and st.st_size == stored.size
        linked_before = here is not None and (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino) and stat.S_ISREG(here.st_mode)
        if trusted and (_matches(here, stored.placed) or linked_before):
            return "in place"
        temp = dest.parent / f".{dest.name}.{os.urandom(8).hex()}.partial"
        try:
            linked = trusted and linkable and _link(folder, stored.file, temp, st)
            how = "linked" if linked else _copy(src, temp, stored, hashed=not trusted)
            os.replace(temp, dest)
        finally:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
    finally:
        os.close(src)
    return how


def _link(folder: Folder, name: str, temp: Path, st: os.stat_result) -> bool:
    """Hard-link the entry's ``name`` at ``temp``; ``False`` where it cannot be (another device, no hard links)
    or the link is not the inode that was checked (swapped meanwhile: the caller copies and hashes instead)."""
    try:
        os.link(name, temp, src_dir_fd=folder.fd, follow_symlinks=False)
    except OSError:
        return False
    linked = _lstat(temp)
    if linked is None or (linked.st_dev, linked.st_ino) != (st.st_dev, st.st_ino):
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        return False
    return True


def _copy(src: int, temp: Path, stored: Stored, hashed: bool) -> str:
    out = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        if hashed:
            sha, size = copy_fd(src, out, limit=stored.size)
        else:
            size = _copy_plain(src, out, stored.size)
            sha = stored.sha256
        os.fsync(out)
    finally:
        os.close(out)
    if size != stored.size:
        raise Mismatch(f"{stored.file} is truncated or grew ({size} bytes, expected {stored.size})")
    if sha != stored.sha256:
        raise Mismatch(f"{stored.file} changed (sha256 {sha[:12]}… != {stored.sha256[:12]}…)")
    return "copied, hashed" if hashed else "copied"


def _copy_plain(src: int, out: int, size: int) -> int:
    """Copy ``size`` bytes in the kernel (``copy_file_range``, else read and write); the bytes copied."""
    done = 0
    while done < size:
        try:
            moved = os.copy_file_range(src, out, min(CHUNK, size - done))
        except (AttributeError, OSError):
            block = os.read(src, min(CHUNK, size - done))
            view = memoryview(block)
            while view:
                view = view[os.write(out, view):]
            moved = len(block)
        if moved == 0:
            break
        done += moved
    if os.read(src, 1):
        raise Refused(f"more than the {size} bytes expected")
    return done


def record(fd: int) -> tuple[Any, ...]:
    """The identity of the open file ``fd`` now (for ``Stored.seen`` and ``Stored.placed``)."""
    return identity(os.fstat(fd))
