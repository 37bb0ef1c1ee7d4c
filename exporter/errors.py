"""One exception family for everything the user can fix.

``ExportCheckError`` and its subclasses carry a one-line message that names the file and the fix;
the CLI prints it without a traceback and exits 2. Anything else is a bug in export-check and keeps
its traceback.
"""

from __future__ import annotations


class ExportCheckError(Exception):
    """A problem with the user's input or environment, printed as one line (exit code 2)."""

    exit_code = 2

    def __str__(self) -> str:
        return one_line(super().__str__())


def one_line(text: str) -> str:
    """Escape control characters (a newline in a file name, say) so that a message stays one line."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


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


def describe_exception(exc: BaseException) -> str:
    """An exception as one short line for a row's reason: ``TypeName: message``."""
    import errno

    text = " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        text = "no space left on device while writing the artifact"
    return f"{type(exc).__name__}: {text[:400]}" if text else type(exc).__name__
