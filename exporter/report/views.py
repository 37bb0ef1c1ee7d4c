"""Small pure formatters of a row's diagnostics, shared by the text, Markdown, JUnit and HTML views."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from ..compare import Metrics
from ..errors import folded
from ..results import Report, Row
from ..sentences import layers_summary, module_command, reproduce_command
from .node_data import command


def size_text(size_bytes: int | None) -> str:
    """
    >>> size_text(315_187)
    '307.8KB'
    """
    if size_bytes is None:
        return "-"
    size = float(size_bytes)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return "-"


def top1_text(metrics: Metrics | None) -> str:
    """The agreement column: a dash where no top-1 (or per-position) agreement was computed (no
    metrics, or a ``values`` output), never a 100% nobody measured.

    >>> top1_text(None)
    '-'
    """
    if metrics is None or metrics.top1_agreement is None:
        return "-"
    return f"{metrics.top1_agreement:.1%}"


# The agreement column's heading, by what its figures count (Metrics.agreement); "top-1" only where every figure is one
_HEADINGS = {"top-1": "top-1", "per-position": "per-pos", "decoded": "decoded"}


def agreement_heading(report: Report) -> str:
    """The heading of the agreement column (the one ``top1_text`` fills): ``top-1`` where every figure shown is a
    top-1 agreement, ``per-pos`` where every one is a per-position agreement (a sequence output), ``decoded`` where
    every one is a CTC output's decoded exact-match rate, ``agree`` for a mix; ``top-1`` when no row has one."""
    kinds = {m.agreement for r in report.rows if (m := classes_metrics(r)) is not None and m.top1_agreement is not None}
    if len(kinds) > 1:
        return "agree"
    return _HEADINGS.get(next(iter(kinds)), "agree") if kinds else "top-1"


def position_text(metrics: Metrics | None) -> str:
    """The per-position agreement of a CTC output (judged on its decoded text); a dash for any other output."""
    if metrics is None or metrics.agreement != "decoded" or metrics.position_agreement is None:
        return "-"
    return f"{metrics.position_agreement:.1%}"


def latency_ms(row: Row) -> float | None:
    d = row.diagnostics
    return None if d is None or d.latency is None else d.latency.ms_per_image


def latency_text(row: Row) -> str:
    value = latency_ms(row)
    return "-" if value is None else f"{value:.3g}"


def shapes_text(row: Row) -> str:
    """``ok`` / ``FAIL`` for the batch-size check, ``-`` when it did not run (or the row is eager)."""
    d = row.diagnostics
    if d is None or d.shapes is None or row.family == "eager":
        return "-"
    return "ok" if d.shapes.passed else "FAIL"


def rerun_text(row: Row) -> str:
    d = row.diagnostics
    if d is None or d.rerun is None:
        return "-"
    text = "0" if d.rerun.max_abs == 0 else f"{d.rerun.max_abs:.1e}"
    return text if d.rerun.passed else f"{text} FAIL"


def classes_metrics(row: Row) -> Metrics | None:
    """The figures that hold a row's classes: its headline's when they do; else, for a model with several outputs whose
    headline (its worst output) is a ``values`` one (boxes), the output's that counted label accuracy, else top-1
    agreement, named (``Metrics.output``). The agreement and accuracy columns and the chart read these (issue 44: they
    showed ``-`` and "its output has no classes" for a detector whose boxes were its worst output)."""
    m = row.metrics
    if m is not None and m.label_accuracy is not None:
        return m
    counted = next((o for o in row.outputs if o.metrics.label_accuracy is not None), None)
    if counted is None and m is not None and m.top1_agreement is not None:
        return m
    counted = counted or next((o for o in row.outputs if o.metrics.top1_agreement is not None), None)
    return m if counted is None else replace(counted.metrics, output=counted.name)


def named(text: str, row: Row, m: Metrics | None) -> str:
    """A figure of another output than the row's headline, named: ``92.3% (scores)``."""
    shown = row.metrics.output if row.metrics is not None else None
    return text if text == "-" or m is None or not m.output or m.output == shown else f"{text} ({m.output})"


def row_top1_text(row: Row) -> str:
    """The agreement column of a row: its classes' top-1 agreement (``classes_metrics``), named when another output's."""
    m = classes_metrics(row)
    return named(top1_text(m), row, m)


def row_accuracy_text(row: Row) -> str:
    """The accuracy column of a row: its classes' label accuracy (``classes_metrics``), named when another output's."""
    m = classes_metrics(row)
    return named(accuracy_text(m), row, m)


def labelled(report: Report) -> bool:
    """Whether any row counted accuracy on golden labels (on any output): the tables then get an accuracy column."""
    return any((m := classes_metrics(r)) is not None and m.label_accuracy is not None for r in report.rows)


def accuracy_text(m: Metrics | None) -> str:
    """A row's accuracy on the golden labels and its change against its reference: ``98.4% (-1.6)``; ``-`` without labels.

    >>> from export_check.compare import Metrics
    >>> accuracy_text(Metrics(images=64, mae=0.0, max_abs=0.0, median_abs=0.0, top1_agreement=1.0, top1_changed=(),
    ...                       nonfinite=0, per_image_mae=(), labelled=64, label_correct=63, reference_label_correct=64))
    '98.4% (-1.6)'
    """
    if m is None or m.label_accuracy is None:
        return "-"
    drop = m.accuracy_drop
    return f"{m.label_accuracy:.1%}" + ("" if drop is None else f" ({0.0 - drop:+.1f})".replace("-0.0", "+0.0"))


