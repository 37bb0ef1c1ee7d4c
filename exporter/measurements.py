"""What a run observes about each row, before anything is judged: typed, frozen, no verdicts.

The pipeline (``observe``) fills one :class:`Observation` per row; ``judge`` turns observations and
gates into rows; the cache stores observations (never rows), so a cached run and a cold run are
judged by the same code. Nothing here imports numpy or torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .compare import Metrics
from .diagnostics import BatchSizeRun, EagerSelfCheck, Latency, LayerComparison
from .files import FileInfo


@dataclass(frozen=True)
class SizeRuns:
    """The batch-size runs over the probe images, each compared per image with the main size."""

    main_size: int
    runs: tuple[BatchSizeRun, ...]


@dataclass(frozen=True)
class RerunMeasure:
    """The first batch run ``runs`` times: the largest difference of a later run from the first."""

    runs: int
    images: int
    max_abs: float


@dataclass(frozen=True)
class Measured:
    """A row's diagnostics as measured: batch sizes, reruns, cost and, when the judge asked for
    one, the per-layer table (``layers``, measured against ``layers.threshold``)."""

    sizes: SizeRuns | None = None
    rerun: RerunMeasure | None = None
    latency: Latency | None = None
    layers: LayerComparison | None = None
    notes: tuple[str, ...] = ()  # warnings seen and what could not be measured
    seconds: float = 0.0
    error: str | None = None  # the artifact could not be reopened for its diagnostics
    eager_check: EagerSelfCheck | None = None  # the eager row's: two calls on the first batch before any build


@dataclass(frozen=True)
class Observation:
    """Everything observed about one row: the eager model against the golden reference, or one
    artifact, reloaded from its file, against eager. ``error`` is a build, reload or replay failure
    (for eager: its output does not fit the reference)."""

    name: str
    family: str  # the gate family (config.GATE_FAMILIES)
    compared_with: str  # "golden" or "eager"
    metrics: Metrics | None
    error: str | None = None
    artifact: FileInfo | None = None
    build_seconds: float | None = None
    replay_seconds: float | None = None
    details: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()  # warnings the exporters and runtimes emitted
    diagnostics: Measured | None = None
    # With several compared outputs: each one's metrics, the first one's also in ``metrics`` (which
    # the diagnostics are about); empty for a single output. And the outputs a setting excluded.
    outputs: tuple[tuple[str, Metrics], ...] = ()
    not_compared: tuple[str, ...] = ()
    not_applicable: bool = False  # the kind does not apply to this model; ``error`` says why
    # Where it came from in the artifact cache: "hit" (nothing built or replayed), "artifact" (file
    # reused, replayed afresh), "miss", "rebuilt" (damaged entry); None: no cache.
    cache: str | None = None
