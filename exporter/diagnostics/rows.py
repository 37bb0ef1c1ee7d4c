"""The rows the diagnostics compare, and what one size's rows show against eager's.

Every compared output of a batch, samples first, one row per sample, the outputs' values side by side in float32
(``rows_of``, ``side_by_side``): what the batch-size and determinism checks run on, so each covers every output;
``columns_of`` says where each output sits in them. ``measure_outputs`` compares an artifact's rows with eager's at
every batch size (``shapes`` plans and runs the sizes), output by output.

>>> from export_check.signature import SINGLE
>>> rows_of({"logits": np.ones((2, 3, 4))}, SINGLE, "eager").shape
(2, 12)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..compare import ErrorAccumulator, ShapeMismatch
from ..feeds import samples_first
from ..records import BatchSizeRun
from ..signature import Signature


class RowCountError(ValueError):
    pass


def rows_of(outputs: Mapping[str, np.ndarray], signature: Signature, what: str, first_only: bool = False) -> np.ndarray:
    """Every compared output of ``outputs`` (``what``'s), one row per sample, side by side (``side_by_side``); with
    ``first_only``, the first compared output's rows alone (what the eager self-check compares: it is about the model)."""
    specs = (signature.compared_outputs() or signature.outputs[:1])[: 1 if first_only else None]
    return side_by_side(samples_first(outputs, signature, [s.name for s in specs], what))


def _per_image_mae(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.shape != b.shape:
        raise RowCountError(f"output shape {tuple(a.shape)} != {tuple(b.shape)}")
    with np.errstate(invalid="ignore"):  # inf - inf (a checkpoint with Inf weights) is NaN, as a row's non-finite values say
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64)).reshape(len(a), -1)
    diff = np.where(np.isfinite(diff), diff, np.inf)
    return diff.mean(axis=1) if diff.shape[1] else np.zeros(len(a))


def _judged_at(judged: np.ndarray | None, count: int) -> np.ndarray:
    """The positions among the first ``count`` probe samples that are judged (all of them without a mask)."""
    return np.arange(count) if judged is None else np.flatnonzero(judged[:count])


def _moved(outputs: dict[int, np.ndarray | str], size: int, main: int, judged: np.ndarray | None = None) -> float | None:
    """Worst per-image MAE of the outputs at ``size`` against the same images at the main size (over the
    ``judged`` probe samples only, when a mask is given)."""
    got, ref = outputs.get(size), outputs.get(main)
    if not isinstance(got, np.ndarray) or not isinstance(ref, np.ndarray):
        return None
    if len(ref) < len(got):
        return None
    keep = _judged_at(judged, len(got))
    try:
        dev = _per_image_mae(got[keep], ref[keep])
    except RowCountError:
        return None
    return float(dev.max()) if len(dev) else 0.0


@dataclass(frozen=True)
class Column:
    """One compared output's place in the rows the checks compare (``side_by_side``): columns
    ``start:stop``, each sample's values of shape ``shape``, judged as ``kind`` over ``class_axis``."""

    name: str
    kind: str
    class_axis: int
    shape: tuple[int, ...]
    start: int
    stop: int


