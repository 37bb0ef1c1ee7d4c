"""The terminal table: the verdict first, one line per row fitted to the width, then the reasons.

The columns come in order of importance. When they do not all fit the width, the least important
are left out and named under the table; with ``-v`` (:attr:`Style.verbose`) they are wrapped into a
second line under each row instead, and the notes, checks and stage timings are shown too.

Where it is printed decides the :class:`Style` (:func:`style_for`): on a terminal, its width
(``shutil.get_terminal_size``, so ``COLUMNS`` overrides) and every line fits it, reasons wrapped;
elsewhere (a pipe, a CI log) the table fits ``COLUMNS`` when it is set, and every line fits it too;
without it, ``DEFAULT_WIDTH`` columns and each reason stays on one line, so a log can be searched for
it. Each output of a passing row is listed under ``-v`` only; a failing run ends with its next steps
(``next_steps``: the approve command, the settings that would change a verdict, the inputs whose
top-1 changed, the documentation). Colour (the verdicts: pass green, fail red, the rest yellow)
follows :func:`use_colour`: ``--color always/never`` > ``NO_COLOR`` > ``FORCE_COLOR`` > a terminal.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TextIO

from ..config import COLOR_CHOICES
from ..errors import folded
from ..gates import GATE_METRICS, PER_SAMPLE, GateMetric, small_set_notes
from ..layouts import FED
from ..results import ERROR, FAIL, NOT_APPLICABLE, PASS, Report, Row
from ..sentences import coverage_summary
from ..settings import settings_line
from . import bounds
from .next_steps import next_steps
from .views import (
    agreement_heading,
    checks_description,
    diagnostic_lines,
    latency_text,
    output_lines,
    position_text,
    rerun_text,
    row_top1_text,
    shapes_text,
    size_text,
    token_line,
)

DEFAULT_WIDTH = 100  # when the output is not a terminal
MIN_WIDTH = 40  # the verdict, the artifact and its MAE
_STATUS = {PASS: "PASS", FAIL: "FAIL", ERROR: "ERROR", NOT_APPLICABLE: "N/A"}
_SGR = {PASS: "32", FAIL: "31", ERROR: "33", NOT_APPLICABLE: "33"}  # green, red, yellow
_GAP = "  "


@dataclass(frozen=True)
class Style:
    """How the table is laid out: ``width`` columns, ``colour`` (ANSI escapes), ``verbose`` (every
    column, notes), ``wrap`` (free text wrapped to the width too: on a terminal)."""

    width: int = DEFAULT_WIDTH
    colour: bool = False
    verbose: bool = False
    wrap: bool = False

    def paint(self, text: str, status: str, bold: bool = False) -> str:
        if not self.colour:
            return text
        return f"\x1b[{'1;' if bold else ''}{_SGR.get(status, '33')}m{text}\x1b[0m"


def use_colour(choice: str, isatty: bool, environ: Mapping[str, str]) -> bool:
    """Whether to colour: ``--color always``/``never`` decide; under ``auto``, a non-empty ``NO_COLOR``
    disables it (no-color.org), else a non-empty ``FORCE_COLOR`` enables it (force-color.org), else
    a terminal that is not ``TERM=dumb`` has it.

    >>> use_colour("auto", True, {"NO_COLOR": "1", "FORCE_COLOR": "1"}), use_colour("always", False, {"NO_COLOR": "1"})
    (False, True)
    """
    if choice not in COLOR_CHOICES:
        raise ValueError(f"colour choice {choice!r}")
    if choice != "auto":
        return choice == "always"
    if environ.get("NO_COLOR"):
        return False
    if environ.get("FORCE_COLOR"):
        return True
    return isatty and environ.get("TERM") != "dumb"


def style_for(stream: TextIO, colour: str = "auto", verbose: bool = False, environ: Mapping[str, str] | None = None) -> Style:
    """The style of a report printed to ``stream``: its terminal's width or ``DEFAULT_WIDTH``."""
    import os

    isatty = getattr(stream, "isatty", None)
    tty = bool(isatty and isatty())
    width = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns if tty else _columns(os.environ if environ is None else environ)
    environ = os.environ if environ is None else environ
    # free text is wrapped on a terminal, and wherever COLUMNS asks for a width: every line then fits it
    return Style(width=max(MIN_WIDTH, width), colour=use_colour(colour, tty, environ), verbose=verbose,
                 wrap=tty or environ.get("COLUMNS", "").isdigit())


def _columns(environ: Mapping[str, str]) -> int:
    text = environ.get("COLUMNS", "")
    return int(text) if text.isdigit() and int(text) > 0 else DEFAULT_WIDTH


@dataclass(frozen=True)
class Column:
    title: str
    value: Callable[[Row, Report], str]
    rank: int  # importance: the highest rank is left out (or wrapped) first; 0 never is
    verbose: bool = False  # only with -v


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def _vs_reference(row: Row, report: Report) -> str:
    reference = report.thresholds.reference_mae
    if row.metrics is None:
        return "-"
    if row.metrics.mae <= reference:
        return "yes"
    ratio = row.metrics.mae / reference if reference > 0 else float("inf")
    return f"no ({ratio:.0f}x)"


