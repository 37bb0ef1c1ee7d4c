"""What native code prints to stdout while an artifact is built (the TorchScript-based ONNX
exporter's "Torch IR graph at exception" dump, for one) goes into the row's notes, not ahead of the
report on the user's terminal."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

from ._common import captured_fd


class ExporterOutput(UserWarning):
    """Text an exporter printed to stdout while it ran, carried into the row's notes."""


@contextlib.contextmanager
def stdout_into_notes(what: str) -> Iterator[None]:
    """Redirect file descriptor 1 for the block; whatever was printed becomes one
    :class:`ExporterOutput` warning, which the build's ``captured_warnings`` puts in the row's notes
    (also when the build then fails)."""
    caught: list[str] = []
    try:
        with captured_fd(1, 1 << 20) as caught:
            yield
    finally:
        lines = [line.rstrip() for line in "".join(caught).splitlines() if line.strip()]
        if lines:
            text = f"{what} printed {len(lines)} lines (kept out of the terminal): " + " | ".join(lines)[:600]
            warnings.warn(text, ExporterOutput, stacklevel=3)