def side_by_side(outputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """Every compared output (samples first), one row per sample, the outputs' values side by side in
    float32: what the batch-size and determinism checks run on, so each covers every output."""
    arrays = [np.asarray(a) for a in outputs.values()]
    n = len(arrays[0])
    rows = [a.reshape(n, -1).astype(np.float32, copy=False) for a in arrays]
    return rows[0] if len(rows) == 1 else np.concatenate(rows, axis=1)


def columns_of(sample: Mapping[str, np.ndarray], signature: Signature) -> tuple[Column, ...]:
    """Where each compared output sits in ``side_by_side``'s rows, from one sample's outputs (as the golden set holds them)."""
    specs = signature.compared_outputs() or signature.outputs[:1]
    columns, start = [], 0
    for spec in specs:
        held = np.shape(sample[spec.name])
        shape = tuple(d for i, d in enumerate(held) if i != spec.batch_axis % max(len(held), 1))  # its shape without the samples' axis
        width = int(np.prod(shape)) if shape else 1
        columns.append(Column(spec.name, spec.kind, spec.class_axis, shape, start, start + width))
        start += width
    return tuple(columns)


def _block(outputs: dict[int, np.ndarray | str], column: Column, width: int) -> dict[int, np.ndarray | str]:
    """One output's values at each size; a size whose rows are not ``width`` wide is that size's error."""
    def one(got: np.ndarray | str) -> np.ndarray | str:
        if isinstance(got, str):
            return got
        if got.ndim != 2 or got.shape[1] != width:
            return f"RowCountError: returned {got.shape[1] if got.ndim == 2 else got.shape} values per sample over its outputs; eager's are {width}"
        return got[:, column.start : column.stop].reshape(len(got), *column.shape)

    return {size: one(got) for size, got in outputs.items()}


def measure_outputs(artifact: dict[int, np.ndarray | str], eager: dict[int, np.ndarray | str], main: int, columns: tuple[Column, ...],
                    clock: dict[int, float] | None = None, judged: np.ndarray | None = None) -> tuple[tuple[str, tuple[BatchSizeRun, ...]], ...]:
    """``measure`` for every compared output, each judged on its own values (the seconds on the first's). One output is
    compared as the 2-D rows it always was (its verdicts unchanged); several, each on its own block of columns."""
    width = columns[-1].stop
    blocks = [(artifact, eager)] if len(columns) == 1 else [(_block(artifact, c, width), _block(eager, c, width)) for c in columns]
    return tuple((c.name, measure(got, eager_got, main, c.kind, c.class_axis, clock=clock if i == 0 else None, judged=judged))
                 for i, (c, (got, eager_got)) in enumerate(zip(columns, blocks, strict=True)))


def measure(artifact: dict[int, np.ndarray | str], eager: dict[int, np.ndarray | str], main: int,
            kind: str = "logits", class_axis: int = -1, clock: dict[int, float] | None = None,
            judged: np.ndarray | None = None) -> tuple[BatchSizeRun, ...]:
    """At every size: the artifact against eager at that same size (per image, under the row's
    gate later), and how far each of them moved from its own output at the main size. ``judged``: a
    mask over the probe samples (a calibrated row's: those outside its calibration split); only those
    are compared, moved and counted, and ``worst_image`` stays an index into the golden set."""
    main = min(main, max(artifact))
    runs = []
    for size in sorted(artifact):
        got, eager_got = artifact[size], eager.get(size)
        eager_error = eager_got if isinstance(eager_got, str) else None
        common: dict[str, Any] = {"size": size, "moved": _moved(artifact, size, main, judged),
                                  "eager_moved": _moved(eager, size, main, judged),
                                  "eager_error": eager_error, "seconds": (clock or {}).get(size, 0.0)}
        if isinstance(got, str):
            runs.append(BatchSizeRun(images=0, error=got, **common))
            continue
        if not isinstance(eager_got, np.ndarray):
            runs.append(BatchSizeRun(images=len(_judged_at(judged, len(got))), error=None if eager_error else "eager was not run at this size",
                                     **common))
            continue
        acc = ErrorAccumulator(kind, class_axis)
        keep = _judged_at(judged, min(len(got), len(eager_got)))  # the main size from the replay may hold a short last batch more
        try:
            with np.errstate(invalid="ignore"):  # inf - inf: Inf weights; the NaN counts as a non-finite value
                acc.add(eager_got[keep], got[keep])
        except ShapeMismatch as exc:
            runs.append(BatchSizeRun(images=len(keep), error=f"{exc} (eager's at this batch size)", **common))
            continue
        m = acc.result()
        per_image = np.asarray(m.per_image_mae, dtype=np.float64)
        at = int(np.argmax(per_image)) if per_image.size else None
        runs.append(BatchSizeRun(
            images=m.images, mae=m.mae, max_abs=m.max_abs, agreement=None if m.agreement == "none" else m.top1_agreement,
            reference_mean_abs=m.reference_mean_abs, nonfinite=m.nonfinite, worst_image=None if at is None else int(keep[at]),
            worst_image_mae=None if at is None else float(per_image[at]), **common,
        ))
    return tuple(runs)