def _gate(row: Row, report: Report) -> str:
    """The row's gate family (the gates line says what it is); ``*`` when the row's gate differs (a noisy eager)."""
    family = row.family
    return family + ("" if row.gate == report.thresholds.gate_for(family) else "*")


def _metric_cell(metric: GateMetric) -> Callable[[Row, Report], str]:
    """The cell of a gate metric with a column of its own (``GateMetric.column``)."""
    return lambda row, _: "-" if row.metrics is None else metric.cell(row.metrics)


AGREEMENT = "agreement"  # the agreement column, titled by what its figures count (views.agreement_heading)
COLUMNS: tuple[Column, ...] = (
    Column("verdict", lambda r, _: _STATUS[r.status], 0),
    Column("artifact", lambda r, _: r.name, 0),
    Column("MAE", lambda r, _: _fmt(r.metrics.mae if r.metrics else None), 0),
    Column("max|err|", lambda r, _: _fmt(r.metrics.max_abs if r.metrics else None), 1),
    Column("allclose", lambda r, _: bounds.cell(r), 2),
    Column(AGREEMENT, lambda r, _: row_top1_text(r), 3),  # its heading: views.agreement_heading
    Column("batch", lambda r, _: shapes_text(r), 4),
    Column("rerun", lambda r, _: rerun_text(r), 5),
    Column("gate", _gate, 6),
    Column("ms/img", lambda r, _: latency_text(r), 7),
    Column("size", lambda r, _: size_text(r.artifact.size_bytes if r.artifact else None), 8),
    Column("vs", lambda r, _: r.compared_with, 9, verbose=True),
    Column("within float MAE", _vs_reference, 10, verbose=True),
    Column("cache", lambda r, _: r.cache or "-", 11, verbose=True),
    *(Column(m.column, _metric_cell(m), 12, verbose=True) for m in GATE_METRICS if m.column),
    # beside a CTC output's decoded exact-match rate (the agreement column): its per-frame agreement
    Column("per-pos", lambda r, _: position_text(r.metrics), 12, verbose=True),
)


def _columns_of(report: Report, verbose: bool) -> list[Column]:
    allclose = bounds.shown(report)
    decoded = any(r.metrics is not None and r.metrics.agreement == "decoded" for r in report.rows)
    heading = agreement_heading(report)
    return [replace(c, title=heading) if c.title == AGREEMENT else c for c in COLUMNS
            if (verbose or not c.verbose) and (allclose or c.title != "allclose") and (decoded or c.title != "per-pos")]


