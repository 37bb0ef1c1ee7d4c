"""``--html PATH``: one self-contained HTML file (inline CSS and SVG, no scripts, no external URLs).

Plots are drawn here as SVG: latency and size bars per row, accuracy against latency with the file
size as the circle's area (the trade-off of every row at a glance), every image's MAE per row on a log
scale, and a histogram of per-image MAE per row. Then the per-layer tables and the run's settings.
Every row has one colour (``PALETTE``) across all plots.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from ..gates import agreement_name
from ..records import LayerComparison
from ..results import ERROR, FAIL, NOT_APPLICABLE, PASS, Report, Row
from ..sentences import layer_method, layers_summary
from . import bounds, write_text_atomic
from .next_steps import next_steps
from .node_data import command
from .views import (
    agreement_heading,
    checks_description,
    classes_metrics,
    labelled,
    latency_ms,
    latency_text,
    rerun_text,
    row_accuracy_text,
    row_top1_text,
    shapes_text,
    size_text,
    token_figures,
)

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
GATE_COLOUR = "#444444"
STATUS_COLOUR = {PASS: "#1a7f37", FAIL: "#cf222e", ERROR: "#cf222e", NOT_APPLICABLE: "#6e7781"}
DEPRECATIONS = ("DeprecationWarning:", "FutureWarning:", "PendingDeprecationWarning:")
LOG_FLOOR = -9.0  # 1e-9: per-image MAE of exactly 0 is drawn here and labelled "0"
MAX_POINTS = 1000  # per series in the per-image plot; larger sets are reduced to the max per bucket

CSS = """
body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px;color:#1f2328;background:#fff}
h1{font-size:22px;margin:0 0 6px} h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
table{border-collapse:collapse;margin:6px 0} th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums} th{background:#f6f8fa}
.pass{color:#1a7f37;font-weight:600} .fail,.error{color:#cf222e;font-weight:600}
.swatch{display:inline-block;width:10px;height:10px;margin-right:6px;vertical-align:baseline}
.plots{display:flex;flex-wrap:wrap;gap:18px} .muted{color:#59636e} code{background:#f6f8fa;padding:0 3px}
ul.reasons{margin:4px 0 10px}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def colours(report: Report) -> dict[str, str]:
    """The colour of every row, in row order."""
    return {row.name: PALETTE[i % len(PALETTE)] for i, row in enumerate(report.rows)}


def _log(value: float) -> float:
    if value <= 0:
        return LOG_FLOOR
    if not math.isfinite(value):
        return 3.0
    return max(LOG_FLOOR, math.log10(value))


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (f'<svg role="img" aria-label="{_e(label)}" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" shape-rendering="crispEdges" font-family="Helvetica,Arial,sans-serif" font-size="11">'
            + "".join(body) + "</svg>")


def bar_chart(title: str, items: list[tuple[str, float | None, str]], unit: str) -> str:
    """Horizontal bars, one per (label, value, colour); ``None`` values are listed as not measured."""
    width, left, bar_h, gap, top = 460, 140, 16, 6, 24
    height = top + len(items) * (bar_h + gap) + 10
    known = [v for _, v, _ in items if v is not None and math.isfinite(v)]
    peak = max(known) if known and max(known) > 0 else 1.0
    body = [f'<text x="0" y="14" font-weight="bold" font-size="12">{_e(title)}</text>']
    for i, (label, value, colour) in enumerate(items):
        y = top + i * (bar_h + gap)
        body.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{_e(label)}</text>')
        if value is None or not math.isfinite(value):
            body.append(f'<text x="{left + 4}" y="{y + 12}" fill="#59636e">not measured</text>')
            continue
        length = max(1.0, (width - left - 70) * value / peak)
        body.append(f'<rect x="{left}" y="{y}" width="{length:.1f}" height="{bar_h}" fill="{colour}"/>')
        body.append(f'<text x="{left + length + 4:.1f}" y="{y + 12}">{value:.3g} {_e(unit)}</text>')
    return _svg(width, height, body, title)


def _y_axis(body: list[str], x0: int, y_of, lo: int, hi: int, x1: int) -> None:
    for decade in range(lo, hi + 1):
        y = y_of(decade)
        label = "0" if decade == LOG_FLOOR else f"1e{decade}"
        body.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#eaeef2"/>')
        body.append(f'<text x="{x0 - 4}" y="{y + 4:.1f}" text-anchor="end" fill="#59636e">{label}</text>')


def _reduced(values: tuple[float, ...]) -> list[tuple[int, float]]:
    if len(values) <= MAX_POINTS:
        return list(enumerate(values))
    step = math.ceil(len(values) / MAX_POINTS)
    return [(i, max(values[i : i + step])) for i in range(0, len(values), step)]


def per_image_chart(report: Report) -> str:
    """Every image's MAE (log scale) per row, with the gates as dashed lines."""
    width, height, x0, y0, right, top = 1100, 320, 60, 290, 1080, 48
    palette = colours(report)
    # (row, its metrics, its colour) for every row with per-image numbers
    series = [(row, m, palette[row.name]) for row in report.rows if (m := row.metrics) is not None and m.per_image_mae]
    images = max((m.images for _, m, _ in series), default=1)
    t = report.thresholds
    gates = sorted({gate.max_mae for _, gate in t.gates if gate.max_mae is not None})
    peak = max([_log(v) for _, m, _ in series for v in m.per_image_mae] + [_log(g) for g in gates] + [-1.0])
    lo, hi = int(LOG_FLOOR), math.ceil(peak)

    def y_of(v: float) -> float:
        return y0 - (v - lo) / (hi - lo) * (y0 - top)

    def x_of(i: float) -> float:
        return x0 + (i + 0.5) / images * (right - x0)

    title = "MAE of every image against its reference (log scale; 0 drawn at the bottom)"
    body = [f'<text x="0" y="14" font-weight="bold" font-size="12">{title}</text>']
    legend_x = x0
    for row, _, colour in series:  # the legend: later series are drawn on top of earlier ones
        body.append(f'<rect x="{legend_x}" y="22" width="9" height="9" fill="{colour}"/>')
        body.append(f'<text x="{legend_x + 12}" y="31">{_e(row.name)}</text>')
        legend_x += 18 + 6 * len(row.name)
    _y_axis(body, x0, y_of, lo, hi, right)
    for gate in gates:
        y = y_of(_log(gate))
        body.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="{GATE_COLOUR}" stroke-dasharray="6,4"/>')
        body.append(f'<text x="{right}" y="{y - 3:.1f}" text-anchor="end" fill="{GATE_COLOUR}">gate {gate:g}</text>')
    body.append(f'<text x="{(x0 + right) / 2}" y="{height - 4}" text-anchor="middle" fill="#59636e">image index (0..{images - 1})</text>')
    for _, m, colour in series:
        points = _reduced(m.per_image_mae)
        path = " ".join(f"{x_of(i):.1f},{y_of(_log(v)):.1f}" for i, v in points)
        body.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1" opacity="0.6"/>')
        body += [f'<rect x="{x_of(i) - 2.5:.1f}" y="{y_of(_log(v)) - 2.5:.1f}" width="5" height="5" fill="{colour}"/>' for i, v in points]
    return _svg(width, height, body, "per-image error")


def histogram(row: Row, colour: str, gate: float) -> str:
    """Counts of per-image MAE in half-decade bins (exact zeros in their own bin)."""
    width, height, x0, y0, right, top = 350, 200, 34, 160, 340, 46
    values = row.metrics.per_image_mae if row.metrics else ()
    edges = [LOG_FLOOR + 0.5 * k for k in range(0, 21)]  # 1e-9 .. 1e1
    counts = [0] * (len(edges) + 1)  # [zeros, bins..., >= 1e1]
    for v in values:
        if v <= 0:
            counts[0] += 1
            continue
        k = 1 + sum(1 for edge in edges[1:] if _log(v) >= edge)
        counts[min(k, len(counts) - 1)] += 1
    peak = max(counts) or 1
    slot = (right - x0) / len(counts)
    body = [f'<text x="0" y="14" font-weight="bold" font-size="12">{_e(row.name)}</text>',
            f'<text x="0" y="28" fill="#59636e">per-image MAE, {len(values)} images</text>']
    for k, count in enumerate(counts):
        if count:
            h = (y0 - top) * count / peak
            body.append(f'<rect x="{x0 + k * slot + 1:.1f}" y="{y0 - h:.1f}" width="{slot - 2:.1f}" height="{h:.1f}" fill="{colour}"/>')
            body.append(f'<text x="{x0 + (k + 0.5) * slot:.1f}" y="{y0 - h - 3:.1f}" text-anchor="middle" font-size="9">{count}</text>')
    body.append(f'<line x1="{x0}" y1="{y0}" x2="{right}" y2="{y0}" stroke="#59636e"/>')
    body.append(f'<text x="{x0 + 0.5 * slot:.1f}" y="{y0 + 14}" text-anchor="middle" fill="#59636e" font-size="9">0</text>')
    for k, label in ((5, "1e-7"), (9, "1e-5"), (13, "1e-3"), (17, "1e-1"), (21, "1e1")):  # bin k starts at 10**(-9 + (k-1)/2)
        body.append(f'<text x="{x0 + k * slot:.1f}" y="{y0 + 14}" text-anchor="middle" fill="#59636e" font-size="9">{label}</text>')
    gate_k = 1 + (_log(gate) - LOG_FLOOR) / 0.5  # the left edge of the gate's bin
    gx = x0 + gate_k * slot
    body.append(f'<line x1="{gx:.1f}" y1="{top}" x2="{gx:.1f}" y2="{y0}" stroke="{GATE_COLOUR}" stroke-dasharray="4,3"/>')
    body.append(f'<text x="{gx + 3:.1f}" y="{top + 8}" fill="{GATE_COLOUR}" font-size="9">gate {gate:g}</text>')
    return _svg(width, height, body, f"error distribution of {row.name}")


def tradeoff_point(row: Row) -> tuple[float, float, str, float | None] | str:
    """(ms per image, accuracy in %, what the accuracy is, size in KB) of a row for the trade-off chart, or why it has no point."""
    m = classes_metrics(row)  # a detector's classes, not its boxes (its worst output)
    if m is None:
        return "no metrics (" + row.status + ")"
    ms = latency_ms(row)
    if ms is None:
        return "latency not measured"
    if m.label_accuracy is not None:
        accuracy, what = 100.0 * m.label_accuracy, "accuracy on the golden labels"
    elif m.top1_agreement is not None:
        accuracy, what = 100.0 * m.top1_agreement, f"{agreement_name(m)} with its reference"
    else:
        return "no accuracy: " + ("none of its outputs has classes (values)" if row.outputs else "its output has no classes (values)")
    return ms, accuracy, what, None if row.artifact is None else row.artifact.size_bytes / 1024


def tradeoff_chart(report: Report) -> str:
    """Accuracy against latency, one circle per row, its area the file's size: what each artifact costs and keeps.
    A row with no point is named under the chart with the reason (never left out silently)."""
    width, height, x0, y0, right, top = 620, 300, 60, 260, 600, 40
    palette = colours(report)
    found = [(row, tradeoff_point(row)) for row in report.rows]
    points = [(row, p) for row, p in found if not isinstance(p, str)]
    missing = [(row.name, p) for row, p in found if isinstance(p, str)]
    whats = sorted({p[2] for _, p in points})
    title = f"{' / '.join(whats) or 'accuracy'} (%) against latency (ms per image); circle area: file size"
    body = [f'<text x="0" y="14" font-weight="bold" font-size="12">{_e(title)}</text>']
    if points:
        top_ms = max(p[0] for _, p in points) * 1.15 or 1.0
        low = min(p[1] for _, p in points)
        floor = max(0.0, min(99.0, math.floor(low - 1)))
        sizes = [p[3] for _, p in points if p[3] is not None]
        biggest = max(sizes) if sizes else 1.0

        def x_of(ms: float) -> float:
            return x0 + (right - x0) * ms / top_ms

        def y_of(acc: float) -> float:  # 100 % a little below the top, so that a circle there is whole
            return y0 - (y0 - top - 18) * (acc - floor) / (100.0 - floor)

        body.append(f'<line x1="{x0}" y1="{y0}" x2="{right}" y2="{y0}" stroke="#8c959f"/>')
        body.append(f'<line x1="{x0}" y1="{top}" x2="{x0}" y2="{y0}" stroke="#8c959f"/>')
        for acc in (floor, (floor + 100.0) / 2, 100.0):
            body.append(f'<text x="{x0 - 4}" y="{y_of(acc) + 4:.1f}" text-anchor="end" fill="#59636e">{acc:.4g}%</text>')
        for ms in (0.0, top_ms / 2, top_ms):
            body.append(f'<text x="{x_of(ms):.1f}" y="{y0 + 14}" text-anchor="middle" fill="#59636e">{ms:.3g} ms</text>')
        for row, (ms, acc, _, kb) in points:
            radius = 4.0 if kb is None else 4.0 + 14.0 * math.sqrt(kb / biggest)
            body.append(f'<circle cx="{x_of(ms):.1f}" cy="{y_of(acc):.1f}" r="{radius:.1f}" fill="{palette[row.name]}" fill-opacity="0.6" '
                        f'stroke="{STATUS_COLOUR[row.status]}"><title>{_e(row.name)}: {acc:.2f}%, {ms:.3g} ms/img'
                        + ("" if kb is None else f", {kb:.1f} KB") + "</title></circle>")
    chart = _svg(width, height, body, "accuracy against latency and size")
    chart += "<p>" + " ".join(f"<span class='swatch' style='background:{palette[row.name]}'></span>{_e(row.name)} {acc:.1f}%, {ms:.3g} ms"
                              + ("" if kb is None else f", {kb:.0f} KB") + "&nbsp;&nbsp;" for row, (ms, acc, _, kb) in points) + "</p>"
    if missing:
        chart += "<p class='muted'>Not in the chart: " + "; ".join(f"{_e(n)} ({_e(why)})" for n, why in missing) + "</p>"
    return chart


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2e}" if math.isfinite(value) else str(value)


def _summary_table(report: Report) -> str:
    allclose = bounds.shown(report)  # an atol/rtol gate: the count of values outside it, per row
    accuracy = labelled(report)
    head = ("", "artifact", "vs", "gate", "MAE", "max abs", *(("allclose",) if allclose else ()), agreement_heading(report),
            *(("accuracy",) if accuracy else ()), "batch sizes", "rerun", "ms/img", "size", "verdict")
    out = ["<table class='summary'><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for row in report.rows:
        m = row.metrics
        cells = [
            f"<td><span class='swatch' style='background:{colours(report)[row.name]}'></span></td>",
            f"<td><b>{_e(row.name)}</b></td>",
            f"<td>{_e(row.compared_with)}</td>",
            f"<td>{_e(row.gate.describe())}</td>",
            f"<td class='n'>{_fmt(m.mae if m else None)}</td>",
            f"<td class='n'>{_fmt(m.max_abs if m else None)}</td>",
            *([f"<td class='n'>{_e(bounds.cell(row))}</td>"] if allclose else []),
            f"<td class='n'>{_e(row_top1_text(row))}</td>",
            *([f"<td class='n'>{_e(row_accuracy_text(row))}</td>"] if accuracy else []),
            f"<td>{_e(shapes_text(row))}</td>",
            f"<td class='n'>{_e(rerun_text(row))}</td>",
            f"<td class='n'>{_e(latency_text(row))}</td>",
            f"<td class='n'>{_e(size_text(row.artifact.size_bytes if row.artifact else None))}</td>",
            f"<td class='{row.status}'>{row.status.upper()}</td>",
        ]
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "".join(out) + "</table>"


def _token_table(report: Report) -> list[str]:
    """A language model's token verdicts, a table row per row that has them (views.token_figures); nothing for an image model."""
    rows = [(row, figures) for row in report.rows if (figures := token_figures(row))]
    if not rows:
        return []
    head = "".join(f"<th>{_e(f.label)}</th>" for f in rows[0][1])
    body = "".join(f"<tr><td><b>{_e(row.name)}</b></td>" + "".join(f"<td class='n'>{_e(f.text)}</td>" for f in figures) + "</tr>"
                   for row, figures in rows)
    return [f"<h2>Tokens</h2><table class='tokens'><tr><th>artifact</th>{head}</tr>{body}</table>"]


def _layer_table(row: Row, layers: LayerComparison) -> str:
    title = "where it diverges" if layers.purpose == "divergence" else "int8 error per layer"
    parts = [f"<h3>{_e(row.name)}: {title}</h3><p>{_e(layers_summary(layers))}</p>"]
    if layers.error:
        return "".join(parts)
    parts.append(f"<p class='muted'>{_e(layer_method(layers))}; images {layers.batch_start}..{layers.batch_start + layers.batch_size - 1}; "
                 f"{_e(layers.scope)} comparison; departs above MAE {layers.threshold:g} × max(1, mean |eager|)</p>")
    worst = {d.module for d in layers.worst()} if layers.purpose == "int8-layers" else set()
    shown = [d for d in layers.layers if d.mae > 0 or d.departs] if layers.purpose == "int8-layers" else list(layers.layers)
    parts.append("<table><tr><th>module</th><th>ops</th><th>MAE</th><th>max abs</th><th>SQNR dB</th><th></th></tr>")
    for d in shown:
        first = layers.purpose == "divergence" and layers.first is not None and d is layers.first
        mark = "departs first" if first else ("worst" if d.module in worst else "")
        style = " class='fail'" if mark else ""
        sqnr = "∞" if d.sqnr_db == math.inf else f"{d.sqnr_db:.1f}"
        parts.append(f"<tr><td><code>{_e(d.label)}</code></td><td>{_e(d.ops)}</td><td class='n'>{_fmt(d.mae)}</td>"
                     f"<td class='n'>{_fmt(d.max_abs)}</td><td class='n'>{sqnr}</td><td{style}>{mark}</td></tr>")
    parts.append("</table>")
    return "".join(parts)


def render(report: Report) -> str:
    verdict = "passed" if report.passed else "FAILED"
    palette = colours(report)
    golden = report.golden
    t = report.thresholds
    body = [
        f"<h1 style='color:{STATUS_COLOUR[PASS if report.passed else FAIL]}'>export-check {verdict}: "
        f"{_e(report.counts_text())}</h1>",
        f"<p><code>{_e(report.checkpoint.path)}</code> (sha256 {_e(report.checkpoint.sha256[:12])}) against golden set "
        f"<code>{_e(golden.path)}</code> ({golden.inputs} inputs, manifest {_e(golden.manifest_sha256[:12])})"
        + ("" if golden.label_accuracy is None else f"; eager top-1 accuracy {golden.label_accuracy:.1%}")
        + f"; {report.created}; {report.seconds:.1f}s</p>",
        _summary_table(report),
        "<p>Gates: " + "; ".join(f"{_e(family.short)} {_e(gate)}" for family, gate in t.described())
        + f". Checks: {_e(checks_description(report))}.</p>",
        *_token_table(report),
    ]
    problems = [row for row in report.rows if not row.passed]
    if problems:
        body.append("<h2>Failures</h2>")
        for row in problems:
            body.append(f"<p class='{row.status}'>{_e(row.name)}: {row.status}</p><ul class='reasons'>"
                        + "".join(f"<li>{_e(r)}</li>" for r in row.reasons) + "</ul>")
    steps = next_steps(report)  # what to do about a failing run, as the terminal ends with it
    if steps:
        body.append("<h2>Next steps</h2><ul class='next'>" + "".join(f"<li>{_e(step)}</li>" for step in steps) + "</ul>")
    body += [
        "<h2>Cost</h2><div class='plots'>",
        bar_chart("latency per image (median, ms)", [(r.name, latency_ms(r), palette[r.name]) for r in report.rows], "ms"),
        bar_chart("file size (KB)", [(r.name, r.artifact.size_bytes / 1024 if r.artifact else None, palette[r.name])
                                    for r in report.rows if r.family != "eager"], "KB"),
        "</div>",
        "<h2>Accuracy, latency and size</h2>",
        tradeoff_chart(report),
        "<h2>Per-image error</h2>",
        per_image_chart(report),
        "<h2>Error distribution</h2><div class='plots'>",
        *(histogram(row, palette[row.name], row.gate.mae_bound(row.metrics.reference_mean_abs)) for row in report.rows if row.metrics is not None),
        "</div>",
    ]
    tables = [(row, row.diagnostics.layers) for row in report.rows if row.diagnostics and row.diagnostics.layers]
    if tables:
        body.append("<h2>Per-layer comparison</h2>")
        graphs = dict(report.node_data)
        for row, layers in tables:
            body.append(_layer_table(row, layers))
            if row.name in graphs and row.artifact is not None:
                body.append(f"<p>The graph coloured by these errors: <a href='{_e(Path(graphs[row.name]).resolve().as_uri())}'>node data "
                            f"for Model Explorer</a>; open it with <code>{_e(command(row.artifact.path, graphs[row.name]))}</code></p>")
    concerns = [(row.name, n) for row in report.rows for n in row.concerns]
    if concerns:
        body.append("<h2>Warnings that say an export may be wrong</h2><ul>"
                    + "".join(f"<li class='warn'><b>{_e(name)}</b>: {_e(n)}</li>" for name, n in concerns) + "</ul>")
    # the exporters' deprecations stay in the JSON notes (README, "Reports"): a reader of the page wants findings
    notes = [(row.name, n) for row in report.rows
             for n in ((row.diagnostics.notes if row.diagnostics else ())
                       + tuple(x for x in row.notes if x not in row.concerns and not x.startswith(DEPRECATIONS)))]
    if notes:
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li><b>{_e(name)}</b>: {_e(n)}</li>" for name, n in notes) + "</ul>")
    body.append("<h2>Run</h2><table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in report.settings)
                + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in report.versions) + "</table>")
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>export-check report</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write(report: Report, path: Path) -> None:
    write_text_atomic(path, render(report), inside=report.out_dir)