@dataclass(frozen=True)
class TokenFigure:
    """One figure of a language model's token verdict as every view shows it: ``key`` names it in JUnit (``token_<key>``),
    ``label`` heads its column or precedes it on a line, ``text`` is the figure formatted once for every view."""

    key: str
    label: str
    text: str


def token_figures(row: Row) -> tuple[TokenFigure, ...]:
    """A language model's row's token verdict (its ``token_verdict`` detail) as every view shows it: KL divergence to its
    reference (mean and worst, nats), generations equal of the prompts, perplexity of the approved continuation and its
    change against the reference (the row's ``compared_with``: eager, or the golden set for eager itself), and the first
    divergent step of the first prompt that diverged with both tokens as text (as the judge's reason names it). ``()`` for
    any other row, so an image model's views are unchanged."""
    stored = dict(row.details).get("token_verdict")
    if stored is None:
        return ()
    from ..decode.verdicts import TokenVerdict  # numpy: not for the views of an image model or of a usage error (exit 2)

    v = TokenVerdict.from_json(json.loads(stored))
    first = next(iter(v.diverged), None)  # the first prompt that diverged, as the judge's reason names it
    shown = "none" if first is None else f"prompt {first.name} at step {first.first_step}: {first.expected_text!r} -> {first.got_text!r}"
    return (TokenFigure("kl_mean", "KL mean", f"{v.kl_mean:.3g}"),
            TokenFigure("kl_worst", "KL worst", f"{v.kl_worst:.3g}"),
            TokenFigure("generations_equal", "generations equal", f"{v.generations_equal}/{len(v.prompts)}"),
            TokenFigure("perplexity", "perplexity", f"{v.perplexity:.4f}"),
            TokenFigure("perplexity_change", "perplexity change",
                        f"{v.perplexity - v.reference_perplexity:+.3g} ({row.compared_with} {v.reference_perplexity:.4f})"),
            TokenFigure("first_divergence", "first divergence", shown))


def token_line(row: Row) -> str | None:
    """The token figures of a row on one line (the terminal's and the JUnit text's), None for a row without them."""
    figures = token_figures(row)
    return "; ".join(f"{f.label} {f.text}" for f in figures) if figures else None


def output_lines(row: Row, each: bool = True) -> list[str]:
    """One line per output of a model with several outputs (``each``), and the outputs a setting left out (always:
    an output no row compares is never left unsaid)."""
    lines = []
    for o in row.outputs if each else ():
        m = o.metrics
        agreement = "" if m.top1_agreement is None else f", {m.agreement} agreement {m.top1_agreement:.1%}"
        if m.agreement == "decoded":  # a CTC output: its texts' exact-match rate, beside its frames' agreement and its CER
            cer = m.stat("cer")
            agreement += f" (per-position {position_text(m)}, CER {'-' if cer is None else f'{cer:.2%}'})"
        if m.label_accuracy is not None:
            agreement += f", label accuracy {m.label_accuracy:.1%}" + ("" if m.accuracy_drop is None else f" ({-m.accuracy_drop:+.1f} points)")
        pair = row.gate.tolerance
        count = None if pair is None else m.tolerance(*pair)
        allclose = "" if count is None else f", allclose {count.violations}/{count.values} outside"
        lines.append(f"{row.name} / {o.name}: {o.status.upper()} MAE {m.mae:.2e}, max {m.max_abs:.2e}, relative MAE "
                     f"{m.relative_mae:.2%}{agreement}{allclose}" + ("" if not o.reasons else f" ({'; '.join(o.reasons)})"))
    if row.not_compared:
        lines.append(f"{row.name}: outputs not compared (excluded by a setting): {', '.join(row.not_compared)}")
    return lines


def diagnostic_lines(report: Report) -> list[str]:
    """Findings that do not gate but a release engineer wants to read: int8 per-layer error, notes."""
    lines = []
    for row in report.rows:
        lines += [f"warn {row.name}: {note}" for note in row.concerns]
        d = row.diagnostics
        if d is None:
            continue
        if d.layers is not None and d.layers.purpose == "int8-layers":
            lines.append(f"int8 {row.name}: {layers_summary(d.layers)} ({d.layers.scope} SQNR per layer)")
        reproduce = reproduce_command(d.reduced) if d.reduced is not None else None
        if reproduce is not None:
            lines.append(f"reproduce {row.name} (its reduced subgraph, onnxruntime and numpy only): {reproduce}")
        table = d.layers
        if table is not None and table.repro and table.first is not None and row.artifact is not None:
            lines.append(f"reproduce {row.name} (module {table.first.label} alone on eager's inputs to it, torch and numpy only): "
                         f"{module_command(row.artifact.path, table.first.module, table.repro)}")
        lines += [f"note {row.name}: {folded(note)}" for note in d.notes]
    artifacts = {row.name: row.artifact.path for row in report.rows if row.artifact is not None}
    lines += [f"graph {name}: its per-layer errors as Model Explorer node data: {command(artifacts[name], path)}"
              for name, path in report.node_data if name in artifacts]
    return lines


def checks_description(report: Report) -> str:
    """One sentence on what the diagnostics checked, for the footers of every view."""
    for row in report.rows:
        d = row.diagnostics
        if d is not None and d.shapes is not None and row.family != "eager":
            rerun = d.rerun.bound if d.rerun is not None else None
            bound = "" if rerun is None else f"; determinism: 2 runs differ by <= {rerun:g}"
            threads = d.latency.threads if d.latency is not None else "?"
            return (f"batch sizes {', '.join(map(str, d.shapes.sizes))}, each against eager at the same batch size "
                    f"under the row's gate{bound}; "
                    f"latency: median of {d.latency.repeats if d.latency else '?'} runs, {threads} threads, never gates")
    return "diagnostics did not run"
