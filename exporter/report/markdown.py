"""``--markdown PATH``: a GitHub-flavoured Markdown summary that fits a CI job summary.

Pass ``--markdown "$GITHUB_STEP_SUMMARY"`` in a GitHub Actions step. A headline with the verdict, one
table row per report row (✅/❌, gate, drift, batch-size and determinism checks, cost), the thresholds,
every failure's reasons, and the per-layer tables folded in ``<details>``.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..records import LayerComparison
from ..results import ERROR, FAIL, NOT_APPLICABLE, PASS, Report, Row
from ..sentences import layer_method, layers_summary, reproduce_command
from . import bounds, write_text_atomic
from .next_steps import next_steps
from .views import (
    agreement_heading,
    checks_description,
    labelled,
    latency_text,
    output_lines,
    rerun_text,
    row_accuracy_text,
    row_top1_text,
    shapes_text,
    size_text,
    token_figures,
)

ICON = {PASS: "✅", FAIL: "❌", ERROR: "❌", NOT_APPLICABLE: "➖"}


def cell(text: object) -> str:
    """Make text safe inside a table cell: no pipes, newlines or stray HTML.

    >>> cell("a|b\\nc<d>")
    'a\\\\|b c&lt;d&gt;'
    """
    return " ".join(str(text).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").split())


def code(text: object) -> str:
    return f"`{cell(text).replace('`', chr(39))}`"


def _gate(text: str) -> str:
    return text.replace("<=", "≤").replace(">=", "≥")


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2e}" if math.isfinite(value) else str(value)


def _row(row: Row, allclose: bool, accuracy: bool = False) -> str:
    m = row.metrics
    check = {"ok": "✅", "FAIL": "❌", "-": "–"}
    rerun = rerun_text(row)
    rerun_cell = "–" if rerun == "-" else (f"❌ {rerun.removesuffix(' FAIL')}" if rerun.endswith("FAIL") else rerun)
    cells = [
        ICON[row.status],
        f"**{cell(row.name)}**",
        cell(_gate(row.gate.describe())),
        _fmt(m.mae if m else None),
        _fmt(m.max_abs if m else None),
        *([bounds.cell(row)] if allclose else []),
        row_top1_text(row),
        *([row_accuracy_text(row)] if accuracy else []),
        check[shapes_text(row)],
        rerun_cell,
        latency_text(row),
        size_text(row.artifact.size_bytes if row.artifact else None),
    ]
    return "| " + " | ".join(cells) + " |"


def _token_table(report: Report) -> list[str]:
    """A language model's token verdicts, a table row per row that has them (views.token_figures); nothing for an image model."""
    rows = [(row, figures) for row in report.rows if (figures := token_figures(row))]
    if not rows:
        return []
    labels = [f.label for f in rows[0][1]]
    return ["### Tokens", "", "| artifact | " + " | ".join(labels) + " |", "|---|" + "---:|" * (len(labels) - 1) + "---|",
            *(f"| **{cell(row.name)}** | " + " | ".join(cell(f.text) for f in figures) + " |" for row, figures in rows), ""]


def _layer_table(title: str, layers: LayerComparison) -> list[str]:
    worst = {d.module for d in layers.worst()} if layers.purpose == "int8-layers" else set()
    shown = [d for d in layers.layers if d.mae > 0 or d.departs] if layers.purpose == "int8-layers" else list(layers.layers)
    out = [f"<details><summary>{cell(title)}: {cell(layers_summary(layers))}</summary>", "",
           f"{cell(layer_method(layers))}; batch {layers.batch_start}..{layers.batch_start + layers.batch_size - 1}, "
           f"{layers.scope} comparison, a module departs above MAE {layers.threshold:g} × max(1, mean abs)", "",
           "| module | ops | MAE | max abs | SQNR dB | |", "|---|---|---:|---:|---:|---|"]
    for d in shown:
        first = layers.purpose == "divergence" and layers.first is not None and d is layers.first
        mark = "❌ departs first" if first else ("⚠️ worst" if d.module in worst else "")
        sqnr = "∞" if d.sqnr_db == math.inf else f"{d.sqnr_db:.1f}"
        out.append(f"| {code(d.label)} | {cell(d.ops)} | {_fmt(d.mae)} | {_fmt(d.max_abs)} | {sqnr} | {mark} |")
    out += ["", "</details>", ""]
    return out


