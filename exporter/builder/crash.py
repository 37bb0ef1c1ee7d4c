"""What a failed isolated build says: the row message for a crashed child, and a full disk named as such.

Its own module because both sides need it and neither needs the other's processes: the server
turns a write that failed for want of space into a plain error (``disk_full``), the parent words
a child that died (``crash_message``, ``last_words``) and cleans up after it (``remove_partial``).
The wording is what the rows show and the tests assert; change it here only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import signal
from pathlib import Path
from typing import Any

from ..errors import ArtifactError, plain_text
from .protocol import ENV_SWITCH

_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
_LOW_DISK = 16 << 20  # bytes free below which a crashed write is blamed on the disk
_DISK_FULL_TEXT = ("file write failed", "No space left", "File too large", "Disk quota exceeded")


def crash_message(signum: int | None, exit_code: int | None, path: Path, said: str | None = None) -> str:
    """The row's error for a build child that died by ``signum`` or exited with ``exit_code`` before it reported."""
    what = f"exited with code {exit_code} before reporting back"
    if signum:
        try:
            what = f"(signal {signum}, {signal.Signals(signum).name})"
        except ValueError:
            what = f"(signal {signum})"
    head = f"build crashed {what} in its child process" if signum else f"build crashed: its child process {what}"
    if said:
        head += f" ({said})"
    disk = disk_trouble(path)
    if disk:  # native writers often abort() when a write fails, rather than raise
        return f"{head}; {disk}; free space or pass --out to a larger disk"
    if signum == signal.SIGKILL:
        return f"{head}: killed, often by the kernel's out-of-memory killer; the other artifacts were not affected"
    return f"{head}; the other artifacts were not affected; rerun with {ENV_SWITCH}=0 under a debugger to see where"


def disk_trouble(path: Path) -> str | None:
    """Why writing ``path`` may have failed: a nearly full disk or a file size limit (``ulimit -f``)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY:
        return f"a file size limit of {soft} bytes is set (ulimit -f)"
    try:
        stat = os.statvfs(path.parent)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    if free < _LOW_DISK:
        return f"the output disk is full ({free // 1024} KB free)"
    return None


def last_words(stderr: str) -> str | None:
    """The line of a crashed child's stderr that says what went wrong, without the stack frames."""
    lines = [" ".join(line.split()) for line in plain_text(stderr).splitlines()]
    lines = [line for line in lines if line and not line.startswith(("frame #", "<omitting", "Exception raised from", "Fatal Python error"))]
    for line in lines:
        if "what():" in line:
            return line.split("what():", 1)[1].strip()[:200] or None
    return lines[-1][:200] if lines else None


def disk_full(exc: BaseException, path: Path) -> BaseException:
    """Say plainly when a write failed because the disk (or a file size limit) ran out."""
    text = str(exc)
    full = (isinstance(exc, OSError) and exc.errno in _DISK_FULL) or any(t in text for t in _DISK_FULL_TEXT)
    if not full:
        return exc
    return ArtifactError(
        f"writing {path.name} failed: no space left on the device or a file size limit reached "
        f"({' '.join(text.split())[:120]}); free space or pass --out to a larger disk"
    )


def revive(reply: dict[str, Any]) -> BaseException:
    """The exception a builder raised in its child, re-created here (or described, if it cannot be).

    An exit (``SystemExit``: ``sys.exit(0)`` in a model's forward or an exporter) or an interrupt raised there is
    the build's, never the run's: re-raised here it would end the run, with its exit code (0), before any row
    was judged. It becomes the row's error."""
    try:
        exc = pickle.loads(reply["exception"])
        if isinstance(exc, BaseException):
            return the_rows(exc)
    except Exception:
        pass
    return ArtifactError(reply.get("description", "the builder failed in its child process"))


def the_rows(exc: BaseException) -> BaseException:
    """What a build raised, as its row's error: a ``SystemExit`` (``sys.exit(0)`` in a forward or an exporter) would
    end the run with its code before anything was judged; every other exception (an interrupt too) is itself."""
    if isinstance(exc, SystemExit):
        return ArtifactError(f"build failed: the export called sys.exit({exc.code!r}) (SystemExit); the other artifacts were not affected")
    return exc


def remove_partial(path: Path, pid: int | None) -> None:
    """Remove what a child killed mid-write left behind: its atomic_path temporary, named after its pid."""
    if pid:
        for leftover in path.parent.glob(f".{path.stem}.partial-{pid}*"):
            with contextlib.suppress(OSError):
                leftover.unlink()
