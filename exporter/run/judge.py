"""The judge: observations and gates in, rows with a status and every reason out. Pure.

This is the only place a verdict is made. A cold run, a cached run and a pytest item all judge
their observations (``measurements.Observation``) here, with the thresholds of the run; the
explain pass asks :func:`wanted` whether a per-layer table or a reduced subgraph is worth measuring for a row. Whether
numbers meet a gate is the gates room's (``gates.judging``): here its reasons become statuses and causes. What a
batch-size run's finding is caused by, and the float noise it is weighed against, are ``run.causes``'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..compare import Metrics
from ..gates import (
    FAMILIES,
    MIN_INT8_COVERAGE,
    GateOf,
    Thresholds,
    gate_of,
    gate_reasons,
    measured_reasons,
    metric_missing,
    reference_mae,
    rerun_bound,
    sole_output,
)
from ..layouts import layout_reasons
from ..records import BatchSizeRun, EagerSelfCheck, Int8Coverage, Observation
from ..results import ERROR, FAIL, NOT_APPLICABLE, PASS, Diagnostics, OutputRow, Row, ShapeCheck
from ..sentences import (
    calibration_notes,
    coverage_shortfall,
    layers_summary,
    measured_notes,
    percent,
    recording_notes,
    reduced_summary,
)
from .causes import EAGER, eager_causes, row_causes

WRONG_WEIGHTS = "the checkpoint's logits differ from the approved reference: wrong or retrained weights?"


def _status_before_layers(obs: Observation, thresholds: Thresholds) -> str:
    """The row's status on the values alone (``_values_only``), before any per-layer table or reduction."""
    obs = _values_only(obs)
    gate_for = gate_of(thresholds, obs.family)
    if obs.error is not None or obs.metrics is None or (obs.diagnostics is not None and obs.diagnostics.error):
        return ERROR
    reasons = drift_reasons(obs, judge_outputs(obs, gate_for), gate_for)
    if obs.diagnostics is not None:
        reasons += row_causes(obs, obs.diagnostics, gate_for, thresholds).reasons
    return FAIL if reasons else PASS


def passes_on_values(obs: Observation, thresholds: Thresholds) -> bool:
    """Whether the row passes on its values alone, before anything explains it (explain: a source that does stands for eager)."""
    return _status_before_layers(obs, thresholds) == PASS


def _values_only(obs: Observation) -> Observation:
    """``obs`` without its batch-size runs that raised: what is left fails on values a table can compare. A size the file
    refuses (a bound planned in it, a specialised export) has no values, and where the row passes a per-layer table or a
    reduction finds nothing (measured: an executorch row refusing batch 64 spent 15 s on a table of no departure)."""
    sizes = obs.diagnostics.sizes if obs.diagnostics is not None else None
    if sizes is None or obs.diagnostics is None:
        return obs

    def ran(runs: tuple[BatchSizeRun, ...]) -> tuple[BatchSizeRun, ...]:
        return tuple(run for run in runs if run.error is None)

    sizes = replace(sizes, runs=ran(sizes.runs), outputs=tuple((name, ran(runs)) for name, runs in sizes.outputs))
    return replace(obs, diagnostics=replace(obs.diagnostics, sizes=sizes))


@dataclass(frozen=True)
class Wanted:
    """What explains a row (``wanted``): a per-layer table, and the smallest failing subgraph."""

    layers: bool = False
    reduction: bool = False


def wanted(obs: Observation, thresholds: Thresholds, diagnose: bool) -> Wanted:
    """What the row deserves, from one look at its status on values (not on batch sizes it refused: ``_values_only``):
    a per-layer table for a row of a family that has one failing on values, or for an int8-style row whenever
    ``--diagnose`` asks (``GateFamily.layers``); its smallest failing subgraph (``diagnostics.reduce``) for a row whose
    file is an ONNX graph failing on values."""
    if obs.family == EAGER:
        return Wanted()
    layers = FAMILIES[obs.family].layers
    onnx = obs.artifact is not None and obs.artifact.path.endswith(".onnx")
    if layers not in ("on-fail", "quantization") and not onnx:
        return Wanted()
    failing = _status_before_layers(obs, thresholds) == FAIL
    return Wanted(layers=(layers == "on-fail" and failing) or (layers == "quantization" and (failing or diagnose)),
                  reduction=onnx and failing)


