"""Progress on stderr that says what is happening, and stays clean in CI logs.

Every message is a step (``building onnx``) or a count, ``STAGE: DONE/TOTAL inputs`` (``replaying onnx:
48/256 inputs``), to which this line adds an estimate of the time left, from the pace of that stage so
far (``~31s left``).

A terminal: one line, rewritten in place (``\\r`` and erase-line), cut to the terminal's width (read
at every write, so a resized window leaves no debris), cleared before the report is printed. Not a
terminal (CI logs, pipes, files): plain lines, ``[export-check 12.3s] building onnx``, no carriage
returns or escape codes; of a count, only its first line, a line every ``PLAIN_EVERY`` seconds and
its last (DONE == TOTAL), so a long replay is a few lines, not one per batch.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from typing import TextIO

COUNT = re.compile(r"^(?P<stage>.+?): (?P<done>\d+)/(?P<total>\d+) inputs$")
PLAIN_EVERY = 10.0  # seconds between two plain lines of the same count
REDRAW_EVERY = 0.1  # seconds between two rewrites of the terminal line (the last one of a count always shows)


def count_message(stage: str, done: int, total: int) -> str:
    """The message of a count, as :class:`ProgressLine` reads it.

    >>> count_message("replaying onnx", 48, 256)
    'replaying onnx: 48/256 inputs'
    """
    return f"{stage}: {done}/{total} inputs"


def estimate(seconds: float) -> str:
    """
    >>> estimate(7.2), estimate(75), estimate(3725)
    ('~8s left', '~1m15s left', '~1h02m left')
    """
    whole = int(seconds + 0.999)
    if whole < 60:
        return f"~{whole}s left"
    if whole < 3600:
        return f"~{whole // 60}m{whole % 60:02d}s left"
    return f"~{whole // 3600}h{whole % 3600 // 60:02d}m left"


class ProgressLine:
    """A callable ``progress(message)``; call :meth:`close` before printing the report."""

    def __init__(self, stream: TextIO | None = None, quiet: bool = False, interactive: bool | None = None,
                 clock=time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        if interactive is None:
            isatty = getattr(self.stream, "isatty", None)
            interactive = bool(isatty and isatty())
        self.interactive = interactive
        self.clock = clock
        self.started = clock()
        self._open = False
        self._counts: dict[str, tuple[float, int]] = {}  # stage -> (when its first count came, its done then)
        self._last_plain: dict[str, float] = {}
        self._last_draw = -1.0
        self._lock = threading.Lock()  # the observe stage reports from two threads (a row diagnosed while the next replays)

    def width(self) -> int:
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            return 80

    def _with_estimate(self, text: str, now: float) -> tuple[str, str | None, bool]:
        """The text with its estimate; the count's stage (None: a step); whether the count is complete."""
        match = COUNT.match(text)
        if match is None:
            return text, None, False
        stage, done, total = match["stage"], int(match["done"]), int(match["total"])
        first = self._counts.setdefault(stage, (now, done))
        if done >= total:
            return text, stage, True
        if done > first[1] and now > first[0]:
            text += f", {estimate((total - done) * (now - first[0]) / (done - first[1]))}"
        return text, stage, False

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        with self._lock:
            self._write(message)

    def _write(self, message: str) -> None:
        now = self.clock()
        text, stage, complete = self._with_estimate(" ".join(message.split()), now)
        if stage is not None:
            if self.interactive and not complete and now - self._last_draw < REDRAW_EVERY:
                return
            if not self.interactive:
                last = self._last_plain.get(stage)
                if last is not None and not complete and now - last < PLAIN_EVERY:
                    return
                self._last_plain[stage] = now
        self._last_draw = now
        line = f"[export-check {now - self.started:5.1f}s] {text}"
        if self.interactive:
            # one column short of the width: a line that fills it exactly wraps on some terminals
            self.stream.write("\r\x1b[K" + line[: max(self.width() - 1, 1)])
            self._open = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        with self._lock:
            if self.interactive and self._open:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self._open = False
