"""Writers of a :class:`~exporter.results.Report`: each is a pure view of the same object."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from ..errors import OutputError


def write_text_atomic(path: Path, text: str) -> None:
    """Write a report file so that readers see the old file or the complete new one, never half."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    except OSError as exc:
        raise OutputError(f"{path}: cannot write the report ({exc.strerror or exc}); choose a writable path") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OutputError(f"{path}: cannot write the report ({exc.strerror or exc}); choose a writable path") from None
