"""The judge: observations and gates in, rows with a status and every reason out. Pure.

This is the only place a verdict is made. A cold run, a cached run and a pytest item all judge
their observations (``measurements.Observation``) here, with the thresholds of the run; the
observer asks :func:`wants_layers` whether a per-layer table is worth measuring for a row.

>>> from exporter.compare import compare
>>> import numpy as np
>>> gate_reasons(compare(np.zeros((1, 2)), np.ones((1, 2))), Gate(max_mae=0.5))
('MAE 1 > 0.5',)
"""

from __future__ import annotations

from typing import Any

from .compare import Metrics
from .config import FAMILIES, Gate, Thresholds
from .diagnostics import RERUN_FRACTION_OF_FLOAT_GATE, BatchSizeRun, Diagnostics, Rerun, ShapeCheck
from .measurements import Measured, Observation
from .results import ERROR, FAIL, NOT_APPLICABLE, PASS, OutputRow, Row

EAGER = "eager"
WRONG_WEIGHTS = "the checkpoint's logits differ from the approved reference: wrong or retrained weights?"


def gate_reasons(metrics: Metrics, gate: Gate) -> tuple[str, ...]:
    """Every condition of ``gate`` that ``metrics`` violate, not just the first; empty when it passes."""
    reasons = []
    if metrics.nonfinite:
        reasons.append(f"{metrics.nonfinite} non-finite (NaN/Inf) output values")
    if gate.max_mae is not None and not metrics.mae <= gate.max_mae:
        reasons.append(f"MAE {metrics.mae:.3g} > {gate.max_mae:g}")
    if gate.max_relative_mae is not None and not metrics.relative_mae <= gate.max_relative_mae:
        reasons.append(f"relative MAE {metrics.relative_mae:.3g} > {gate.max_relative_mae:g} (MAE {metrics.mae:.3g} over a mean "
                       f"|reference| of {metrics.reference_mean_abs:.3g})")
    if metrics.agreement != "none" and metrics.top1_agreement < gate.min_top1:
        what = "top-1 agreement" if metrics.agreement == "top-1" else "per-position agreement"
        reasons.append(f"{what} {metrics.top1_agreement:.1%} < {gate.min_top1:.1%}")
    if gate.max_abs is not None and not metrics.max_abs <= gate.max_abs:
        reasons.append(f"max abs error {metrics.max_abs:.3g} > {gate.max_abs:g}")
    if metrics.images == 0:
        reasons.append("no images were compared")
    return tuple(reasons)


def shape_reasons(runs: tuple[BatchSizeRun, ...], main: int, bound: float) -> tuple[str, ...]:
    """Reasons the artifact fails the batch-size check; empty when every size agrees with the main one."""
    reasons = []
    for run in runs:
        if run.error is not None:
            if run.eager_error is not None:
                continue  # the eager model itself cannot run at this size: not the export's fault
            if run.error.startswith("fails at the main batch size"):
                reasons.append(f"batch size check: the artifact {run.error}")
                break
            reasons.append(
                f"batch size {run.size} fails ({run.error}) while batch size {main} works: the export specialised "
                "the batch size (a shape baked in by tracing, or a graph whose batch axis was fixed)"
            )
        elif run.excess is not None and not run.excess <= bound:
            eager = "" if not run.eager_max_image_mae else f" (eager itself moves {run.eager_max_image_mae:.3g})"
            reasons.append(
                f"batch size {run.size}: image {run.worst_image}'s logits differ from batch size {main} by MAE "
                f"{run.max_image_mae:.3g} > {bound:g}{eager}: the output depends on the batch size "
                "(specialised under trace, or a simplified graph that lost the dynamic axis)"
            )
    return tuple(reasons)


