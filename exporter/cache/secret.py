"""The cache key: the secret that proves a cache entry was written by this user's export-check.

Every entry's ``meta.json`` carries an HMAC-SHA256 under this key (``sealed``), so being able to
write the cache folder (a shared runner cache, a CI cache restored from another branch, a repository
that sets ``cache-dir``) is not enough to make export-check use an entry. The key lives outside the
cache folder:

- ``$EXPORT_CHECK_CACHE_KEY_FILE`` when set: a team or a CI system that shares a cache on purpose
  gives every user the same key file (each their own copy, mode 0600);
- else ``$XDG_CONFIG_HOME/export-check/cache.key``, else ``~/.config/export-check/cache.key``.

A missing key file is created once: 32 random bytes, mode 0600, written to a private temporary file
and hard-linked into place (``link`` fails if the name exists, like ``O_EXCL``, so two first runs at
once agree on one key and neither reads a half-written one). A key file that is inside the cache
folder, not a regular file, not owned by this user, readable or writable by anyone else, shorter
than 32 bytes, or in a folder others can write, proves nothing and is refused with one line.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ExportCheckError
from ..nofollow import describe

KEY_ENV = "EXPORT_CHECK_CACHE_KEY_FILE"
KEY_BYTES = 32
MAX_KEY_BYTES = 4096


class CacheKeyError(ExportCheckError):
    """The cache key file cannot be used (exit 2): it could not prove who wrote an entry."""


class CacheKeyUnavailable(CacheKeyError):
    """There is no key and none can be made (an unwritable home or config folder): the cache is best
    effort, so a check goes on without it and says so, where a key that proves nothing stops it."""


@dataclass(frozen=True)
class CacheKey:
    path: Path
    secret: bytes = field(repr=False)

    def mac(self, message: bytes) -> str:
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()


def key_file_path() -> Path:
    """Where this user's cache key is (see the module docstring)."""
    named = os.environ.get(KEY_ENV)
    if named:
        return Path(os.path.expanduser(named)).absolute()
    config = os.environ.get("XDG_CONFIG_HOME")
    base = Path(config) if config and Path(config).is_absolute() else Path.home() / ".config"
    return base / "export-check" / "cache.key"


def load_key(cache_root: Path) -> CacheKey:
    """This user's cache key, made on first use; ``CacheKeyError`` when it cannot be trusted."""
    path = key_file_path()
    fix = f"or set {KEY_ENV} to a key file of yours, or pass --no-cache"
    real_key, real_root = Path(os.path.realpath(path)), Path(os.path.realpath(cache_root))
    if real_key == real_root or real_root in real_key.parents:
        raise CacheKeyError(f"{path}: the cache key is inside the cache folder {cache_root}, so anyone who can write "
                            f"the cache could forge entries; keep the key elsewhere (unset {KEY_ENV}, or point it "
                            f"outside {cache_root})")
    if not os.path.lexists(path):
        try:
            _create(path)
        except OSError as exc:
            raise CacheKeyUnavailable(f"{path}: cannot create the cache key ({exc.strerror or exc}); make its folder "
                                      f"writable {fix}") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise CacheKeyError(f"{path}: cannot read the cache key ({exc.strerror or exc}); chmod 600 it, delete it "
                            f"(export-check makes a new one and rebuilds its cache once) {fix}") from None
    try:
        secret = _read_checked(fd, path)
    finally:
        os.close(fd)
    _check_folder(path.parent, path)
    return CacheKey(path, secret)


def _read_checked(fd: int, path: Path) -> bytes:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise CacheKeyError(f"{path}: the cache key is {describe(st.st_mode)}, not a regular file of {KEY_BYTES} random "
                            "bytes; remove it (export-check makes a new one)")
    if st.st_uid != os.geteuid():
        raise CacheKeyError(f"{path}: the cache key is owned by uid {st.st_uid}, not by you (uid {os.geteuid()}), so "
                            f"it proves nothing about who wrote the cache; use a copy of your own (cp, then chmod 600)")
    if st.st_mode & 0o077:
        raise CacheKeyError(f"{path}: the cache key is readable or writable by others (mode {stat.S_IMODE(st.st_mode):04o}), "
                            f"so anyone could forge cache entries with it; delete it (export-check makes a new one and "
                            f"rebuilds its cache once), or chmod 600 {path} if no one else could have read it")
    data = os.read(fd, MAX_KEY_BYTES + 1)
    if len(data) < KEY_BYTES or len(data) > MAX_KEY_BYTES:
        raise CacheKeyError(f"{path}: the cache key is {len(data)}{'+' if len(data) > MAX_KEY_BYTES else ''} bytes, "
                            f"not {KEY_BYTES} to {MAX_KEY_BYTES}; delete it (export-check makes a new one)")
    return data


def _check_folder(folder: Path, path: Path) -> None:
    try:
        st = os.stat(folder)
    except OSError as exc:
        raise CacheKeyError(f"{path}: cannot check the folder holding the cache key ({exc.strerror or exc})") from None
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid not in (os.geteuid(), 0) or (mode & 0o022 and not mode & stat.S_ISVTX):
        raise CacheKeyError(f"{path}: the folder holding the cache key ({folder}, mode {mode:04o}, uid {st.st_uid}) "
                            f"can be written by others, who could replace the key; chmod go-w {folder}, or set "
                            f"{KEY_ENV} to a key in a folder of your own")


def _create(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.parent / f".{path.name}.{secrets.token_hex(8)}.partial"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, path)  # fails if another run made the key first: then both use that one
        except FileExistsError:
            pass
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            os.rename(temp, path)  # a filesystem without hard links; a race here costs one rebuild
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
