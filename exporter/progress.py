"""Progress on stderr that stays clean in CI logs.

Not a terminal (CI logs, pipes, files): one plain line per step, ``[export-check 12.3s] building onnx``,
no carriage returns or escape codes. A terminal: the same text rewritten in place on one line, which
is cleared before the report is printed.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressLine:
    """A callable ``progress(message)``; call :meth:`close` before printing the report."""

    def __init__(self, stream: TextIO | None = None, quiet: bool = False, interactive: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        if interactive is None:
            isatty = getattr(self.stream, "isatty", None)
            interactive = bool(isatty and isatty())
        self.interactive = interactive
        self.started = time.monotonic()
        self._open = False

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        text = f"[export-check {time.monotonic() - self.started:5.1f}s] {' '.join(message.split())}"
        if self.interactive:
            self.stream.write("\r\x1b[K" + text)
            self._open = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.interactive and self._open:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._open = False