def wants_layers(obs: Observation, thresholds: Thresholds, diagnose: bool) -> bool:
    """Whether the row deserves a per-layer table (``wanted``)."""
    return wanted(obs, thresholds, diagnose).layers


def wants_reduction(obs: Observation, thresholds: Thresholds) -> bool:
    """Whether the row deserves its smallest failing subgraph (``wanted``)."""
    return wanted(obs, thresholds, False).reduction


def _stale_reduction(obs: Observation, thresholds: Thresholds) -> bool:
    reduced = obs.diagnostics.reduced if obs.diagnostics is not None else None
    return reduced is None or reduced.gate != thresholds.gate_for(obs.family).describe()


def reduction_missing(obs: Observation, thresholds: Thresholds) -> bool:
    """A failing ONNX row without its reduced subgraph, or with one reduced under another gate."""
    return wants_reduction(obs, thresholds) and _stale_reduction(obs, thresholds)


def layers_missing(obs: Observation, thresholds: Thresholds, diagnose: bool) -> bool:
    """A cached observation that lacks the per-layer table today's thresholds ask for (or holds one
    measured against another threshold), or the allclose count of today's atol/rtol, cannot be
    judged whole: the row must be observed again."""
    if metric_missing(obs, thresholds):
        return True
    stale = _stale_reduction(obs, thresholds)
    want = wanted(obs, thresholds, diagnose)
    if want.reduction and stale:
        return True
    if not want.layers:
        return False
    layers = obs.diagnostics.layers if obs.diagnostics is not None else None
    return layers is None or layers.threshold != reference_mae(thresholds)


def stateful(check: EagerSelfCheck | None, bound: float) -> bool:
    """Eager's outputs change from call to call for a reason no seed fixes: no artifact can be compared with it."""
    return check is not None and check.max_abs > bound and not (check.random and check.reproduces_under_seed is not False)


def noisy(check: EagerSelfCheck | None, bound: float) -> bool:
    """Eager draws random numbers: artifacts are judged with its own noise allowed for."""
    return check is not None and check.max_abs > bound and not stateful(check, bound)


def _eager_row(obs: Observation, thresholds: Thresholds) -> Row:
    gate_for = gate_of(thresholds, EAGER)
    gate = gate_for(None)
    common: dict[str, Any] = {"name": obs.name, "family": obs.family, "compared_with": obs.compared_with, "gate": gate,
                              "notes": obs.notes, "cache": obs.cache, "details": obs.details}
    if obs.error or obs.metrics is None:
        return Row(status=FAIL, metrics=None, reasons=(obs.error or "no metrics",), **common)
    outputs = judge_outputs(obs, gate_for)
    common["outputs"], common["not_compared"] = outputs, obs.not_compared
    common["notes"] = obs.notes + own_gate_notes(obs, thresholds, gate_for)
    reasons = drift_reasons(obs, outputs, gate_for)
    metrics = headline(obs, outputs, gate_for)
    wrong_weights = bool(reasons) and differs_measurably(obs, gate_for)
    details = dict(obs.details)
    recorded, checked = details.get("recorded_batch_size"), details.get("checked_batch_size")
    m = obs.diagnostics
    bound = reference_mae(thresholds)
    found = eager_causes(m, bound, rerun_bound(thresholds))
    if reasons and recorded and checked and recorded != checked and found.batch_dependent:
        reasons += (f"the golden set was recorded at batch size {recorded} and this check runs at {checked}, and the model's "
                    f"outputs depend on the batch: check at --batch-size {recorded} (or re-record) before suspecting the weights",)
    elif wrong_weights:
        reasons += (WRONG_WEIGHTS,)
    diagnostics = None
    if m is not None:
        # eager is the reference of the batch-size check: measured and shown, never gated
        shapes = None if m.sizes is None else ShapeCheck(main_size=m.sizes.main_size, bound=bound, runs=m.sizes.runs, reasons=(),
                                                         outputs=m.sizes.outputs)
        # a model that does not reproduce itself: its batch-size movement is its noise, not batch dependence (eager_causes)
        reasons = found.reasons + tuple(r for r in reasons if not (found.reasons and r == WRONG_WEIGHTS))
        diagnostics = Diagnostics(shapes=shapes, latency=m.latency, notes=found.notes + measured_notes(m) + recording_notes(details),
                                  seconds=m.seconds, eager_check=m.eager_check)
    return Row(status=FAIL if reasons else PASS, metrics=metrics, reasons=reasons, diagnostics=diagnostics, **common)


