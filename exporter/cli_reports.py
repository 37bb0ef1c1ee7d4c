"""The report flags of an ``export-check`` command line (``--json``, ``--junit``, ``--markdown``, ``--html``).

Writing every view of one report (:func:`write_views`, the JSON sealed with the cache key) and the
run's ``--history`` line; which flags a run has written (:func:`written`); where the table goes
(stderr when a report goes to stdout); whether ``--markdown`` appends (``$GITHUB_STEP_SUMMARY``);
refusing a folder, or a file the command reads, as an output path; and after a user error, the
error reports the command line asked for (:func:`error_reports`), written only where a report may
plainly go. Imports nothing heavy at module level; the report writers are imported when used.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from .errors import ExportCheckError, UsageError, error_message
from .options import DEFAULT_GOLDEN, DEFAULT_OUT

REPORT_FLAGS = ("json", "junit", "markdown", "html")


def refuse_writing_over(outputs: dict[str, Any], read: Any, what: str) -> None:
    """One line when an output path (by flag) is a file this command reads (``what`` names it)."""
    inputs = {os.path.realpath(p) for p in read}
    for flag, path in outputs.items():
        if path is not None and os.path.realpath(path) in inputs:
            raise UsageError(f"{flag} {path}: is {what}; writing there would overwrite it: choose another path")


def refuse_folders(args: argparse.Namespace) -> None:
    for flag in ("json", "junit", "markdown", "html", "history"):
        path = getattr(args, flag, None)
        if path is not None and path.is_dir():
            raise UsageError(f"{path}: is a directory; --{flag} takes a file path")


def write_views(report: Any, args: argparse.Namespace, markdown_append: bool = False) -> None:
    """Every view of the same report: JSON, JUnit, Markdown (replaced, or appended), HTML, the history line."""
    from .report import html, json_report, junit, markdown, write_text_atomic
    from .report.seal import sealed

    for flag, render in (("json", json_report.render), ("junit", junit.render), ("markdown", markdown.render), ("html", html.render)):
        path = getattr(args, flag)
        if path is not None:
            written(args).append(f"--{flag}")  # a failure from here on never overwrites it with an error report
            text = render(report)
            if flag == "json":  # sealed with the cache key: `export-check merge` takes only what export-check wrote
                config = getattr(args, "checked_config", None)
                text, note = sealed(text, None if config is None else config.cache_dir, getattr(args, "signer", None))  # --sign-key
                if note is not None:
                    print(note, file=sys.stderr)
            write_text_atomic(path, text, append=markdown_append and flag == "markdown", inside=getattr(report, "out_dir", None))
    if getattr(args, "history", None) is not None:  # judge writes no history line: it ran nothing
        from .history import append

        append(report, args.history)


def written(args: argparse.Namespace) -> list[str]:
    """The report flags this run has written (or begun to write) its report to."""
    if not hasattr(args, "written_reports"):
        args.written_reports = []
    written: list[str] = args.written_reports
    return written


def table_stream(args: argparse.Namespace) -> Any:
    """stdout for the table, unless a report goes there (``--json -``): then stderr, so stdout holds the report alone."""
    from .report.destination import is_stdout

    to_stdout = any(getattr(args, flag, None) is not None and is_stdout(getattr(args, flag)) for flag in REPORT_FLAGS)
    return sys.stderr if to_stdout else sys.stdout


def appends_markdown(args: argparse.Namespace, settings: dict[str, Any]) -> bool:
    """Whether ``--markdown`` appends: ``--markdown-append``, the settings key, or the file is $GITHUB_STEP_SUMMARY
    (GitHub's job summary, which every step adds to)."""
    if getattr(args, "markdown_append", False) or settings.get("markdown_append"):
        return True
    summary, path = os.environ.get("GITHUB_STEP_SUMMARY"), getattr(args, "markdown", None)
    return summary is not None and summary != "" and path is not None and os.path.realpath(summary) == os.path.realpath(path)


def error_reports(args: argparse.Namespace | None, exc: ExportCheckError) -> list[str]:
    """After a user error (exit 2), every report the command line asked for, carrying the error; the
    lines to print for the ones that could not be written."""
    if args is None or getattr(args, "command", None) not in ("check", "merge"):
        return []
    done = set(written(args))
    message = error_message(exc)
    # not over a report this run wrote, nor to the report the error is about ("--html takes one model's
    # report", "--json PATH: is the checkpoint", "PATH: cannot write the report")
    given = {f"--{flag}": getattr(args, flag, None) for flag in REPORT_FLAGS}
    reports = {flag: path for flag, path in given.items() if path is not None
               and flag not in done and not message.startswith((f"{flag} ", f"{path}: "))}
    if not any(reports.values()):
        return []
    # only now: the writers import the report model (and numpy); a usage error that asked for no report stays light
    from .paths import error_report_paths
    from .report import failure, write_text_atomic

    raw = getattr(args, "checkpoint", None) or []
    checkpoints = tuple(Path(c) for c in ([raw] if isinstance(raw, (str, Path)) else raw))
    config = getattr(args, "checked_config", None)
    golden = config.golden if config is not None else getattr(args, "golden", None) or DEFAULT_GOLDEN
    arch = config.arch if config is not None else getattr(args, "arch", None) or ""
    out = config.out_dir if config is not None else getattr(args, "out", None) or DEFAULT_OUT
    read = tuple(p for p in (getattr(args, "config", None), getattr(args, "fleet", None)) if isinstance(p, (str, Path)))
    read += config.settings_files if config is not None else ()
    safe = {flag: path for flag, path in error_report_paths(given, checkpoints, golden, arch, out, read).items() if flag in reports}
    if getattr(args, "scanned", False):  # a command line the parser refused: only where a report may plainly go
        append = appends_markdown(args, {})
        safe = {flag: path for flag, path in safe.items() if _fresh_or_report(flag, path, append and flag == "--markdown")}
    stopped = failure.Stopped(command=args.command, message=message, kind=type(exc).__name__,
                              checkpoints=tuple(str(c) for c in checkpoints),
                              settings_files=None if config is None else config.settings_files)
    notes = []
    for flag, path in safe.items():
        try:
            write_text_atomic(path, failure.RENDER[flag[2:]](stopped), append=flag == "--markdown" and appends_markdown(args, {}),
                              inside=out)
        except ExportCheckError as error:
            notes.append(f"export-check: the error report was not written either: {error}")
    return notes


_SUFFIXES = {"--json": (".json",), "--junit": (".xml",), "--markdown": (".md", ".markdown"), "--html": (".html", ".htm")}


def _fresh_or_report(flag: str, path: Path, append: bool) -> bool:
    """Whether an error report may go to ``path`` of a refused command line: standard output, a FIFO or
    device, a new file named like the report (``r.json``: a word after a mistyped flag is no report
    path), a text file appended to, or one holding an earlier export-check report."""
    from .report.destination import resolve

    if str(path).startswith("-") and str(path) != "-":
        return False
    try:
        where = resolve(path)
        if where.fd is not None or where.through:
            return True
        if where.path is None or not where.path.exists():
            return Path(path).suffix.lower() in _SUFFIXES[flag]
        with open(where.path, "rb") as fh:
            head = fh.read(4096)
        # appended to: a text file (a step summary has no suffix), never a binary one such as the checkpoint
        # a refused command line named after --markdown
        return b"\0" not in head if append else b"export-check" in head
    except OSError:
        return False
