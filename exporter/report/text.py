"""The terminal table: one line per row, then the reasons for every failing row."""

from __future__ import annotations

from ..results import ERROR, FAIL, NOT_APPLICABLE, PASS, Report, Row
from .views import diagnostic_lines, latency_text, output_lines, rerun_text, shapes_text

_STATUS = {PASS: "PASS", FAIL: "FAIL", ERROR: "ERROR", NOT_APPLICABLE: "N/A"}


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def _vs_reference(row: Row, reference: float) -> str:
    if row.metrics is None:
        return "-"
    if row.metrics.mae <= reference:
        return "yes"
    ratio = row.metrics.mae / reference if reference > 0 else float("inf")
    return f"no ({ratio:.0f}x)"


def _size(row: Row) -> str:
    if row.artifact is None:
        return "-"
    size = float(row.artifact.size_bytes)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return "-"


def render(report: Report) -> str:
    reference = report.thresholds.reference_mae
    header = ("artifact", "vs", "gate", "MAE", "max|err|", "top-1", f"MAE<={reference:g}", "size", "ms/img", "batch", "rerun", "verdict")
    lines = []
    for row in report.rows:
        m = row.metrics
        lines.append(
            (
                row.name,
                row.compared_with,
                row.gate.describe(),
                _fmt(m.mae if m else None),
                _fmt(m.max_abs if m else None),
                "-" if m is None else f"{m.top1_agreement:.1%}",
                _vs_reference(row, reference),
                _size(row),
                latency_text(row),
                shapes_text(row),
                rerun_text(row),
                _STATUS[row.status],
            )
        )
    widths = [max(len(str(r[i])) for r in (header, *lines)) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    golden = report.golden
    out = [
        f"export-check {report.tool_version}: {report.checkpoint.path} (sha256 {report.checkpoint.sha256[:12]}) "
        f"vs golden set {golden.path} ({golden.inputs} inputs)",
    ]
    if golden.label_accuracy is not None:
        out.append(f"eager top-1 accuracy on the golden labels: {golden.label_accuracy:.1%}")
    out += ["", fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*line) for line in lines]
    problems = [row for row in report.rows if row.status != PASS]
    if problems:
        out.append("")
        for row in problems:
            for reason in row.reasons:
                out.append(f"{_STATUS[row.status]} {row.name}: {reason}")
    per_output = [line for row in report.rows for line in output_lines(row)]
    out += [""] + per_output if per_output else []
    extra = diagnostic_lines(report)
    out += [""] + extra if extra else []
    out += _cache_lines(report)
    out.append("")
    verdict = "PASSED" if report.passed else "FAILED"
    out.append(f"{verdict}: {report.counts_text()} in {report.seconds:.1f}s; artifacts in {report.out_dir}")
    return "\n".join(out)


def _cache_lines(report: Report) -> list[str]:
    """Say which rows the artifact cache supplied, and which damaged entries were rebuilt."""
    states = [row.cache for row in report.rows if row.cache is not None]
    if not states:
        return []
    hits, restored = states.count("hit"), states.count("artifact")
    lines = [""]
    if hits == len(report.rows):
        lines.append("cache: every row reused from the artifact cache, nothing built or replayed (--no-cache to rebuild)")
    elif hits or restored:
        lines.append(f"cache: {hits} rows reused, {restored} artifact files reused and replayed, the rest built")
    lines += [f"cache: {row.name}: damaged entry rebuilt" for row in report.rows if row.cache == "rebuilt"]
    return lines if len(lines) > 1 else []