def differs_measurably(obs: Observation, gate_for: GateOf) -> bool:
    """Whether the eager row's own numbers break its gate (a value it measured, not one it lacks: a top-k never measured
    is no evidence about the checkpoint), the only ground for naming the checkpoint as the cause (issue 44)."""
    pairs = ((sole_output(obs), obs.metrics),) if len(obs.outputs) < 2 else tuple(obs.outputs)
    for name, metrics in pairs:
        if metrics is None:
            continue
        if metrics.nonfinite or measured_reasons(metrics, gate_for(name)):
            return True
    return False


def own_gate_notes(obs: Observation, thresholds: Thresholds, gate_for: GateOf) -> tuple[str, ...]:
    """One note per compared output judged by a gate of its own (settings ``[outputs.NAME]``), saying that gate."""
    return tuple(f"{name} is judged by its own gate {gate_for(name).describe()} (settings: outputs.{name})"
                 for name, _ in obs.outputs if thresholds.output_values(name) and gate_for(name) != gate_for(None))


def headline(obs: Observation, outputs: tuple[OutputRow, ...], gate_for: GateOf) -> Metrics | None:
    """A row's figures: with several compared outputs, the worst one's, named (``Metrics.output``): a
    failing output before a passing one, then the furthest past (or nearest to) its MAE bound. So the
    table, the JSON's ``metrics`` and ``--history`` never show a failing row as 0."""
    if not outputs:
        return obs.metrics

    def worst(row: OutputRow) -> tuple[bool, float]:
        m = row.metrics
        bound = gate_for(row.name).mae_bound(m.reference_mean_abs)
        ratio = m.mae / bound if bound > 0 else (0.0 if m.mae == 0 else math.inf)
        return row.status == FAIL, ratio if not math.isnan(ratio) else math.inf

    chosen = max(outputs, key=worst)
    return replace(chosen.metrics, output=chosen.name)


def judge_outputs(obs: Observation, gate_for: GateOf) -> tuple[OutputRow, ...]:
    """Each compared output of a model with several, against its gate (the row's, or its own: settings); empty for one output."""
    if len(obs.outputs) < 2:
        return ()
    judged = []
    for name, metrics in obs.outputs:
        reasons = gate_reasons(metrics, gate_for(name))
        judged.append(OutputRow(name=name, status=FAIL if reasons else PASS, metrics=metrics, reasons=reasons))
    return tuple(judged)


def drift_reasons(obs: Observation, outputs: tuple[OutputRow, ...], gate_for: GateOf) -> tuple[str, ...]:
    """What the replay's figures violate: the row's own (one output, against its gate), else each judged output's, named."""
    assert obs.metrics is not None
    if not outputs:
        return gate_reasons(obs.metrics, gate_for(sole_output(obs)))
    return tuple(f"{o.name}: {r}" for o in outputs for r in o.reasons)


