"""Views of a fleet report (``export_check.fleet.result.FleetReport``): the terminal summary, JSON, JUnit
and Markdown. Each reads the models' JSON reports only, so a fleet run and ``export-check merge`` of
its shards render the same verdicts the same way.

The JSON is ``schema: export-check-fleet-report``: the fleet's counts and exit code, and per model
its status, exit code, error (if its check stopped) and its whole ``--json`` report.
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ..report import write_text_atomic
from ..results import plural
from .result import FleetReport, ModelResult

SCHEMA, SCHEMA_VERSION = "export-check-fleet-report", 1
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def to_json(fleet: FleetReport) -> dict[str, Any]:
    return {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "tool_version": fleet.tool_version, "created": fleet.created,
        "passed": fleet.passed, "exit_code": fleet.exit_code, "counts": fleet.counts(), "row_counts": fleet.row_counts(),
        "executor": fleet.executor, "seconds": fleet.seconds, "fleet_file": fleet.fleet_file, "fleet_sha256": fleet.fleet_sha256,
        "fleet_models": list(fleet.fleet_models), "shard": fleet.shard, "models": [m.to_json() for m in fleet.models],
        "across_machines": across_machines(fleet),
    }


def across_machines(fleet: FleetReport) -> list[dict[str, Any]]:
    """Per artifact judged both on the build machine and on a target (``export-check replay``, merged with the
    build's report): both verdicts and MAEs side by side, and whether the verdict differs. The build is the
    model's report without a target of the same checkpoint, golden set and gates (``fleet.binding.identity``:
    what ``merge`` holds a target to)."""
    return [entry for _, entry in _across(fleet)]


def _across(fleet: FleetReport) -> list[tuple[Any, dict[str, Any]]]:
    """``across_machines``' entries, each with the identity of the build it is held to (what groups a model's targets)."""
    from .binding import identity

    builds = {identity(m.report): m for m in fleet.models if m.report is not None and not m.report.get("target")}
    found = []
    for model in fleet.models:
        report = model.report
        if report is None or not report.get("target"):
            continue
        build = builds.get(identity(report))
        built = {} if build is None else {r["name"]: r for r in _rows(build)}
        for row in report["rows"]:
            there = built.get(row["name"])
            found.append((identity(report), {
                "artifact": row["name"], "target": report["target"], "target_status": row["status"], "target_mae": _mae(row),
                "build_status": None if there is None else there["status"], "build_mae": None if there is None else _mae(there),
                "differs": there is not None and row["status"] != "not-applicable" and there["status"] != row["status"]}))
    return found


def _machine_lines(fleet: FleetReport) -> list[str]:
    """One line per artifact of a model: the build, then every target merged (e.g. a CPU target and a browser), side by side."""
    grouped: dict[tuple[Any, str], list[dict[str, Any]]] = {}
    for key, entry in _across(fleet):
        grouped.setdefault((key, entry["artifact"]), []).append(entry)
    lines = []
    for (_, artifact), entries in grouped.items():
        c = entries[0]
        build = "not in the merged build report" if c["build_status"] is None else f"{c['build_status'].upper()} MAE {c['build_mae']}"
        targets = "; ".join(f"{e['target']} {e['target_status'].upper()} MAE {e['target_mae']}" for e in entries)
        differing = [e["target"] for e in entries if e["differs"]]
        flag = ("  <- verdict differs" + (f" on {', '.join(differing)}" if len(entries) > 1 else "")) if differing else ""
        lines.append(f"{artifact}: build {build}; {targets}{flag}")
    return lines


def render_json(fleet: FleetReport) -> str:
    return json.dumps(to_json(fleet), indent=2, allow_nan=False) + "\n"


def _rows(model: ModelResult) -> list[dict[str, Any]]:
    return [] if model.report is None else list(model.report["rows"])


def _mae(row: dict[str, Any]) -> str:
    metrics = row.get("metrics") or {}
    mae = metrics.get("mae")
    return "-" if mae is None else f"{mae:.2e}"


def _counts(model: ModelResult) -> str:
    if model.report is None:
        return "no rows"
    c = model.row_counts()
    return f"{c['pass']} passed, {c['fail']} failed, {plural(c['error'], 'error')}" + (f", {c['not-applicable']} n/a" if c["not-applicable"] else "")


def problem_lines(fleet: FleetReport) -> list[str]:
    """One line per model that did not pass: each failing row with its reasons, or why the check stopped."""
    lines = []
    for model in fleet.models:
        if model.report is None:
            lines.append(f"{model.name}: ERROR {model.error}")
        if model.golden_note is not None:
            lines.append(f"{model.name}: FAIL {model.golden_note.splitlines()[0]}")
        for row in _rows(model):
            if row["status"] in ("fail", "error"):
                lines.append(f"{model.name} / {row['name']}: {row['status'].upper()} {'; '.join(row['reasons'])}")
    return lines


def settings_files(fleet: FleetReport) -> tuple[str, ...]:
    """Every settings file a model of the fleet read (its report's ``settings_files``), each once."""
    found: dict[str, None] = {}
    for model in fleet.models:
        files = (model.report or {}).get("settings_files") or ()
        found.update(dict.fromkeys(str(f) for f in files if isinstance(f, str)))
    return tuple(found)


def render_text(fleet: FleetReport) -> str:
    from ..settings import settings_line

    width = max([len(m.name) for m in fleet.models] + [5])
    head = f"export-check fleet: {fleet.counts_text()}" + (f" (shard {fleet.shard})" if fleet.shard else "")
    lines = [head, settings_line(settings_files(fleet)), f"  {'model':<{width}}  status  {'rows':<34}  seconds  worker"]
    for m in fleet.models:
        lines.append(f"  {m.name:<{width}}  {m.status.upper():<6}  {_counts(m):<34}  {m.seconds:7.1f}  {m.worker or '-'}")
    problems = problem_lines(fleet)
    if problems:
        lines += ["", "not passing:", *(f"  {line}" for line in problems)]
    machines = _machine_lines(fleet)
    if machines:
        lines += ["", "build machine and targets:", *(f"  {line}" for line in machines)]
    rows = fleet.row_counts()
    lines += ["", f"{'PASS' if fleet.passed else 'FAIL'}: {fleet.counts_text()}; rows {rows['pass']} passed, {rows['fail']} failed, "
              f"{plural(rows['error'], 'error')}; {fleet.executor}, {fleet.seconds:.1f} s"]
    return "\n".join(lines)


def _clean(text: object) -> str:
    return _INVALID_XML.sub("\ufffd", str(text))


def _seconds(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) and math.isfinite(value) else "0"


def render_junit(fleet: FleetReport) -> str:
    """One ``<testsuite>`` per model, one ``<testcase>`` per row (a model whose check stopped: one
    ``check`` testcase with its ``<error>``); the Ant "junit-10" layout CI servers read."""
    root = ET.Element("testsuites", name="export-check fleet", tests="0", failures="0", errors="0", time=_seconds(fleet.seconds))
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for model in fleet.models:
        suite = ET.SubElement(root, "testsuite", name=_clean(model.name), time=_seconds(model.seconds))
        files = (model.report or {}).get("settings_files")
        if isinstance(files, list):
            properties = ET.SubElement(suite, "properties")
            ET.SubElement(properties, "property", name="settings_files", value=_clean(", ".join(map(str, files)) or "none"))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        cases = _rows(model) or [{"name": "check", "status": "error", "reasons": [model.error or ""]}]
        for row in cases:
            case = ET.SubElement(suite, "testcase", name=_clean(row["name"]), classname=_clean(model.name),
                                 time=_seconds((row.get("build_seconds") or 0) + (row.get("replay_seconds") or 0)))
            counts["tests"] += 1
            reasons = _clean("; ".join(row["reasons"]))
            if row["status"] == "fail":
                counts["failures"] += 1
                ET.SubElement(case, "failure", message=reasons, type="drift").text = f"MAE {_mae(row)}\n{reasons}"
            elif row["status"] == "error":
                counts["errors"] += 1
                ET.SubElement(case, "error", message=reasons, type=model.error_kind or "artifact-error").text = reasons
            elif row["status"] == "not-applicable":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=reasons)
        for key, value in counts.items():
            suite.set(key, str(value))
        for key in totals:
            totals[key] += counts[key]
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(fleet: FleetReport) -> str:
    mark = {"pass": "✅ pass", "fail": "❌ fail", "error": "⚠️ error"}
    lines = [f"## export-check fleet: {'passed' if fleet.passed else 'FAILED'}", "",
             f"{fleet.counts_text()}" + (f" (shard {fleet.shard})" if fleet.shard else "") + f"; {fleet.executor}, {fleet.seconds:.1f} s", "",
             "| model | status | rows | seconds |", "|---|---|---|---:|"]
    lines += [f"| `{_md(m.name)}` | {mark[m.status]} | {_counts(m)} | {m.seconds:.1f} |" for m in fleet.models]
    problems = problem_lines(fleet)
    if problems:
        lines += ["", "### Not passing", "", *(f"- {_md(line)}" for line in problems)]
    machines = _machine_lines(fleet)
    if machines:
        lines += ["", "### Build machine and targets", "", *(f"- {_md(line)}" for line in machines)]
    return "\n".join(lines) + "\n"


def write(fleet: FleetReport, json_path: Path | None = None, junit_path: Path | None = None, markdown_path: Path | None = None,
          markdown_append: bool = False) -> list[str]:
    """Write the views asked for; the JSON sealed with the cache key (exporter/report/seal.py), or, when
    there is no usable key, unsealed: the note saying so is returned, for the caller to print."""
    from ..report.seal import sealed

    notes = []
    for path, render in ((json_path, render_json), (junit_path, render_junit), (markdown_path, render_markdown)):
        if path is not None:
            text = render(fleet)
            if path is json_path:
                text, note = sealed(text)
                notes += [note] if note is not None else []
            write_text_atomic(path, text, append=markdown_append and path is markdown_path)
    return notes
