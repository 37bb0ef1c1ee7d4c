"""Writers of a :class:`~export_check.results.Report`: each is a pure view of the same object."""

from __future__ import annotations

from pathlib import Path

from .. import files
from ..errors import OutputError


def write_text_atomic(path: Path, text: str) -> None:
    """Write a report file so that readers see the old file or the complete new one, never half."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_bytes(path, text.encode("utf-8"))
    except OSError as exc:
        raise OutputError(f"{path}: cannot write the report ({exc.strerror or exc}); choose a writable path") from None