def coverage_findings(coverage: Int8Coverage | None, family: str, strict: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(reasons, notes) of an int8 row's coverage (``Int8Coverage``, recorded by its build): under
    ``MIN_INT8_COVERAGE`` of its weight parameters in int8 it says so in a note, and under ``--strict`` it
    fails with that reason; a coverage that could not be counted, or that its build did not record, is a note.

    >>> reasons, notes = coverage_findings(Int8Coverage(1, 10, 640, 77360, (("conv", "Conv2d", 76720),)), "int8", strict=True)
    >>> reasons[0].startswith("quantized only 0.8% of the weight parameters (1 of 10 weight tensors): 99% stay float in Conv2d (conv)")
    True
    >>> reasons[0].endswith("(--strict: an int8 row with under 50% of its weight parameters in int8 fails)"), notes
    (True, ())
    """
    if coverage is None:
        return (), (("int8 coverage not measured: its build recorded none (built by an earlier export-check)",) if family == "int8" else ())
    if coverage.error is not None:
        return (), (f"int8 coverage not measured: {coverage.error}",)
    if coverage.share is None or coverage.share >= MIN_INT8_COVERAGE:
        return (), ()
    floor = percent(MIN_INT8_COVERAGE)
    if strict:
        return (f"{coverage_shortfall(coverage)} (--strict: an int8 row with under {floor} of its weight parameters in int8 fails)",), ()
    return (), (f"{coverage_shortfall(coverage)} (under the int8 coverage floor of {floor}; --strict fails it)",)


def judge_row(obs: Observation, thresholds: Thresholds, diagnose: bool = False, strict: bool = False,
              eager_check: EagerSelfCheck | None = None) -> Row:
    """One row: its observation judged against its family's gate, its diagnostics, its error.
    ``eager_check``: the eager row's self-check (a noisy eager widens the gate by its own noise; a
    stateful one leaves nothing to compare with)."""
    if obs.family == EAGER:
        return _eager_row(obs, thresholds)
    gate_for = gate_of(thresholds, obs.family)
    common: dict[str, Any] = {"name": obs.name, "family": obs.family, "compared_with": obs.compared_with, "gate": gate_for(None),
                              "build_seconds": obs.build_seconds, "details": obs.details, "notes": obs.notes, "artifact": obs.artifact,
                              "cache": obs.cache, "int8_coverage": Int8Coverage.from_details(dict(obs.details))}
    if obs.not_applicable:
        if strict:
            return Row(status=FAIL, metrics=None, reasons=(f"{obs.error} (--strict: a kind that does not apply fails)",), **common)
        return Row(status=NOT_APPLICABLE, metrics=None, reasons=(obs.error or "not applicable",), **common)
    if eager_check is not None and eager_check.nonfinite_weights:
        return Row(status=ERROR, metrics=obs.metrics, reasons=(
            "not judged: the checkpoint's weights hold NaN/Inf (see the eager row), so eager's outputs are no reference; restore "
            "or retrain the checkpoint and check again",) + ((obs.error,) if obs.error else ()), **common)
    if stateful(eager_check, rerun_bound(thresholds)):
        return Row(status=ERROR, metrics=obs.metrics, reasons=(
            "not judged: the eager model's outputs change from call to call (see the eager row), so no artifact can be "
            "compared with it; fix the model's forward and check again",) + ((obs.error,) if obs.error else ()), **common)
    if obs.error is None and obs.metrics is not None:
        return _replayed_row(obs, thresholds, diagnose, strict, eager_check, common)
    reasons: tuple[str, ...] = (obs.error or "no metrics",)
    m = obs.diagnostics
    # the replay failed on some batch; if the batch-size check says why, it is the artifact's verdict
    shapes = row_causes(obs, m, gate_for, thresholds).shapes if m is not None and m.error is None else None
    if m is not None and shapes is not None and shapes.reasons:
        return Row(status=FAIL, metrics=None, reasons=reasons + shapes.reasons, replay_seconds=obs.replay_seconds,
                   diagnostics=Diagnostics(shapes=shapes, latency=m.latency, notes=measured_notes(m), seconds=m.seconds), **common)
    return Row(status=ERROR, metrics=None, reasons=reasons, **common)


def _replayed_row(obs: Observation, thresholds: Thresholds, diagnose: bool, strict: bool, eager_check: EagerSelfCheck | None,
                  common: dict[str, Any]) -> Row:
    """A row whose replay gave its figures: judged against its gate (a noisy eager's widened by its own noise), its
    layout and int8 coverage, then its batch-size check and rerun (``row_causes``) and what explains a failure."""
    noise = eager_check if noisy(eager_check, rerun_bound(thresholds)) else None
    gate_for = gate_of(thresholds, obs.family, noise)
    gate = gate_for(None)
    if noise is not None:
        common["gate"] = gate
        common["notes"] = obs.notes + (f"judged against a non-deterministic eager model: the gate allows twice its own "
                                       f"run-to-run noise (MAE {noise.mae:.3g}): {gate.describe()}",)
    common["notes"] = common["notes"] + own_gate_notes(obs, thresholds, gate_for)
    outputs = judge_outputs(obs, gate_for)
    common["outputs"], common["not_compared"] = outputs, obs.not_compared
    reasons = drift_reasons(obs, outputs, gate_for)
    laid_out, layout_notes = layout_reasons(dict(obs.details), failed=bool(reasons))  # a file exported for another layout
    reasons, common["notes"] = reasons + laid_out, common["notes"] + layout_notes
    uncovered, coverage_notes = coverage_findings(common["int8_coverage"], obs.family, strict)
    reasons += uncovered
    status = FAIL if reasons else PASS
    m = obs.diagnostics
    calibrated = calibration_notes(dict(obs.details)) + coverage_notes  # said in every view
    if m is None or m.error is not None:
        common["notes"] = calibrated + common["notes"]
    metrics = headline(obs, outputs, gate_for)
    if m is None:
        return Row(status=status, metrics=metrics, reasons=reasons, replay_seconds=obs.replay_seconds, **common)
    if m.error is not None:
        return Row(status=ERROR, metrics=metrics, reasons=reasons + (m.error,), replay_seconds=obs.replay_seconds, **common)
    want = wanted(obs, thresholds, diagnose)
    found = row_causes(obs, m, gate_for, thresholds, eager_noisy=noise is not None,
                       run_to_run=eager_check.mae if eager_check is not None else 0.0)
    explained: tuple[str, ...] = ()
    layers = m.layers if want.layers else None
    if layers is not None and FAMILIES[obs.family].layers == "on-fail" and (reasons or found.reasons):
        explained += (f"where: {layers_summary(layers)}",)
    reduced = m.reduced if want.reduction else None
    if reduced is not None and (reasons or found.reasons):
        stale = reduced.gate != thresholds.gate_for(obs.family).describe()
        explained += ("reduced: " + reduced_summary(reduced, gate_reasons(reduced.metrics, gate) if reduced.metrics else (), stale),)
    diagnostics = Diagnostics(shapes=found.shapes, rerun=found.rerun, latency=m.latency, layers=layers, seconds=m.seconds,
                              notes=calibrated + measured_notes(m) + found.notes, reduced=reduced)
    return Row(status=FAIL if found.reasons else status, metrics=metrics, reasons=reasons + found.reasons + explained,
               replay_seconds=obs.replay_seconds, diagnostics=diagnostics, **common)


def judge_rows(observations: list[Observation], thresholds: Thresholds, diagnose: bool = False, strict: bool = False) -> list[Row]:
    eager = next((o for o in observations if o.family == EAGER), None)
    check = eager.diagnostics.eager_check if eager is not None and eager.diagnostics is not None else None
    return [judge_row(obs, thresholds, diagnose, strict, check) for obs in observations]