def rerun_reasons(max_abs: float, bound: float, runs: int) -> tuple[str, ...]:
    """
    >>> rerun_reasons(0.0, 1e-6, 2)
    ()
    >>> rerun_reasons(3e-4, 1e-6, 2)[0]
    'not deterministic: 2 runs of the same batch differ by up to 0.0003 > 1e-06'
    """
    if max_abs <= bound:
        return ()
    return (f"not deterministic: {runs} runs of the same batch differ by up to {max_abs:.3g} > {bound:g}",)


def rerun_bound(thresholds: Thresholds) -> float:
    """What the same input run twice may differ by in any value: a tenth of the float MAE gate."""
    return reference_mae(thresholds) * RERUN_FRACTION_OF_FLOAT_GATE


def reference_mae(thresholds: Thresholds) -> float:
    """The float gate's MAE: every row is shown against it, and the per-layer tables use it."""
    return thresholds.reference_mae


def _checks(obs: Observation, measured: Measured, gate: Gate, thresholds: Thresholds) -> tuple[ShapeCheck | None, Rerun | None]:
    shapes = rerun = None
    if measured.sizes is not None:
        main, runs = measured.sizes.main_size, measured.sizes.runs
        # each image may move with the batch size by the row's own MAE bound (for int8: its relative
        # gate at this output's scale, since activation scales are computed per batch)
        bound = gate.mae_bound(obs.metrics.reference_mean_abs if obs.metrics is not None else 0.0)
        shapes = ShapeCheck(main_size=main, bound=bound, runs=runs, reasons=shape_reasons(runs, main, bound))
    if measured.rerun is not None:
        bound, r = rerun_bound(thresholds), measured.rerun
        rerun = Rerun(runs=r.runs, images=r.images, max_abs=r.max_abs, bound=bound, reasons=rerun_reasons(r.max_abs, bound, r.runs))
    return shapes, rerun


def _status_before_layers(obs: Observation, thresholds: Thresholds) -> str:
    gate = thresholds.gate_for(obs.family)
    if obs.error is not None or obs.metrics is None or (obs.diagnostics is not None and obs.diagnostics.error):
        return ERROR
    reasons = gate_reasons(obs.metrics, gate)
    if obs.diagnostics is not None:
        shapes, rerun = _checks(obs, obs.diagnostics, gate, thresholds)
        reasons += (shapes.reasons if shapes else ()) + (rerun.reasons if rerun else ())
    return FAIL if reasons else PASS


def wants_layers(obs: Observation, thresholds: Thresholds, diagnose: bool) -> bool:
    """Whether the row deserves a per-layer table: a failing row of a family that has one, or an
    int8-style row whenever ``--diagnose`` asks (``GateFamily.layers``)."""
    if obs.family == EAGER:
        return False
    layers = FAMILIES[obs.family].layers
    status = _status_before_layers(obs, thresholds)
    return (layers == "on-fail" and status == FAIL) or (layers == "quantization" and (status == FAIL or diagnose))


def layers_missing(obs: Observation, thresholds: Thresholds, diagnose: bool) -> bool:
    """A cached observation that lacks the per-layer table today's thresholds ask for (or holds one
    measured against another threshold) cannot be judged whole: the row must be observed again."""
    if not wants_layers(obs, thresholds, diagnose):
        return False
    layers = obs.diagnostics.layers if obs.diagnostics is not None else None
    return layers is None or layers.threshold != reference_mae(thresholds)


def _eager_notes(measured: Measured, bound: float) -> tuple[str, ...]:
    runs = measured.sizes.runs if measured.sizes is not None else ()
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
    return tuple(notes)


