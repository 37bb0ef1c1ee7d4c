"""What the pipeline calls after each row's replay (:class:`Diagnoser`): measure it, judge, attach.

Each artifact runs through the runner the replay opened from its file (what ships), and what the
replay already computed is reused (``trace.ReplayTrace``): the probe's outputs at the main batch size,
the first batch's output and the per-batch timings. What is new runs here: the other batch sizes,
one rerun of the first batch (compared with the replay's run of it), and timed repeats only when the
replay had fewer than ``LATENCY_REPEATS`` timed batches. Pure judges turn those records into reasons.
A failing float row gets a divergence diagnosis; an int8 row gets its per-layer error table when it
fails or when ``--diagnose`` asks for it (0.05-0.3 s per artifact). Nothing here raises for a
model's misbehaviour: what goes wrong becomes the row's finding.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import KINDS_BY_NAME, BuildContext
from ..artifacts._common import captured_warnings, dedupe
from ..artifacts.base import INPUT, logits_of
from ..model import eager_logits
from ..config import FAMILIES, RunConfig
from ..golden.manifest import GoldenSet
from ..results import ERROR, FAIL, Row
from . import LATENCY_REPEATS, RERUN_FRACTION_OF_FLOAT_GATE, Diagnostics, Latency, Rerun, ShapeCheck, determinism, divergence, shapes
from .trace import ReplayTrace

EAGER = "eager"  # the trace's name for the eager model's outputs


def _batch_at(golden: GoldenSet, batch_size: int, start: int) -> np.ndarray:
    for first, batch in golden.batches(batch_size):
        if first == start:
            return batch
    raise AssertionError(f"no batch starts at {start}")


def _worst_batch_start(row: Row, batch_size: int) -> int:
    per_image = np.asarray(row.metrics.per_image_mae if row.metrics else (), dtype=np.float64)
    if per_image.size == 0:
        return 0
    per_image = np.where(np.isnan(per_image), np.inf, per_image)
    return int(np.argmax(per_image)) // batch_size * batch_size


def _eager_infer(model: Any):
    return lambda batch: eager_logits(model, batch)


def _infer_of(runner: Any, name: str):
    """A runner as the diagnostics call it: one batch in, its logits out."""
    return lambda batch: logits_of(runner.infer({INPUT: batch}), name)


def _sizes_from(infer, trace: ReplayTrace, name: str, probe: np.ndarray, sizes: tuple[int, ...], main: int) -> dict[int, Any]:
    """Outputs at every planned size: the main size from the replay, the others run now."""
    replayed = trace.probe_outputs(name)
    todo = tuple(s for s in sizes if s != main or replayed is None)
    out = shapes.run_sizes(infer, probe, todo, main)
    if replayed is not None and main in sizes:
        out[main] = replayed
    return out


def _rerun_and_cost(infer, trace: ReplayTrace, name: str, threads: int, rerun_bound: float | None) -> tuple[Rerun | None, Latency]:
    """Determinism and cost from the replay's own first output and timings, topped up with reruns of the first batch.

    At least one rerun when ``rerun_bound`` is given (compared with the replay's first run of that batch);
    more only when the replay had fewer than ``LATENCY_REPEATS`` timed full batches after its warm-up one.
    """
    batch = trace.first_batch()
    first = trace.first_output(name)
    seconds = trace.timed_seconds(name)[:LATENCY_REPEATS]
    reruns = max(1 if rerun_bound is not None else 0, LATENCY_REPEATS - len(seconds))
    max_abs = 0.0
    for _ in range(reruns):
        began = time.perf_counter()
        out = infer(batch)
        seconds.append(time.perf_counter() - began)
        if first is not None:
            max_abs = max(max_abs, determinism.max_abs_difference(first, out))
    samples = [s * 1000.0 / len(batch) for s in seconds[:LATENCY_REPEATS]]
    cost = Latency(ms_per_image=float(statistics.median(samples)), batch=len(batch), repeats=len(samples), threads=threads,
                   samples_ms=tuple(float(s) for s in samples))
    rerun = None
    if rerun_bound is not None and first is not None:
        runs = 1 + reruns
        rerun = Rerun(runs=runs, images=len(batch), max_abs=max_abs, bound=rerun_bound,
                      reasons=determinism.judge(max_abs, rerun_bound, runs))
    return rerun, cost


def _measure(infer, trace: ReplayTrace, name: str, probe: np.ndarray, eager_at: dict[int, Any], sizes: tuple[int, ...],
             main: int, bound: float, rerun_bound: float, threads: int) -> Diagnostics:
    runs = shapes.measure(_sizes_from(infer, trace, name, probe, sizes, main), eager_at, main)
    check = ShapeCheck(main_size=main, bound=bound, runs=runs, reasons=shapes.judge(runs, main, bound))
    notes: list[str] = []
    rerun = cost = None
    try:
        rerun, cost = _rerun_and_cost(infer, trace, name, threads, rerun_bound)
    except Exception as exc:  # it already failed the batch-size check at the main size; say so once
        notes.append(f"determinism and latency not measured: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
    return Diagnostics(shapes=check, rerun=rerun, latency=cost, notes=tuple(notes))


def _eager_diagnostics(eager_at: dict[int, Any], main: int, bound: float, trace: ReplayTrace, infer, threads: int) -> Diagnostics:
    runs = shapes.measure(eager_at, {}, main)
    notes = []
    moved = [r for r in runs if r.max_image_mae is not None and r.max_image_mae > bound]
    if moved:
        worst = max(moved, key=lambda r: r.max_image_mae or 0.0)
        notes.append(
            f"the eager model's own logits move with the batch size (image {worst.worst_image} by MAE "
            f"{worst.max_image_mae:.3g} at batch size {worst.size}): it is batch-dependent; artifacts are "
            "only held to agree as well as eager does"
        )
    failing = [r for r in runs if r.error]
    if failing:
        notes.append("the eager model itself fails at batch size " + ", ".join(str(r.size) for r in failing))
    check = ShapeCheck(main_size=main, bound=bound, runs=runs, reasons=())  # eager is the reference: never gated
    _, cost = _rerun_and_cost(infer, trace, EAGER, threads, None)
    return Diagnostics(shapes=check, latency=cost, notes=tuple(notes))


def eager_sizes_ahead(model: Any, probe: np.ndarray, batch_size: int) -> dict[int, Any]:
    """Eager over the probe at every planned size but the main one (the replay computes that one).

    The pipeline calls it before the builds, while the build server is still importing its libraries.
    """
    main = min(batch_size, len(probe))
    sizes = shapes.plan_sizes(main, len(probe))
    return shapes.run_sizes(_eager_infer(model), probe, tuple(s for s in sizes if s != main), main)


class Diagnoser:
    """Measures, judges and attaches the diagnostics of one row at a time.

    Set up once the replay has run eager over the golden set (``trace`` holds eager's outputs and
    timings); then :meth:`row` for each row, as soon as that row's replay is done and while its
    runner is still open, so the pipeline can diagnose one artifact while the next one builds.
    ``eager_ahead`` is ``eager_sizes_ahead``'s result.
    """

    def __init__(self, config: RunConfig, golden: GoldenSet, model: Any, progress, trace: ReplayTrace,
                 eager_ahead: dict[int, Any] | None = None) -> None:
        self.config, self.golden, self.model, self.trace, self.progress = config, golden, model, trace, progress
        self.probe = trace.probe()
        self.main = min(config.batch_size, len(self.probe))
        self.sizes = shapes.plan_sizes(self.main, len(self.probe))
        self.float_gate = config.thresholds.gate_for("float").max_mae
        self.rerun_bound = self.float_gate * RERUN_FRACTION_OF_FLOAT_GATE
        self.eager_infer = _eager_infer(model)
        progress(f"diagnosing: batch sizes {', '.join(map(str, self.sizes))}, determinism, latency ({config.threads} threads)")
        replayed = trace.probe_outputs(EAGER)
        if eager_ahead is not None and replayed is not None and set(eager_ahead) | {self.main} == set(self.sizes):
            self.eager_at = {**eager_ahead, self.main: replayed}
        else:
            self.eager_at = _sizes_from(self.eager_infer, trace, EAGER, self.probe, self.sizes, self.main)

    def row(self, row: Row, ctx: BuildContext, runner: Any | None = None) -> Row:
        """``row`` with its diagnostics; a gating finding turns a pass into a fail. ``runner`` is the
        replay's open runner for it (without one, the artifact is reopened from its file)."""
        config, began = self.config, time.perf_counter()
        if row.family == "eager":
            diag = _eager_diagnostics(self.eager_at, self.main, self.float_gate, self.trace, self.eager_infer, config.threads)
            return replace(row, diagnostics=replace(diag, seconds=time.perf_counter() - began))
        if row.status == ERROR or row.artifact is None or row.name not in KINDS_BY_NAME:
            return row
        kind = KINDS_BY_NAME[row.name]
        path = Path(row.artifact.path)
        warnings_seen: list[str] = []
        with captured_warnings(warnings_seen):
            try:
                with contextlib.ExitStack() as stack:
                    opened = runner or stack.enter_context(kind.open_runner(path, ctx))
                    diag = _measure(_infer_of(opened, row.name), self.trace, row.name, self.probe, self.eager_at, self.sizes, self.main,
                                    row.gate.max_mae, self.rerun_bound, config.threads)
            except Exception as exc:
                return replace(row, status=ERROR, reasons=row.reasons + (f"reopening {path.name} for diagnostics failed: {exc}",))
            reasons = diag.reasons
            status = FAIL if reasons else row.status
            layers = None
            layers_kind = FAMILIES[row.family].layers
            if layers_kind == "on-fail" and status == FAIL:
                start = _worst_batch_start(row, config.batch_size)
                self.progress(f"locating where {row.name} diverges (batch at {start})")
                layers = kind.compare_layers(path, self.model, _batch_at(self.golden, config.batch_size, start), self.float_gate,
                                                   divergence.DIVERGENCE, config.threads, start)
                reasons = reasons + (f"where: {layers.summary}",)
            elif layers_kind == "quantization" and (status == FAIL or config.diagnose):
                layers = kind.compare_layers(path, self.model, self.probe[: self.main], self.float_gate, divergence.INT8_LAYERS,
                                                   config.threads, 0)
        new_notes = tuple(n for n in dedupe(warnings_seen) if n not in row.notes)
        diag = replace(diag, layers=layers, notes=diag.notes + new_notes, seconds=time.perf_counter() - began)
        return replace(row, status=status, reasons=row.reasons + reasons, diagnostics=diag)
