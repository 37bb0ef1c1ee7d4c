"""Every report format for a run that stopped with a user error (exit 2), carrying the error.

A CI server reading ``--junit`` then shows the error instead of "No test report files were found",
a job summary (``--markdown``) says why nothing was checked, and ``--json`` holds the error and the
exit code. The JSON is the report schema's error form: ``passed`` false, ``exit_code`` 2, ``error``
(``type``, ``message``) and no rows.

>>> stopped = Stopped(command="check", message="golden: golden set not found", kind="GoldenError",
...                   checkpoints=("model.pth",), created="2026-01-01T00:00:00+00:00")
>>> render_markdown(stopped).splitlines()[0]
'## ❌ export-check stopped with an error (exit 2): golden: golden set not found'
"""

from __future__ import annotations

import html
import json
import socket
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .. import __version__
from ..results import SCHEMA_VERSION
from .junit import SUITE, _clean
from .markdown import cell

EXIT_USAGE = 2


@dataclass(frozen=True)
class Stopped:
    """A run that stopped before it had a report: the command, the one-line error and its kind."""

    command: str  # "check" or "merge"
    message: str  # the one line after "export-check: error: "
    kind: str  # the error's class name, e.g. GoldenError
    checkpoints: tuple[str, ...] = ()
    created: str = ""
    settings_files: tuple[str, ...] | None = None  # what the run had read when it stopped; None: it stopped before knowing

    @property
    def stamp(self) -> str:
        return self.created or datetime.now(UTC).isoformat(timespec="seconds")

    @property
    def suite(self) -> str:
        stem = Path(self.checkpoints[0]).stem if len(self.checkpoints) == 1 else self.command
        return f"{SUITE}.{stem}"


def render_json(stopped: Stopped) -> str:
    doc = {
        "schema": "export-check-report",
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "created": stopped.stamp,
        "command": stopped.command,
        "passed": False,
        "exit_code": EXIT_USAGE,
        "error": {"type": stopped.kind, "message": stopped.message},
        "checkpoints": list(stopped.checkpoints),
        "rows": [],
    }
    if stopped.settings_files is not None:
        doc["settings_files"] = list(stopped.settings_files)
    return json.dumps(doc, indent=2) + "\n"


def render_junit(stopped: Stopped, hostname: str | None = None) -> str:
    """One ``<testcase>`` holding an ``<error>`` (the Ant/Jenkins junit-10 layout the normal report uses)."""
    root = ET.Element("testsuites", name=SUITE, tests="1", failures="0", errors="1", time="0.000")
    suite = ET.SubElement(root, "testsuite", name=_clean(stopped.suite), tests="1", failures="0", errors="1", skipped="0",
                          time="0.000", timestamp=stopped.stamp.split("+")[0],
                          hostname=_clean(hostname if hostname is not None else socket.gethostname() or "localhost"))
    properties = ET.SubElement(suite, "properties")
    for name, value in (("tool_version", __version__), ("created_utc", stopped.stamp), ("exit_code", str(EXIT_USAGE)),
                        *(("checkpoint", path) for path in stopped.checkpoints),
                        *((("settings_files", ", ".join(stopped.settings_files) or "none"),) if stopped.settings_files is not None else ())):
        ET.SubElement(properties, "property", name=name, value=_clean(value))
    case = ET.SubElement(suite, "testcase", name=f"export-check {stopped.command}", classname=_clean(stopped.suite), time="0.000")
    text = _clean(f"export-check: error: {stopped.message}")
    ET.SubElement(case, "error", message=_clean(stopped.message), type=stopped.kind).text = text
    ET.SubElement(case, "system-out").text = text
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def render_markdown(stopped: Stopped) -> str:
    return (f"## ❌ export-check stopped with an error (exit 2): {cell(stopped.message)}\n\n"
            f"Nothing was checked ({cell(stopped.kind)}); fix the error and rerun.\n")


def render_html(stopped: Stopped) -> str:
    e = html.escape(stopped.message, quote=True)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>export-check: error</title></head>\n"
            "<body style=\"font:14px/1.45 sans-serif;margin:24px\">\n"
            "<h1 style=\"color:#cf222e\">export-check stopped with an error (exit 2)</h1>\n"
            f"<pre>export-check: error: {e}</pre>\n<p>Nothing was checked ({html.escape(stopped.kind)}); fix the error and rerun.</p>\n"
            "</body></html>\n")


RENDER = {"json": render_json, "junit": render_junit, "markdown": render_markdown, "html": render_html}
