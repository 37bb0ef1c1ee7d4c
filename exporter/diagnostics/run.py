"""The one hook the pipeline calls after replay: measure every row, judge, attach, return new rows.

Each artifact is reopened from its file (what ships, as the replay did), run at several batch sizes,
twice on one batch, and timed; then pure judges turn those records into reasons. A failing float
row gets a divergence diagnosis, every int8 row a per-layer error table (cheap: one batch, measured
at 0.05-0.3 s per artifact on the bundled model). Nothing here raises for a model's misbehaviour:
what goes wrong becomes the row's finding.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import KINDS_BY_NAME, BuildContext
from ..artifacts._common import as_logits, captured_warnings, dedupe
from ..config import RunConfig
from ..golden import GoldenSet
from ..results import ERROR, FAIL, Row
from . import RERUN_FRACTION_OF_FLOAT_GATE, Diagnostics, Rerun, ShapeCheck, determinism, divergence, latency, shapes


def _probe(golden: GoldenSet, batch_size: int) -> np.ndarray:
    """The first images of the golden set that the batch-size and cost checks use."""
    wanted = min(len(golden), max(batch_size, shapes.PROBE_IMAGES))
    parts, have = [], 0
    for _, batch in golden.batches(batch_size):
        parts.append(batch)
        have += len(batch)
        if have >= wanted:
            break
    return np.concatenate(parts)[:wanted]


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
    import torch

    def infer(batch: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return as_logits(model(torch.from_numpy(batch)), "the eager model")

    return infer


def _measure(infer, probe: np.ndarray, eager_at: dict[int, Any], sizes: tuple[int, ...], main: int,
             bound: float, rerun_bound: float, threads: int) -> Diagnostics:
    runs = shapes.measure(shapes.run_sizes(infer, probe, sizes, main), eager_at, main)
    check = ShapeCheck(main_size=main, bound=bound, runs=runs, reasons=shapes.judge(runs, main, bound))
    batch = probe[:main]
    notes: list[str] = []
    rerun = cost = None
    try:
        max_abs = determinism.measure(infer, batch)
        rerun = Rerun(runs=determinism.RUNS, images=len(batch), max_abs=max_abs, bound=rerun_bound,
                      reasons=determinism.judge(max_abs, rerun_bound))
        cost = latency.measure(infer, batch, threads)
    except Exception as exc:  # it already failed the batch-size check at the main size; say so once
        notes.append(f"determinism and latency not measured: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
    return Diagnostics(shapes=check, rerun=rerun, latency=cost, notes=tuple(notes))


def _eager_diagnostics(eager_at: dict[int, Any], main: int, bound: float, probe: np.ndarray, infer, threads: int) -> Diagnostics:
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
    return Diagnostics(shapes=check, latency=latency.measure(infer, probe[:main], threads), notes=tuple(notes))


def diagnose_rows(config: RunConfig, golden: GoldenSet, model: Any, ctx: BuildContext, rows: list[Row], progress) -> list[Row]:
    """Measure, judge and attach diagnostics to every row; a gating finding turns a pass into a fail."""
    probe = _probe(golden, config.batch_size)
    main = min(config.batch_size, len(probe))
    sizes = shapes.plan_sizes(main, len(probe))
    float_gate = config.thresholds.float_gate.max_mae
    rerun_bound = float_gate * RERUN_FRACTION_OF_FLOAT_GATE
    eager_infer = _eager_infer(model)
    progress(f"diagnosing: batch sizes {', '.join(map(str, sizes))}, determinism, latency ({config.threads} threads)")
    eager_at = shapes.run_sizes(eager_infer, probe, sizes, main)

    out = []
    for row in rows:
        began = time.perf_counter()
        if row.family == "eager":
            diag = _eager_diagnostics(eager_at, main, float_gate, probe, eager_infer, config.threads)
            out.append(replace(row, diagnostics=replace(diag, seconds=time.perf_counter() - began)))
            continue
        if row.status == ERROR or row.artifact is None or row.name not in KINDS_BY_NAME:
            out.append(row)
            continue
        kind = KINDS_BY_NAME[row.name]
        path = Path(row.artifact.path)
        warnings_seen: list[str] = []
        with captured_warnings(warnings_seen):
            try:
                with kind.impl().open_runner(path, ctx) as runner:
                    diag = _measure(runner.infer, probe, eager_at, sizes, main, row.gate.max_mae, rerun_bound, config.threads)
            except Exception as exc:
                out.append(replace(row, status=ERROR, reasons=row.reasons + (f"reopening {path.name} for diagnostics failed: {exc}",)))
                continue
            reasons = diag.reasons
            status = FAIL if reasons else row.status
            layers = None
            if row.family == "float" and status == FAIL:
                start = _worst_batch_start(row, config.batch_size)
                progress(f"locating where {row.name} diverges (batch at {start})")
                layers = divergence.compare_layers(path, model, _batch_at(golden, config.batch_size, start), float_gate,
                                                   divergence.DIVERGENCE, config.threads, start)
                reasons = reasons + (f"where: {layers.summary}",)
            elif row.family == "int8":
                layers = divergence.compare_layers(path, model, probe[:main], float_gate, divergence.INT8_LAYERS, config.threads, 0)
        new_notes = tuple(n for n in dedupe(warnings_seen) if n not in row.notes)
        diag = replace(diag, layers=layers, notes=diag.notes + new_notes, seconds=time.perf_counter() - began)
        out.append(replace(row, status=status, reasons=row.reasons + reasons, diagnostics=diag))
    return out
