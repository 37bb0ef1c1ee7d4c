"""The typed report of one run. Every output (terminal, JSON, exit code, pytest items) is a view of it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from .compare import Metrics
from .files import FileInfo
from .gates import Gate, Thresholds
from .records import BatchSizeRun, EagerSelfCheck, Int8Coverage, Latency, LayerComparison, Observation, Reduced
from .sentences import layer_method, layers_summary, reproduce_command

SCHEMA_VERSION = 1
PASS, FAIL, ERROR, NOT_APPLICABLE = "pass", "fail", "error", "not-applicable"
STATUSES = (PASS, FAIL, ERROR, NOT_APPLICABLE)


@dataclass(frozen=True)
class ShapeCheck:
    """Dynamic-shape validation: per-image agreement across batch sizes."""

    main_size: int
    bound: float  # how far an image may move with the batch size before it counts as moving (the row's MAE bound)
    runs: tuple[BatchSizeRun, ...]
    reasons: tuple[str, ...]  # every compared output's findings (each named when there are several); empty when it passed
    outputs: tuple[tuple[str, tuple[BatchSizeRun, ...]], ...] = ()  # the runs of every compared output after the first

    @property
    def passed(self) -> bool:
        return not self.reasons

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(r.size for r in self.runs)

    def to_json(self) -> dict[str, Any]:
        return {
            "main_size": self.main_size,
            "bound": self.bound,
            "passed": self.passed,
            "runs": [r.to_json() for r in self.runs],
            "outputs": {name: [r.to_json() for r in runs] for name, runs in self.outputs},
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class Rerun:
    """Determinism: the same batch run ``runs`` times; the largest difference from the first run."""

    runs: int
    images: int
    max_abs: float
    bound: float
    reasons: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.reasons

    def to_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "images": self.images, "max_abs": self.max_abs, "bound": self.bound,
                "passed": self.passed, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class Diagnostics:
    """Everything measured about one row beyond its drift. ``reasons`` are the gating findings."""

    shapes: ShapeCheck | None = None
    rerun: Rerun | None = None
    latency: Latency | None = None
    layers: LayerComparison | None = None
    notes: tuple[str, ...] = ()  # informational findings (never gating)
    seconds: float = 0.0  # wall time the diagnostics of this row took
    eager_check: EagerSelfCheck | None = None  # the eager row's: does it reproduce itself
    reduced: Reduced | None = None  # a failing ONNX row's smallest failing subgraph

    @property
    def reasons(self) -> tuple[str, ...]:
        out: tuple[str, ...] = ()
        if self.shapes is not None:
            out += self.shapes.reasons
        if self.rerun is not None:
            out += self.rerun.reasons
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "shapes": None if self.shapes is None else self.shapes.to_json(),
            "determinism": None if self.rerun is None else self.rerun.to_json(),
            "latency": None if self.latency is None else self.latency.to_json(),
            "layers": None if self.layers is None else _layers_json(self.layers),
            "notes": list(self.notes),
            "seconds": self.seconds,
            "eager_self_check": None if self.eager_check is None else self.eager_check.to_json(),
            "reduced": None if self.reduced is None else {**self.reduced.to_json(), "command": reproduce_command(self.reduced)},
        }


def _layers_json(layers: LayerComparison) -> dict[str, Any]:
    """The per-layer table as the JSON report holds it, with its one-line summary after ``suspects``."""
    items = [(k, layer_method(layers) if k == "method" else v) for k, v in layers.to_json().items()]
    at = [key for key, _ in items].index("suspects") + 1
    return dict([*items[:at], ("summary", layers_summary(layers)), *items[at:]])


@dataclass(frozen=True)
class OutputRow:
    """One named output of a row, judged on its own: a model with several outputs gets one each."""

    name: str
    status: str  # PASS or FAIL
    metrics: Metrics
    reasons: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "metrics": self.metrics.to_json(), "reasons": list(self.reasons)}


# Warnings that say an export may not do what eager does. A TracerWarning is always one ("Converting a
# tensor to a Python boolean/number/index might cause the trace to be incorrect", "... will be treated
# as a constant"); so is what an exporter printed. Other categories count when they say so in words.
_CONCERN_CATEGORIES = ("TracerWarning:", "ExporterOutput:")
_CONCERN_WORDS = ("might cause the trace to be incorrect", "treated as a constant", "might not generalize",
                  "trace might", "results may be incorrect", "may produce incorrect", "not be exported correctly")


def is_concern(note: str) -> bool:
    """
    >>> is_concern("TracerWarning: Converting a tensor to a Python boolean might cause the trace to be incorrect.")
    True
    >>> is_concern("DeprecationWarning: `torch.jit.trace` is deprecated. Please switch to `torch.compile` or `torch.export`.")
    False
    """
    if note.startswith(_CONCERN_CATEGORIES):
        return True
    return not note.startswith(("DeprecationWarning:", "FutureWarning:")) and any(w in note for w in _CONCERN_WORDS)


@dataclass(frozen=True)
class Row:
    """One line of the verdict: the eager model against the golden logits, or one artifact against eager."""

    name: str
    family: str  # "eager", "float" or "int8": which gate applies
    compared_with: str  # "golden" or "eager"
    status: str  # PASS, FAIL or ERROR
    gate: Gate
    metrics: Metrics | None  # the first compared output's; None when the artifact could not be built or run
    reasons: tuple[str, ...]  # why it failed, or the error
    artifact: FileInfo | None = None
    build_seconds: float | None = None
    replay_seconds: float | None = None
    details: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()  # warnings the exporters emitted
    # Where the row came from in the artifact cache (exporter/cache/): "hit" (nothing built or
    # replayed), "artifact" (file reused, replayed afresh), "miss", "rebuilt" (damaged entry); None: no cache.
    cache: str | None = None
    # Batch-size agreement, determinism, latency and per-layer comparison (exporter/diagnostics/).
    diagnostics: Diagnostics | None = None
    # Every compared output, each judged (a model with several outputs; empty for one output, whose
    # numbers are ``metrics``), and the outputs a setting left out of the comparison.
    outputs: tuple[OutputRow, ...] = ()
    not_compared: tuple[str, ...] = ()
    # An int8 row's weights in int8, counted in its file (measurements.Int8Coverage); None for other rows.
    int8_coverage: Int8Coverage | None = None

    @property
    def concerns(self) -> tuple[str, ...]:
        """The notes that say this export is probably wrong (shown in every view): tracer warnings
        about Python values, what an exporter printed. Deprecations stay in the JSON notes only."""
        return tuple(n for n in self.notes if is_concern(n))

    @property
    def passed(self) -> bool:
        """Whether the row lets the run pass: it passed, or its kind does not apply (``--strict``
        judges those as failures instead)."""
        return self.status in (PASS, NOT_APPLICABLE)

    def to_json(self, reference_mae: float) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.family,
            "compared_with": self.compared_with,
            "status": self.status,
            "gate": self.gate.to_json(),
            "within_reference_mae": None if self.metrics is None else bool(self.metrics.mae <= reference_mae),
            "metrics": None if self.metrics is None else self.metrics.to_json(),
            "reasons": list(self.reasons),
            "artifact": None if self.artifact is None else self.artifact.to_json(),
            "build_seconds": self.build_seconds,
            "replay_seconds": self.replay_seconds,
            "details": dict(self.details),
            "notes": list(self.notes),
            "concerns": list(self.concerns),
            "cache": self.cache,
            "diagnostics": None if self.diagnostics is None else self.diagnostics.to_json(),
            "outputs": [o.to_json() for o in self.outputs],
            "not_compared": list(self.not_compared),
            "int8_coverage": None if self.int8_coverage is None else self.int8_coverage.to_json(),
        }


def lossless(value: Any) -> Any:
    """``value`` with every non-finite float as the text ``inf``, ``-inf`` or ``nan`` (JSON has no such
    numbers; ``cache.sealed.from_plain`` reads the text back): a stored observation keeps an infinite error.

    >>> lossless({"mae": float("inf"), "runs": [1.5, float("nan")]})
    {'mae': 'inf', 'runs': [1.5, 'nan']}
    """
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: lossless(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [lossless(v) for v in value]
    return value


def plural(count: int, noun: str) -> str:
    """A count and its noun, singular for one.

    >>> plural(1, "error"), plural(0, "error"), plural(2, "input")
    ('1 error', '0 errors', '2 inputs')
    """
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


@dataclass(frozen=True)
class GoldenSummary:
    path: str
    inputs: int
    manifest_sha256: str
    created: str
    recorded_checkpoint_sha256: str | None
    recorded_with: tuple[tuple[str, str], ...]
    label_accuracy: float | None  # eager top-1 accuracy against stored labels, when the set has them

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "inputs": self.inputs,
            "manifest_sha256": self.manifest_sha256,
            "created": self.created,
            "recorded_checkpoint_sha256": self.recorded_checkpoint_sha256,
            "recorded_with": dict(self.recorded_with),
            "eager_label_accuracy": self.label_accuracy,
        }


@dataclass(frozen=True)
class Report:
    tool_version: str
    created: str
    checkpoint: FileInfo
    golden: GoldenSummary
    thresholds: Thresholds
    settings: tuple[tuple[str, Any], ...]
    versions: tuple[tuple[str, str], ...]
    rows: tuple[Row, ...]
    seconds: float
    out_dir: str
    timings: tuple[tuple[str, float], ...] = ()  # wall seconds per pipeline stage, in order
    settings_files: tuple[str, ...] = ()  # the settings files the run read (RunConfig.settings_files)
    run_notes: tuple[str, ...] = ()  # what the run could not do and went on without (no cache key could be made)
    target: str | None = None  # a replay's: the machine the bundle was judged on (exporter/replay.py); None: where it was built
    # what the rows were judged from, in row order: the JSON keeps them so `export-check judge` can judge again (exporter/rejudge.py)
    observations: tuple[Observation, ...] = ()
    # (row, path) of the per-layer errors written as Model Explorer node data (report/node_data.py)
    node_data: tuple[tuple[str, str], ...] = ()

    @property
    def judged(self) -> bool:
        """Whether any row was judged and passed: a run whose every row is not applicable judged nothing."""
        return any(row.status == PASS for row in self.rows)

    @property
    def passed(self) -> bool:
        """Every row passed (or does not apply), and at least one was judged: a run that judged nothing never passes."""
        return self.judged and all(row.passed for row in self.rows)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def plan_cut(self) -> tuple[str, ...]:
        """What ``--diagnostics-budget`` left out of the checks' plan (one plan per run: the first row's that says), or ()."""
        return next((o.diagnostics.cut for o in self.observations if o.diagnostics is not None and o.diagnostics.cut), ())

    def counts(self) -> dict[str, int]:
        return {s: sum(r.status == s for r in self.rows) for s in STATUSES}

    def counts_text(self) -> str:
        """``7 passed, 0 failed, 0 errors`` (``1 error``), and ``, 1 not applicable`` when a kind does not apply."""
        c = self.counts()
        text = f"{c[PASS]} passed, {c[FAIL]} failed, {plural(c[ERROR], 'error')}"
        text += f", {c[NOT_APPLICABLE]} not applicable" if c[NOT_APPLICABLE] else ""
        return text if self.judged or c[FAIL] or c[ERROR] else f"nothing judged ({text})"

    def row(self, name: str) -> Row:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "export-check-report",
            "schema_version": SCHEMA_VERSION,
            "tool_version": self.tool_version,
            "created": self.created,
            "passed": self.passed,
            "exit_code": self.exit_code,
            "counts": self.counts(),
            "checkpoint": self.checkpoint.to_json(),
            "golden": self.golden.to_json(),
            "thresholds": self.thresholds.to_json(),
            "settings": dict(self.settings),
            "settings_files": list(self.settings_files),
            "run_notes": list(self.run_notes),
            "target": self.target,
            "versions": dict(self.versions),
            "out_dir": self.out_dir,
            "seconds": self.seconds,
            "timings": dict(self.timings),
            "rows": [row.to_json(self.thresholds.reference_mae) for row in self.rows],
            "node_data": dict(self.node_data),
            "observations": [lossless(asdict(o)) for o in self.observations],
        }
