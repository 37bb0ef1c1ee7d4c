"""``--junit PATH``: the report as JUnit XML, one ``<testcase>`` per row (eager and each artifact).

The layout is the Ant/Jenkins "junit-10" one that Jenkins, GitLab, Azure DevOps and GitHub test
reporters read: ``<testsuites><testsuite><properties/><testcase>…``. A failing row carries a
``<failure message="the reasons" type="drift">`` whose text lists every metric; an artifact that
could not be built, loaded or run carries ``<error type="artifact-error">``. Every testcase's
``<system-out>`` holds the same metrics, so passing rows show their numbers too.
"""

from __future__ import annotations

import math
import re
import socket
import xml.etree.ElementTree as ET
from pathlib import Path

from ..results import ERROR, FAIL, NOT_APPLICABLE, Report, Row
from ..sentences import layers_summary, reproduce_command
from . import bounds, write_text_atomic
from .views import accuracy_text, output_lines, size_text, token_figures

SUITE = "export-check"
# XML 1.0 forbids most control characters even escaped; exception texts can carry them.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _clean(text: object) -> str:
    return _INVALID_XML.sub("\ufffd", str(text))


def _num(value: float | None, fmt: str = ".6g") -> str:
    if value is None:
        return "-"
    return format(value, fmt) if math.isfinite(value) else str(value)


def metric_lines(row: Row) -> list[str]:
    """``key: value`` lines with every number of the row (the failure text and system-out)."""
    lines = [f"status: {row.status}", f"compared with: {row.compared_with}", f"gate: {row.gate.describe()}"]
    m = row.metrics
    if m is not None:
        lines += [
            f"images: {m.images}",
            f"mae: {_num(m.mae)}",
            f"max_abs: {_num(m.max_abs)}",
            f"median_image_mae: {_num(m.median_abs)}",
            f"top1_agreement: {'-' if m.top1_agreement is None else f'{m.top1_agreement:.6g}'} (agreement: {m.agreement})",
            f"top1_changed: {list(m.top1_changed)}",
            *([] if m.label_accuracy is None else [f"label_accuracy: {accuracy_text(m)} (points against its reference)"]),
            f"nonfinite: {m.nonfinite}",
        ]
        if m.max_abs_at is not None:
            lines.append(f"max_abs_at: {m.max_abs_at.describe()}")
    count = bounds.row_count(row)
    if count is not None:
        lines.append(f"allclose: {bounds.sentence(count)}")
    lines += [f"output: {line}" for line in output_lines(row)]
    lines += [f"token_{f.key}: {f.text}" for f in token_figures(row)]  # a language model's token verdict
    if row.artifact is not None:
        lines += [f"artifact: {row.artifact.path}", f"size: {row.artifact.size_bytes} bytes ({size_text(row.artifact.size_bytes)})",
                  f"sha256: {row.artifact.sha256}"]
    d = row.diagnostics
    if d is not None:
        if d.latency is not None:
            lat = d.latency
            lines.append(f"latency_ms_per_image: {lat.ms_per_image:.4g} "
                         f"(median of {lat.repeats}, batch {lat.batch}, {lat.threads} threads)")
        if d.shapes is not None and row.family != "eager":
            runs = ", ".join(
                f"{r.size}: {'error' if r.error else _num(r.max_image_mae, '.3g')}" for r in d.shapes.runs
            )
            verdict = "pass" if d.shapes.passed else "fail"
            lines.append(f"batch_sizes: {verdict} (worst per-image MAE against eager at the same batch size: {runs})")
        if d.rerun is not None:
            verdict = "pass" if d.rerun.passed else "fail"
            lines.append(f"determinism: {verdict} (run-to-run max abs {_num(d.rerun.max_abs, '.3g')}, bound {d.rerun.bound:g})")
        if d.layers is not None:
            lines.append(f"{d.layers.purpose}: {layers_summary(d.layers)}")
        command = reproduce_command(d.reduced) if d.reduced is not None else None
        if command is not None:
            lines.append(f"reproduce: {command}")
        lines += [f"note: {n}" for n in d.notes]
    lines += [f"warning: {n}" for n in row.concerns]
    return lines


def _timestamp(created: str) -> str:
    # Ant writes local ISO 8601 without an offset; ours is UTC, said so in a property.
    return created.split("+")[0].rstrip("Z")


def build_tree(report: Report, hostname: str | None = None) -> ET.Element:
    counts = report.counts()
    classname = f"{SUITE}.{Path(report.checkpoint.path).stem}"
    root = ET.Element("testsuites", name=SUITE, tests=str(len(report.rows)), failures=str(counts[FAIL]),
                      errors=str(counts[ERROR]), time=f"{report.seconds:.3f}")
    suite = ET.SubElement(
        root, "testsuite", name=classname, tests=str(len(report.rows)), failures=str(counts[FAIL]),
        errors=str(counts[ERROR]), skipped=str(counts[NOT_APPLICABLE]), time=f"{report.seconds:.3f}", timestamp=_timestamp(report.created),
        hostname=_clean(hostname if hostname is not None else socket.gethostname() or "localhost"),
    )
    properties = ET.SubElement(suite, "properties")
    props = [
        ("tool_version", report.tool_version),
        ("created_utc", report.created),
        ("checkpoint", report.checkpoint.path),
        ("checkpoint_sha256", report.checkpoint.sha256),
        ("golden", report.golden.path),
        ("golden_inputs", str(report.golden.inputs)),
        ("golden_manifest_sha256", report.golden.manifest_sha256),
        ("settings_files", ", ".join(report.settings_files) or "none"),
        *((f"gate_{family.name}", gate) for family, gate in report.thresholds.described()),
        *((f"version_{name}", version) for name, version in report.versions),
    ]
    for name, value in props:
        ET.SubElement(properties, "property", name=_clean(name), value=_clean(value))
    for row in report.rows:
        seconds = sum(s for s in (row.build_seconds, row.replay_seconds, row.diagnostics.seconds if row.diagnostics else None) if s)
        case = ET.SubElement(suite, "testcase", name=_clean(row.name), classname=classname, time=f"{seconds:.3f}")
        figures = token_figures(row)
        if figures:  # a language model's token verdict as the testcase's properties (pytest's record_property layout)
            listed = ET.SubElement(case, "properties")
            for f in figures:
                ET.SubElement(listed, "property", name=f"token_{f.key}", value=_clean(f.text))
        body = _clean("\n".join(metric_lines(row)))
        message = _clean("; ".join(row.reasons) or row.status)
        if row.status == FAIL:
            ET.SubElement(case, "failure", message=message, type="drift").text = body
        elif row.status == ERROR:
            ET.SubElement(case, "error", message=message, type="artifact-error").text = body
        elif row.status == NOT_APPLICABLE:
            ET.SubElement(case, "skipped", message=message)
        ET.SubElement(case, "system-out").text = body
    return root


def render(report: Report, hostname: str | None = None) -> str:
    root = build_tree(report, hostname)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write(report: Report, path: Path) -> None:
    write_text_atomic(path, render(report), inside=report.out_dir)
