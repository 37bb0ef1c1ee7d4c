"""The pytest plugin's test items and fixture, and the text of their failures.

A declared checkpoint is a :class:`CheckpointFile` collector with one :class:`ExportCheckItem` per
row of its report (``eager``, then each artifact kind its settings select); every item of a model
reads the one outcome the session computed for it (``export_check.pytest_session``). The
``export_check`` fixture returns an :class:`ExportCheck`, which checks a checkpoint with keyword
options and returns the typed report. :func:`failure_text` and :func:`describe_row` say why an
item fails: the verdict and gate, every reason, the metrics, the artifact and the fix. The hooks
that collect these items are ``export_check.pytest_plugin``. Imports nothing heavy until a check runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .errors import folded
from .gates import Thresholds, agreement_name, changed_name
from .pytest_session import REGEN_FLAG, Outcome, run_config, session_state

if TYPE_CHECKING:
    from .results import Report, Row

EAGER = "eager"


def _input_names(report: Report) -> list[str]:
    from .errors import ExportCheckError
    from .golden.manifest import read_manifest

    try:
        return [item.name for item in read_manifest(Path(report.golden.path)).inputs]
    except ExportCheckError:
        return []


def _fix_hint(row: Row, checkpoint: str) -> str:
    if row.family == EAGER:
        return (
            f"to fix: if the new weights are intended, adopt their logits after review: `export-check golden approve "
            f"{checkpoint}` or `pytest {REGEN_FLAG}`; otherwise check the checkpoint and --arch"
        )
    key = " / ".join(Thresholds().with_gates(**{row.family: row.gate}).loosen_keys(row.family))
    return (
        "to fix: the exported artifact drifts from the eager model, so regenerating the golden set does not change this; "
        f"fix the export, or after review loosen {key} in [tool.export-check]"
    )


def describe_row(report: Report, row: Row) -> str:
    """A row's failure as text: verdict and gate, every reason, the metrics, the artifact and the fix."""
    head = f"{row.name} {row.status.upper()} (vs {row.compared_with}, gate {row.gate.describe()})"
    lines = [head, *(f"  {reason}" for reason in row.reasons)]
    m = row.metrics
    if m is not None:
        names = _input_names(report) if m.top1_changed else []
        changed = ", ".join(names[i] if i < len(names) else f"#{i}" for i in m.top1_changed[:8])
        more = f", … {len(m.top1_changed)} in all" if len(m.top1_changed) > 8 else ""
        lines.append(
            f"  metrics over {m.images} inputs: MAE {m.mae:.3e}, max |err| {m.max_abs:.3e}, median input MAE "
            f"{m.median_abs:.3e}{'' if m.top1_agreement is None else f', {agreement_name(m)} {m.top1_agreement:.1%}'}, non-finite {m.nonfinite}"
        )
        if changed:
            lines.append(f"  {changed_name(m)} on: {changed}{more}")
    if row.artifact is not None:
        lines.append(f"  artifact: {row.artifact.path} ({row.artifact.size_bytes} bytes, sha256 {row.artifact.sha256[:12]})")
    lines += [f"  note: {folded(note)}" for note in row.notes[:5]]
    lines.append(f"  {_fix_hint(row, report.checkpoint.path)}")
    return "\n".join(lines)


class ExportCheckFailure(Exception):
    """One item's failure; its text is the whole report (no traceback into the plugin)."""


def failure_text(outcome: Outcome, row_name: str | None) -> str | None:
    """Why an item (``row_name``) or a whole check (``None``) fails, or ``None`` when it passes."""
    parts = []
    if outcome.golden_note:
        parts.append(outcome.golden_note)
    if outcome.error is not None:
        from .errors import error_message

        parts.append(f"export-check: error: {error_message(outcome.error)}")
    elif outcome.report is not None:
        rows = [outcome.report.row(row_name)] if row_name else list(outcome.report.rows)
        for row in rows:
            if not row.passed:
                parts.append(describe_row(outcome.report, row))
            elif outcome.golden_note:
                parts.append(f"{row.name} passed against the new golden set")
    return "\n".join(parts) if parts else None


class ExportCheck:
    """The ``export_check`` fixture: ``export_check(checkpoint, **options) -> Report``.

    Relative checkpoint paths are relative to pytest's rootdir. Options are the CLI's flags
    (``artifacts``, ``arch``, ``arch_kwargs``, ``golden``, ``max_mae``, ``config`` ...); the
    rest comes from the settings files as for ``export-check CHECKPOINT``.
    """

    def __init__(self, config: pytest.Config, nodeid: str = "") -> None:
        self._config = config
        self._nodeid = nodeid

    def __call__(self, checkpoint: str | Path, **options: Any) -> Report:
        __tracebackhide__ = True
        path = Path(checkpoint)
        path = path if path.is_absolute() else self._config.rootpath / path
        for key in ("golden", "out", "config"):
            if options.get(key) is not None and not Path(options[key]).is_absolute():
                options[key] = self._config.rootpath / options[key]
        session = session_state(self._config)
        outcome = session.shown_once(session.outcome(path, options), self._nodeid)
        if outcome.golden_note or outcome.error is not None:
            pytest.fail(failure_text(outcome, None) or "", pytrace=False)
        assert outcome.report is not None
        return outcome.report

    @staticmethod
    def assert_passed(report: Report) -> None:
        """Fail the calling test with every failing row's metrics, gate and fix."""
        __tracebackhide__ = True
        text = failure_text(Outcome(report=report, error=None, golden_note=None), None)
        if text:
            pytest.fail(text, pytrace=False)


class CheckpointFile(pytest.File):
    """A declared checkpoint: the eager row and one item per artifact kind its settings select."""

    selected: tuple[str, ...] | None = None

    def _settings(self) -> dict[str, Any]:
        from .pytest_session import declared_settings

        chosen = declared_settings(self.config, self.path)
        return {} if chosen is None else {"config": chosen}

    def collect(self) -> Iterator[ExportCheckItem]:
        config, _ = run_config(self.path, self._settings())
        yield ExportCheckItem.from_parent(self, name=EAGER)
        for kind in config.selected_kinds:
            yield ExportCheckItem.from_parent(self, name=kind)

    def outcome(self) -> Outcome:
        options: dict[str, Any] = self._settings()
        if self.selected is not None:
            # An empty selection still runs the pipeline (eager row); "--artifacts" needs at least one kind.
            options["artifacts"] = list(self.selected) or None
        return session_state(self.config).outcome(self.path, options)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        from .errors import ExportCheckError

        if isinstance(excinfo.value, ExportCheckError):
            from .errors import error_message

            return f"export-check: error: {error_message(excinfo.value)}"
        return str(super().repr_failure(excinfo))


class ExportCheckItem(pytest.Item):
    """One row of the report: ``eager`` (the approved model?) or one artifact kind (drift vs eager)."""

    parent: CheckpointFile

    def runtest(self) -> None:
        outcome = session_state(self.config).shown_once(self.parent.outcome(), self.nodeid)
        text = failure_text(outcome, None if outcome.report is None else self.name)
        if text:
            raise ExportCheckFailure(text)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ExportCheckFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name