def _fit(columns: list[Column], cells: list[list[str]], width: int) -> tuple[list[int], list[int]]:
    """The indexes of the columns that fit ``width`` (most important first kept) and of those left out."""
    widths = [max(len(c.title), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    kept = list(range(len(columns)))
    while sum(widths[i] for i in kept) + len(_GAP) * (len(kept) - 1) > width:
        droppable = [i for i in kept if columns[i].rank > 0]
        if not droppable:
            break
        kept.remove(max(droppable, key=lambda i: columns[i].rank))
    return kept, [i for i in range(len(columns)) if i not in kept]


def _wrapped(text: str, style: Style, indent: str = "    ", status: str | None = None) -> list[str]:
    """``text`` as lines of at most the width (on a terminal); with ``status``, its first word painted."""
    lines = [text]
    if style.wrap and len(text) > style.width:
        lines = textwrap.wrap(text, style.width, subsequent_indent=indent, break_long_words=True, break_on_hyphens=False) or [text]
    if status is not None:
        word, _, rest = lines[0].partition(" ")
        painted = style.paint(word, status, bold=word.endswith("ED:"))  # PASSED: / FAILED: in bold
        lines[0] = f"{painted} {rest}".rstrip()
    return lines


def _table(report: Report, style: Style) -> list[str]:
    columns = _columns_of(report, style.verbose)
    cells = [[c.value(row, report) for c in columns] for row in report.rows]
    kept, left_out = _fit(columns, cells, style.width)
    widths = {i: max(len(columns[i].title), *(len(r[i]) for r in cells)) for i in kept}

    def line(values: list[str], status: str | None = None) -> str:
        parts = []
        for i in kept:
            text = values[i].ljust(widths[i]) if i != kept[-1] else values[i]
            parts.append(style.paint(text, status) if status is not None and i == 0 else text)
        return _GAP.join(parts).rstrip()

    out = [line([c.title for c in columns]), line(["-" * widths.get(i, 0) for i in range(len(columns))])]
    for row, values in zip(report.rows, cells, strict=True):
        out.append(line(values, row.status))
        if style.verbose and left_out:
            # a column's title and value stay on one line (no-break spaces while wrapping)
            rest = "  ".join(f"{columns[i].title} {values[i]}".replace(" ", "\u00a0") for i in left_out)
            wrapped = textwrap.wrap(rest, style.width, initial_indent=" " * 4, subsequent_indent=" " * 4, break_long_words=True)
            out += [w.replace("\u00a0", " ") for w in wrapped]
    if left_out and not style.verbose:
        hidden = ", ".join(columns[i].title for i in left_out)
        out += _wrapped(f"(not shown at {style.width} columns: {hidden}; -v shows them under each row)", style)
    return out


def _gates_line(report: Report) -> str:
    """The gate of every family with a row here, in table order."""
    present = {row.family for row in report.rows}
    parts = [f"{name} {gate.describe()}" for name, gate in report.thresholds.gates if name in present]
    changed = [f"{row.name} {row.gate.describe()}" for row in report.rows if row.gate != report.thresholds.gate_for(row.family)]
    text = "gates: " + "; ".join(parts)
    return text + ("" if not changed else "; *widened for a noisy eager model: " + "; ".join(changed))


def render(report: Report, style: Style | None = None) -> str:
    style = style or Style()
    golden = report.golden
    out = _wrapped(f"export-check {report.tool_version}: {report.checkpoint.path} (sha256 {report.checkpoint.sha256[:12]}) "
                   f"vs golden set {golden.path} ({golden.inputs} inputs)" + (f", replayed on {report.target}" if report.target else ""), style)
    out += _wrapped(settings_line(report.settings_files), style)
    if golden.label_accuracy is not None:
        out.append(f"eager top-1 accuracy on the golden labels: {golden.label_accuracy:.1%}")
    out += ["", *_table(report, style), *_wrapped(_gates_line(report), style)]
    problems = [row for row in report.rows if row.status != PASS]
    if problems:
        out.append("")
        for row in problems:
            for reason in row.reasons:
                out += _wrapped(f"{_STATUS[row.status]} {row.name}: {reason}", style, status=row.status)
    # each output of a passing row under -v only, so that a failing run's reasons stay on the first screen
    per_output = [line for row in report.rows for line in output_lines(row, each=style.verbose or row.status != PASS)]
    # a language model's token verdicts, every row's, failing or not (views.token_figures)
    per_output += [f"tokens {row.name}: {line}" for row in report.rows if (line := token_line(row)) is not None]
    extra = diagnostic_lines(report)
    if style.verbose:
        extra += [f"note {row.name}: {folded(note)}" for row in report.rows for note in row.notes if note not in row.concerns]
        extra += [f"int8 coverage {row.name}: {coverage_summary(row.int8_coverage)}" for row in report.rows if row.int8_coverage]
        extra += [layout_line(row) for row in report.rows if FED in dict(row.details)]
        extra.append(f"checks: {checks_description(report)}")
        per_sample = any(m.agreement in PER_SAMPLE and m.top1_agreement is not None for row in report.rows if row.metrics is not None
                         for m in (row.metrics, *(o.metrics for o in row.outputs)))
        extra += [f"note: {note}" for note in small_set_notes(report.thresholds, report.golden.inputs, per_sample)]
        if report.timings:
            extra.append("timings: " + ", ".join(f"{stage} {seconds:.1f}s" for stage, seconds in report.timings))
    for block in (per_output, extra, _cache_lines(report)):
        if block:
            out.append("")
            for text in block:
                out += _wrapped(text, style)
    out.append("")
    verdict = "PASSED:" if report.passed else "FAILED:"
    cut = report.plan_cut()  # said in the headline, not only in each row's note: fewer checks ran than the full plan
    checks = f"; checks cut by --diagnostics-budget ({'; '.join(cut)})" if cut else ""
    out += _wrapped(f"{verdict} {report.counts_text()} in {report.seconds:.1f}s{checks}; artifacts in {report.out_dir}", style,
                    status=PASS if report.passed else FAIL)
    steps = next_steps(report)  # a failing run ends with what to do about it
    if steps:
        out.append("")
        for text in steps:
            out += _wrapped(text, style)
    return "\n".join(out)


def layout_line(row: Row) -> str:
    """The layout fed to a row's file (the app's, exporter/layouts.py) and the one the file records, under ``-v``."""
    details = dict(row.details)
    recorded = f"; the file records {details['dim_order'].replace('_', '-')}" if "dim_order" in details else ""
    return f"layout {row.name}: fed {details[FED]} (the app's: [tool.export-check.model-inputs.NAME] layout){recorded}"


def _cache_lines(report: Report) -> list[str]:
    """Say which rows the artifact cache supplied, and which damaged entries were rebuilt."""
    states = [row.cache for row in report.rows if row.cache is not None]
    if not states:
        return list(report.run_notes)
    hits, restored = states.count("hit"), states.count("artifact")
    lines: list[str] = []
    if hits == len(report.rows):
        lines.append("cache: every row reused from the artifact cache, nothing built or replayed (--no-cache to rebuild)")
    elif hits or restored:
        lines.append(f"cache: {hits} rows reused, {restored} artifact files reused and replayed, the rest built")
    lines += [f"cache: {row.name}: damaged entry rebuilt" for row in report.rows if row.cache == "rebuilt"]
    return lines + list(report.run_notes)