def render(report: Report) -> str:
    icon = ICON[PASS] if report.passed else ICON[FAIL]
    verdict = "passed" if report.passed else "FAILED"
    golden = report.golden
    t = report.thresholds
    allclose = bounds.shown(report)  # an atol/rtol gate: the count of values outside it, per row
    accuracy = labelled(report)  # golden labels: each row's accuracy on them
    lines = [
        f"## {icon} export-check {verdict}: {report.counts_text()}",
        "",
        f"{code(Path(report.checkpoint.path).name)} (sha256 `{report.checkpoint.sha256[:12]}`) against golden set "
        f"{code(golden.path)} ({golden.inputs} inputs, manifest `{golden.manifest_sha256[:12]}`)"
        + ("" if golden.label_accuracy is None else f"; eager top-1 accuracy on the labels {golden.label_accuracy:.1%}")
        + f"; {report.seconds:.1f}s",
        "",
        "| | artifact | gate | MAE | max abs |" + (" allclose |" if allclose else "") + f" {agreement_heading(report)} |"
        + (" accuracy |" if accuracy else "") + " batch sizes | rerun | ms/img | size |",
        "|---|---|---|---:|---:|" + ("---:|" if allclose else "") + "---:|" + ("---:|" if accuracy else "") + ":---:|---:|---:|---:|",
        *(_row(row, allclose, accuracy) for row in report.rows),
        "",
        "**Thresholds:** " + " · ".join(f"{family.label} {cell(_gate(gate))}" for family, gate in t.described()) + ". "
        f"**Checks:** {cell(_gate(checks_description(report)))}.",
        "",
    ]
    lines += _token_table(report)
    per_output = [line for row in report.rows for line in output_lines(row)]
    if per_output:
        lines += ["### Outputs", "", *(f"- {cell(line)}" for line in per_output), ""]
    problems = [row for row in report.rows if row.status != PASS]
    if problems:
        lines += ["### Failures", ""]
        for row in problems:
            lines.append(f"- {ICON[row.status]} **{cell(row.name)}** ({row.status})")
            lines += [f"  - {cell(reason)}" for reason in row.reasons]
            command = reproduce_command(row.diagnostics.reduced) if row.diagnostics and row.diagnostics.reduced else None
            if command is not None:
                lines.append(f"  - reproduce its reduced subgraph: `{command.replace('`', '')}`")
        lines.append("")
    steps = next_steps(report)  # what to do about a failing run, as the terminal ends with it (the CI job summary too)
    if steps:
        lines += ["### Next steps", "", *(f"- {cell(step)}" for step in steps), ""]
    warnings = [(row.name, n) for row in report.rows for n in row.concerns]
    if warnings:
        lines += ["### Warnings that say an export may be wrong", "", *(f"- ⚠️ **{cell(name)}**: {cell(n)}" for name, n in warnings), ""]
    notes = [(row.name, n) for row in report.rows if row.diagnostics for n in row.diagnostics.notes]
    if notes:
        lines += ["### Notes", "", *(f"- **{cell(name)}**: {cell(n)}" for name, n in notes), ""]
    for row in report.rows:
        layers = row.diagnostics.layers if row.diagnostics else None
        if layers is None:
            continue
        title = f"{row.name}: where it diverges" if layers.purpose == "divergence" else f"{row.name}: int8 error per layer"
        lines += _layer_table(title, layers) if not layers.error else [f"- {cell(row.name)}: {cell(layers_summary(layers))}", ""]
    return "\n".join(lines).rstrip() + "\n"


def write(report: Report, path: Path) -> None:
    write_text_atomic(path, render(report), inside=report.out_dir)
