"""One exception family for everything the user can fix.

``ExportCheckError`` and its subclasses carry a one-line message that names the file and the fix;
the CLI prints it without a traceback and exits 2. Anything else is a bug in export-check and keeps
its traceback.
"""

from __future__ import annotations

import re


class ExportCheckError(Exception):
    """A problem with the user's input or environment, printed as one line (exit code 2)."""

    exit_code = 2

    def __str__(self) -> str:
        return one_line(super().__str__())


def one_line(text: str) -> str:
    """Escape control characters (a newline in a file name, say) so that a message stays one line, and
    the bytes of a file name that is not UTF-8 (Python holds them as lone surrogates) as ``\\xff``."""
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in text)


NOTE_WIDTH = 300  # a folded note's characters on a terminal; the JSON report keeps the whole text


def folded(text: str, width: int = NOTE_WIDTH) -> str:
    """A note as one line for a terminal: its lines joined, runs of white space made one, cut at ``width``
    characters with how much was left out (a quantizer's multi-line dump, say; the JSON report keeps it whole).

    >>> folded("calibration:\\n  fc1  int8\\n  fc2  int8")
    'calibration: fc1 int8 fc2 int8'
    >>> folded("a\\n" + "b" * 400, 20)
    "a bbbbbbbbbbbbbbbbbb … (2 lines, 402 characters: in full in the JSON report's notes)"
    """
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    lines = len(text.strip().splitlines())
    return f"{flat[:width].rstrip()} … ({lines} {'line' if lines == 1 else 'lines'}, {len(flat)} characters: in full in the JSON report's notes)"


def _escaped(ch: str) -> str:
    if "\udc80" <= ch <= "\udcff":  # os.fsdecode's stand-in for the undecodable byte 0x80-0xff
        return f"\\x{ord(ch) - 0xDC00:02x}"
    return repr(ch)[1:-1]


def shown(text: str) -> str:
    """A path or name as a report shows it: the same text, with the bytes of a name that is not UTF-8
    escaped (``bad\\xffname.pth``), so that every report can be written as UTF-8."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join(_escaped(ch) if "\ud800" <= ch <= "\udfff" else ch for ch in text)


class UsageError(ExportCheckError):
    """Bad command-line arguments or configuration values."""


class CheckpointError(ExportCheckError):
    """The checkpoint file cannot be read safely, or does not fit the architecture."""


class ArchitectureError(ExportCheckError):
    """The architecture spec cannot be resolved or constructed."""


class GoldenError(ExportCheckError):
    """The golden set is missing, malformed or fails its integrity check."""


class OutputError(ExportCheckError):
    """The output directory or a report path cannot be written."""


class ArtifactError(Exception):
    """One artifact failed to build, load or run; becomes that row's ``error`` verdict.

    Not an ``ExportCheckError``: it never stops the run, the other artifacts still run.
    """


def error_message(exc: BaseException | str) -> str:
    """An error's message without any ``export-check: error:`` prefix it carries, so that the one
    printing it adds the prefix exactly once.

    >>> error_message(ValueError("export-check: error: export-check: unrecognized arguments: --x"))
    'unrecognized arguments: --x'
    """
    message = str(exc)
    while message.startswith("export-check: "):
        message = message.removeprefix("export-check: ").removeprefix("error: ")
    return message


# Terminal escape sequences: CSI (colours, ``\x1b[96m``; cursor moves), OSC (titles, links) and the
# short ones (``\x1b(B``, ``\x1b7``). Exporters (torch.export, onnxscript) and runtimes colour their
# messages for a terminal.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]*[0-~])")


def plain_text(text: str) -> str:
    """``text`` without terminal escape sequences: what an exception or an exporter says, fit for a
    reason or a note in every report (JSON, JUnit, HTML), whatever colours it carried for a terminal.

    >>> plain_text("\\x1b[96mtorch._dynamo\\x1b[0m: graph break")
    'torch._dynamo: graph break'
    """
    return _ESCAPES.sub("", text) if "\x1b" in text else text


def describe_exception(exc: BaseException) -> str:
    """An exception as one short line for a row's reason: ``TypeName: message``."""
    import errno

    text = " ".join(plain_text(str(exc)).split())
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        text = "no space left on device while writing the artifact"
    return f"{type(exc).__name__}: {text[:400]}" if text else type(exc).__name__
