"""report/failure.py: a run stopped by a user error still writes every report format, each carrying the error."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from export_check import __version__
from export_check.report.failure import EXIT_USAGE, RENDER, Stopped, render_html, render_json, render_junit, render_markdown

STOPPED = Stopped(command="check", message="golden: golden set not found | <here> & \x1b[31mthere", kind="GoldenError",
                  checkpoints=("runs/model.pth",), created="2026-01-01T00:00:00+00:00", settings_files=("pyproject.toml",))


def test_json_is_the_report_schemas_error_form() -> None:
    doc = json.loads(render_json(STOPPED))
    assert (doc["schema"], doc["passed"], doc["exit_code"], doc["rows"], doc["tool_version"]) == (
        "export-check-report", False, EXIT_USAGE, [], __version__)
    assert doc["error"] == {"type": "GoldenError", "message": STOPPED.message} and doc["checkpoints"] == ["runs/model.pth"]
    assert doc["settings_files"] == ["pyproject.toml"] and doc["created"] == STOPPED.created
    assert "settings_files" not in json.loads(render_json(Stopped("merge", "m", "UsageError")))


def test_junit_holds_one_errored_testcase() -> None:
    root = ET.fromstring(render_junit(STOPPED, hostname="ci-host").split("\n", 1)[1])
    assert (root.get("tests"), root.get("errors"), root.get("failures")) == ("1", "1", "0")
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "export-check.model" and suite.get("hostname") == "ci-host"
    assert suite.get("timestamp") == "2026-01-01T00:00:00"
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["exit_code"] == "2" and properties["checkpoint"] == "runs/model.pth" and properties["settings_files"] == "pyproject.toml"
    error = suite.find("testcase/error")
    assert error is not None and error.get("type") == "GoldenError" and "golden set not found" in (error.get("message") or "")
    assert "\x1b" not in render_junit(STOPPED, hostname="h")  # XML 1.0 cannot hold it
    many = Stopped("merge", "m", "UsageError", checkpoints=("a.pth", "b.pth"))
    assert ET.fromstring(render_junit(many, "h").split("\n", 1)[1]).find("testsuite").get("name") == "export-check.merge"  # type: ignore[union-attr]


def test_markdown_is_one_heading_whose_message_cannot_break_a_table() -> None:
    text = render_markdown(STOPPED)
    first = text.splitlines()[0]
    assert first.startswith("## ❌ export-check stopped with an error (exit 2): golden: golden set not found")
    assert "| <here>" not in first and "Nothing was checked (GoldenError)" in text


def test_html_escapes_the_message() -> None:
    text = render_html(STOPPED)
    assert "&lt;here&gt; &amp;" in text and "<here>" not in text

    class Collect(HTMLParser):
        tags: list[str] = []

        def handle_starttag(self, tag, attrs) -> None:
            self.tags.append(tag)

    parser = Collect()
    parser.feed(text)
    assert "h1" in parser.tags and "pre" in parser.tags and "here" not in parser.tags


@pytest.mark.parametrize("fmt", sorted(RENDER))
def test_every_format_names_the_error(fmt: str) -> None:
    assert "golden set not found" in RENDER[fmt](STOPPED)