def _eager_row(obs: Observation, thresholds: Thresholds) -> Row:
    gate = thresholds.gate_for(EAGER)
    common: dict[str, Any] = {"name": obs.name, "family": obs.family, "compared_with": obs.compared_with, "gate": gate,
                              "notes": obs.notes, "cache": obs.cache}
    if obs.error or obs.metrics is None:
        return Row(status=FAIL, metrics=None, reasons=(obs.error or "no metrics",), **common)
    outputs = judge_outputs(obs, gate)
    common["outputs"], common["not_compared"] = outputs, obs.not_compared
    reasons = gate_reasons(obs.metrics, gate) if not outputs else tuple(f"{o.name}: {r}" for o in outputs for r in o.reasons)
    if reasons:
        reasons += (WRONG_WEIGHTS,)
    diagnostics = None
    m = obs.diagnostics
    if m is not None:
        bound = reference_mae(thresholds)
        # eager is the reference of the batch-size check: measured and shown, never gated
        shapes = None if m.sizes is None else ShapeCheck(main_size=m.sizes.main_size, bound=bound, runs=m.sizes.runs, reasons=())
        diagnostics = Diagnostics(shapes=shapes, latency=m.latency, notes=_eager_notes(m, bound) + m.notes, seconds=m.seconds)
    return Row(status=FAIL if reasons else PASS, metrics=obs.metrics, reasons=reasons, diagnostics=diagnostics, **common)


def judge_outputs(obs: Observation, gate: Gate) -> tuple[OutputRow, ...]:
    """Each compared output of a model with several, against the row's gate (empty for one output)."""
    if len(obs.outputs) < 2:
        return ()
    judged = []
    for name, metrics in obs.outputs:
        reasons = gate_reasons(metrics, gate)
        judged.append(OutputRow(name=name, status=FAIL if reasons else PASS, metrics=metrics, reasons=reasons))
    return tuple(judged)


def judge_row(obs: Observation, thresholds: Thresholds, diagnose: bool = False, strict: bool = False) -> Row:
    """One row: its observation judged against its family's gate, its diagnostics, its error."""
    if obs.family == EAGER:
        return _eager_row(obs, thresholds)
    gate = thresholds.gate_for(obs.family)
    common: dict[str, Any] = {"name": obs.name, "family": obs.family, "compared_with": obs.compared_with, "gate": gate,
                              "build_seconds": obs.build_seconds, "details": obs.details, "notes": obs.notes, "artifact": obs.artifact,
                              "cache": obs.cache}
    if obs.not_applicable:
        if strict:
            return Row(status=FAIL, metrics=None, reasons=(f"{obs.error} (--strict: a kind that does not apply fails)",), **common)
        return Row(status=NOT_APPLICABLE, metrics=None, reasons=(obs.error or "not applicable",), **common)
    if obs.error is not None or obs.metrics is None:
        return Row(status=ERROR, metrics=None, reasons=(obs.error or "no metrics",), **common)
    outputs = judge_outputs(obs, gate)
    common["outputs"], common["not_compared"] = outputs, obs.not_compared
    reasons = gate_reasons(obs.metrics, gate) if not outputs else tuple(f"{o.name}: {r}" for o in outputs for r in o.reasons)
    status = FAIL if reasons else PASS
    m = obs.diagnostics
    if m is None:
        return Row(status=status, metrics=obs.metrics, reasons=reasons, replay_seconds=obs.replay_seconds, **common)
    if m.error is not None:
        return Row(status=ERROR, metrics=obs.metrics, reasons=reasons + (m.error,), replay_seconds=obs.replay_seconds, **common)
    shapes, rerun = _checks(obs, m, gate, thresholds)
    found = (shapes.reasons if shapes else ()) + (rerun.reasons if rerun else ())
    status = FAIL if found else status
    layers = m.layers if wants_layers(obs, thresholds, diagnose) else None
    if layers is not None and FAMILIES[obs.family].layers == "on-fail":
        found += (f"where: {layers.summary}",)
    diagnostics = Diagnostics(shapes=shapes, rerun=rerun, latency=m.latency, layers=layers, notes=m.notes, seconds=m.seconds)
    return Row(status=status, metrics=obs.metrics, reasons=reasons + found, replay_seconds=obs.replay_seconds,
               diagnostics=diagnostics, **common)


def judge_rows(observations: list[Observation], thresholds: Thresholds, diagnose: bool = False, strict: bool = False) -> list[Row]:
    return [judge_row(obs, thresholds, diagnose, strict) for obs in observations]
