"""Judging numbers against a gate, the one module that does it: why a metrics record fails a gate (one reason per
bound broken, in the table's order), whether the gate asks for a value the record does not hold, the gate widened by a
noisy eager's own noise, the part of it judged at every batch size, and what the same input run twice may differ by.
The judge (run/judge.py) turns these reasons into statuses and causes.

>>> from export_check.compare import compare
>>> import numpy as np
>>> gate_reasons(compare(np.zeros((1, 2)), np.ones((1, 2))), Gate(max_mae=0.5))
('MAE 1 > 0.5',)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .gate import Gate
from .metrics import GATE_METRICS

if TYPE_CHECKING:
    from ..compare import Metrics
    from ..records import BatchSizeRun, EagerSelfCheck, Observation
    from .thresholds import Thresholds

# Top-1 agreement at a batch size is gated only when at least this many images ran at it (fewer: one
# flipped image would swing it by more than the int8 gates allow).
MIN_AGREEMENT_IMAGES = 32
# Determinism bound as a fraction of the float MAE gate.
RERUN_FRACTION_OF_FLOAT_GATE = 0.1


def reasons(metrics: Metrics, gate: Gate) -> tuple[str, ...]:
    """Why ``metrics`` fail ``gate``, one reason per bound broken, in table order."""
    return tuple(r for m in GATE_METRICS if (r := m.reason(metrics, gate)) is not None)


def missing(metrics: Metrics, gate: Gate) -> bool:
    """Whether ``gate`` asks for a value ``metrics`` do not hold (the observation must be measured again)."""
    return any(m.missing(metrics, gate) for m in GATE_METRICS)


def missing_names(metrics: Metrics, gate: Gate) -> tuple[str, ...]:
    """The names of the values ``gate`` asks for that ``metrics`` do not hold ("top-k agreement")."""
    return tuple(m.name for m in GATE_METRICS if m.missing(metrics, gate))


def at_batch_sizes(gate: Gate) -> Gate:
    """The part of ``gate`` judged against eager at every batch size."""
    return gate.only(m for m in GATE_METRICS if m.at_batch_sizes)


def with_noise(gate: Gate, check: EagerSelfCheck) -> Gate:
    """``gate`` with each bound widened by eager's own noise as its entry says (bounds without a rule stay)."""
    changes = {b.field: m.noise(value, check) for m in GATE_METRICS if m.noise is not None for b in m.bounds
               if (value := getattr(gate, b.field)) is not None}
    return gate.replace(**changes)


def measured_reasons(metrics: Metrics, gate: Gate) -> tuple[str, ...]:
    """Why ``metrics`` fail the part of ``gate`` they hold values for (a value never measured is no evidence either way)."""
    return reasons(metrics, gate.only(m for m in GATE_METRICS if not m.missing(metrics, gate)))


def gate_reasons(metrics: Metrics, gate: Gate) -> tuple[str, ...]:
    """Every condition of ``gate`` that ``metrics`` violate, not just the first (one per bound of the
    table ``metrics.GATE_METRICS``); empty when it passes."""
    found = [f"{metrics.nonfinite} non-finite (NaN/Inf) output values"] if metrics.nonfinite else []
    found += reasons(metrics, gate)
    if metrics.images == 0:
        found.append("no images were compared")
    return tuple(found)


def sole_output(obs: Observation) -> str | None:
    """The name of a row's only compared output (its gate is the row's), None when it has several or none named."""
    return obs.outputs[0][0] if len(obs.outputs) == 1 else None


def metric_missing(obs: Observation, thresholds: Thresholds) -> bool:
    """Whether the row's gate asks for a value its observation does not hold on some output (an allclose
    pair not counted, a metric measured by no earlier version): it is measured again, never passed."""
    if obs.metrics is None:
        return False
    return missing(obs.metrics, thresholds.gate_for(obs.family, sole_output(obs))) or any(
        missing(m, thresholds.gate_for(obs.family, name)) for name, m in obs.outputs)


GateOf = Callable[[str | None], Gate]  # a row's gate for one output (None: the row's own), settings' per-output values laid over it


def gate_of(thresholds: Thresholds, family: str, noise: EagerSelfCheck | None = None) -> GateOf:
    """``family``'s gate for each output (``Thresholds.gate_for``), widened by a noisy eager's own noise."""
    def of(output: str | None) -> Gate:
        gate = thresholds.gate_for(family, output)
        return with_noise(gate, noise) if noise is not None else gate
    return of


def size_gate(gate: Gate, images: int) -> Gate:
    """The row's gate at one batch size: agreement is counted only over enough images. The allclose
    counts are the replay's (every golden value, at the main batch size); a batch-size run is judged
    by the gate's MAE, max-abs and agreement parts against eager at that size."""
    gate = at_batch_sizes(gate)
    return gate if images >= MIN_AGREEMENT_IMAGES else gate.replace(min_top1=None)


def size_gate_reasons(run: BatchSizeRun, gate: Gate) -> tuple[str, ...]:
    """What the artifact at this batch size violates of the row's gate, against eager at the same size."""
    from ..compare import Metrics

    if run.mae is None:
        return ()
    agreement = "none" if run.agreement is None else "top-1"
    metrics = Metrics(images=run.images, mae=run.mae, max_abs=run.max_abs or 0.0, median_abs=0.0,
                      top1_agreement=run.agreement, top1_changed=(), nonfinite=run.nonfinite,
                      per_image_mae=(), reference_mean_abs=run.reference_mean_abs or 0.0, agreement=agreement)
    return gate_reasons(metrics, size_gate(gate, run.images))


def reference_mae(thresholds: Thresholds) -> float:
    """The float gate's MAE: every row is shown against it, and the per-layer tables use it."""
    return thresholds.reference_mae


def rerun_bound(thresholds: Thresholds) -> float:
    """What the same input run twice may differ by in any value: a tenth of the float MAE gate."""
    return reference_mae(thresholds) * RERUN_FRACTION_OF_FLOAT_GATE
