"""The causes of a batch-size finding and the run's float noise: what moves with the batch, and whether it can be told
from float rounding. Pure, like the judge that asks it.

A batch-size run (``records.BatchSizeRun``) that misses its gate against eager at that size is named a cause (the export
kept its example batch, specialised the batch size, this size only) only beyond the float noise measured in the same
run (:class:`FloatNoise`); an int8 row moving with the batch is by design only where its kind's row says its activation
scales are dynamic; the eager model moving with the batch beyond float rounding depends on its batch; an eager model that
does not reproduce itself cannot be the reference. The judge (``run.judge``) asks once per row (:func:`row_causes`,
:func:`eager_causes`) and turns these reasons and notes into a row's status.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..artifacts import KINDS_BY_NAME
from ..gates import Gate, GateOf, Thresholds, rerun_bound, size_gate_reasons
from ..records import BatchSizeRun, EagerSelfCheck, Measured, Observation
from ..results import Rerun, ShapeCheck
from ..sentences import batch_size_cause, size_refused_cause, within_float_noise

EAGER = "eager"
FLOAT_MOVE = 1e-5  # an int8 row "moves with the batch" when an image moves by more than the default float gate
# A batch-size cause (the export kept what its example batch computed, specialised the batch size, this batch size
# only) is named only when its size is over NOISE_FACTOR times the float noise measured in the same run (FloatNoise);
# below that the row says its gate is tighter than the model's float noise (issue 25, item 8).
NOISE_FACTOR = 10.0
# Eager's own movement across batch sizes is float rounding (oneDNN picks other kernels per batch size), not a
# dependence on the batch, while it stays within this share of its output's mean |value| (about 84 float32 steps).
# Measured: 1.6e-7 to 3.5e-7 of it on the bundled ResNet and the catalogue's clean models, 6e-3 to 0.26 on the
# catalogue's batch-dependent ones (BatchBranch, ValueBranch, BatchCentred): a margin of 30x below, 600x above.
FLOAT_REACH = 1e-5


@dataclass(frozen=True)
class FloatNoise:
    """One compared output's float noise, measured in the run: eager's own variation (against itself across batch
    sizes, its worst per-image movement from the main size, where that stays within ``reach``, FLOAT_REACH at the
    output's scale; and two calls on one batch, the eager self-check), and for a row that is not int8, the artifact
    against eager at the main size (where the batch size plays no part). Only eager's variation is noise: the
    artifact's own difference is evidence of noise only while it is within NOISE_FACTOR times eager's (a wrong
    export's error is not noise however large it is: issue 44).

    >>> FloatNoise(eager=6e-7, artifact=1.3e-6, main=16, reach=1.7e-5).hides(1.29e-6), FloatNoise(6e-7).hides(0.006)
    (True, False)
    >>> FloatNoise(eager=6e-7, artifact=0.01, main=16).hides(0.0011)  # the artifact's error at 16 is 17,000x eager's
    False
    """

    eager: float
    artifact: float | None = None
    main: int = 0
    reach: float = 0.0

    @property
    def level(self) -> float:
        return self.eager

    def hides(self, value: float | None) -> bool:
        """Whether ``value`` (a movement, a difference from eager) cannot be told from eager's own variation, and the
        artifact's difference at the main size cannot either."""
        within = NOISE_FACTOR * self.level
        return value is not None and value <= within and (self.artifact is None or self.artifact <= within)


def float_noise(runs: tuple[BatchSizeRun, ...], main: int, scale: float, family: str, run_to_run: float = 0.0) -> FloatNoise:
    """The float noise of one output from its batch-size runs (``FloatNoise``): eager's movements are the eager
    row's own batch-size check (every row holds them: one eager pass per size serves all), nothing runs again.
    ``run_to_run``: eager's own MAE between two calls on one batch (its self-check), part of its variation.

    >>> runs = (BatchSizeRun(size=1, images=8, eager_moved=6e-7), BatchSizeRun(size=16, images=64, eager_moved=0.0, worst_image_mae=1.3e-6),
    ...         BatchSizeRun(size=44, images=44, eager_moved=0.3))
    >>> float_noise(runs, 16, 1.7, "float")
    FloatNoise(eager=6e-07, artifact=1.3e-06, main=16, reach=1.7e-05)
    """
    reach = FLOAT_REACH * scale
    eager = max((r.eager_moved for r in runs if r.eager_moved is not None and r.eager_moved <= reach), default=0.0)
    eager = max(eager, run_to_run if run_to_run <= reach else 0.0)
    at_main = next((r for r in runs if r.size == main and r.error is None), None)
    artifact = at_main.worst_image_mae if at_main is not None and family not in ("int8", EAGER) else None
    return FloatNoise(eager=eager, artifact=artifact, main=main, reach=reach)


def _moves(value: float | None, bound: float) -> bool:
    return value is not None and not value <= bound


def shape_reasons(runs: tuple[BatchSizeRun, ...], main: int, gate: Gate, bound: float, family: str = "float",
                  replayed: bool = True, noise: FloatNoise | None = None, scales: str | None = None) -> tuple[str, ...]:
    """Reasons the artifact fails the batch-size check: at some batch size it fails (while eager
    runs) or misses its gate against eager at that same size; empty when every size agrees.
    ``replayed``: the replay judged the main size already (when it failed part way, this says how
    the main size compares). ``noise``: the output's float noise in this run (``float_noise``); a cause
    is named only beyond ``NOISE_FACTOR`` times it, and sizes failing within it are said once as such. ``scales``: the
    kind's ``activation_scales`` (``activation_scales``), the only ground for "by design"."""
    noise = noise if noise is not None else FloatNoise(eager=0.0, main=main)
    reasons: list[str] = []
    within_noise: list[tuple[BatchSizeRun, tuple[str, ...]]] = []
    by_size = {run.size: run for run in runs}
    main_run = by_size.get(main)
    main_fails = main_run is not None and (main_run.error is not None or bool(size_gate_reasons(main_run, gate)))
    for run in runs:
        if run.error is not None:
            if run.eager_error is not None:
                continue  # the eager model itself cannot run at this size: not the export's fault
            if run.size == main:
                reasons.append(f"batch size check: the artifact fails at the main batch size {main}: {run.error}")
                continue
            works = "" if main_fails else f" while batch size {main} works"
            reasons.append(f"batch size {run.size} fails ({run.error}){works}: {size_refused_cause(run.error)}")
            continue
        found = size_gate_reasons(run, gate)
        if not found or (run.size == main and replayed):
            continue  # the main size is the replay's own batch size: its verdict is the row's drift gate
        if run.size == main:
            reasons.append(f"batch size {main} (the replay's): against eager, {'; '.join(found)} ({run.images} images)")
            continue
        # a movement (eager's or the artifact's) names a cause only beyond the gate, float rounding's reach and 10x the run's float noise
        beyond = max(bound, noise.reach, NOISE_FACTOR * noise.level)
        eager_moves, artifact_moves = _moves(run.eager_moved, beyond), _moves(run.moved, beyond)
        if not eager_moves and not artifact_moves and noise.hides(run.worst_image_mae if run.worst_image_mae is not None else run.mae):
            within_noise.append((run, found))
            continue
        if main_fails and not artifact_moves and not eager_moves:
            continue  # wrong at every batch size alike: the replay's reasons already say so
        worst = "" if run.worst_image is None else f"; worst image {run.worst_image}, MAE {run.worst_image_mae:.3g}"
        reasons.append(f"batch size {run.size}: against eager at the same batch size, {'; '.join(found)} "
                       f"({run.images} images{worst}): "
                       f"{batch_size_cause(run, artifact_moves, eager_moves, scales)}")
    if within_noise:  # said once: which sizes, the worst of them, and the noise it cannot be told from
        sizes = [run.size for run, _ in within_noise]
        run, found = max(within_noise, key=lambda pair: pair[0].mae or 0.0)
        worst = "" if run.worst_image is None else f"; worst image {run.worst_image}, MAE {run.worst_image_mae:.3g}"
        reasons.append(f"batch size{'s' if len(sizes) > 1 else ''} {', '.join(map(str, sizes))}: against eager at the same batch size, "
                       f"{'; '.join(found)} (the worst, at batch size {run.size}: {run.images} images{worst}): "
                       + within_float_noise(bound, noise.eager, noise.artifact, noise.main, NOISE_FACTOR))
    return tuple(reasons)


def activation_scales(name: str) -> str | None:
    """How the kind ``name`` scales its int8 activations, from its row (``ArtifactKind.activation_scales``): "dynamic",
    "static", or None (no int8 activations, or not a kind of the table)."""
    kind = KINDS_BY_NAME.get(name)
    return kind.activation_scales if kind is not None else None


def shape_notes(runs: tuple[BatchSizeRun, ...], scales: str | None) -> tuple[str, ...]:
    """What the batch-size runs show that is not a failure (``row_causes`` says it only when they found none): an int8
    row moving with the batch, by design only where its kind's row says its activation scales are dynamic (``scales``);
    a static one moving is said, never excused."""
    if scales is None:
        return ()
    moved = [r for r in runs if _moves(r.moved, FLOAT_MOVE) and not _moves(r.eager_moved, FLOAT_MOVE)]
    if not moved:
        return ()
    worst = max(moved, key=lambda r: r.moved or 0.0)
    if scales == "static":
        return (f"moves with the batch, which its static int8 activation scales (fixed at calibration) do not explain: up to "
                f"MAE {worst.moved:.3g} at batch size {worst.size}, within its gate against eager at every batch size",)
    return (f"moves with the batch by design (dynamic int8 activation scales are computed per batch): up to MAE "
            f"{worst.moved:.3g} at batch size {worst.size}, within its gate against eager at every batch size",)


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


@dataclass(frozen=True)
class RowCauses:
    """What the batch-size check and the rerun of one artifact row find (``row_causes``), and what its batch-size runs
    show that is not a failure (``notes``)."""

    shapes: ShapeCheck | None
    rerun: Rerun | None
    notes: tuple[str, ...] = ()

    @property
    def reasons(self) -> tuple[str, ...]:
        return (self.shapes.reasons if self.shapes else ()) + (self.rerun.reasons if self.rerun else ())


def row_causes(obs: Observation, measured: Measured, gate_for: GateOf, thresholds: Thresholds,
               eager_noisy: bool = False, run_to_run: float = 0.0) -> RowCauses:
    """The batch-size check and the rerun of one row, with the notes of its batch-size runs. ``eager_noisy``: eager draws
    random numbers, so the artifact's reruns do too (the eager row carries that finding). ``run_to_run``: eager's MAE
    between two calls on one batch (its self-check), a part of its own variation (``float_noise``)."""
    rerun = None
    if measured.rerun is not None:
        bound, r = rerun_bound(thresholds), measured.rerun
        # an artifact of a model that draws random numbers draws them too: the eager row carries that finding
        rerun = Rerun(runs=r.runs, images=r.images, max_abs=r.max_abs, bound=bound,
                      reasons=() if eager_noisy else rerun_reasons(r.max_abs, bound, r.runs))
    if measured.sizes is None:
        return RowCauses(shapes=None, rerun=rerun)
    main, runs, more = measured.sizes.main_size, measured.sizes.runs, measured.sizes.outputs
    scales = activation_scales(obs.name)
    moving = shape_notes(runs, scales)
    # every compared output, each against the row's gate at its own scale and named when there are several: an image may
    # move with the batch size by the row's own MAE bound (for int8: its relative gate at the output's scale, since
    # activation scales are computed per batch)
    replayed, first = dict(obs.outputs), obs.outputs[0][0] if obs.outputs else "the first output"
    bounds: dict[str, float] = {}
    reasons: tuple[str, ...] = ()
    for name, output_runs in ((first, runs), *more):
        metrics = replayed.get(name, obs.metrics if name == first else None)
        scale = metrics.reference_mean_abs if metrics is not None else max((r.reference_mean_abs or 0.0 for r in output_runs), default=0.0)
        gate = gate_for(name if obs.outputs else None)
        bounds[name] = gate.mae_bound(scale)
        noise = float_noise(output_runs, main, scale, obs.family, run_to_run if name == first else 0.0)
        found = shape_reasons(output_runs, main, gate, bounds[name], obs.family, replayed=obs.metrics is not None,
                              noise=noise, scales=scales)
        reasons += tuple(f"{name}: {r}" for r in found) if more else found
    return RowCauses(shapes=ShapeCheck(main_size=main, bound=bounds[first], runs=runs, reasons=reasons, outputs=more),
                     rerun=rerun, notes=() if reasons else moving)


def _eager_scale(measured: Measured) -> float:
    """The mean |eager output| at the main size (the first output's), what float rounding's reach is measured against."""
    sizes = measured.sizes
    at_main = next((r for r in sizes.runs if r.size == sizes.main_size), None) if sizes is not None else None
    return (at_main.reference_mean_abs or 0.0) if at_main is not None else 0.0


def eager_moving_runs(measured: Measured, bound: float) -> list[BatchSizeRun]:
    """The batch sizes at which the eager model's own outputs move from the main size by more than ``bound`` and
    beyond what float rounding reaches (``FLOAT_REACH``): the model depends on its batch."""
    beyond = max(bound, FLOAT_REACH * _eager_scale(measured))
    return [r for r in (measured.sizes.runs if measured.sizes is not None else ()) if _moves(r.moved, beyond)]


def eager_size_notes(measured: Measured, bound: float, moved: list[BatchSizeRun]) -> tuple[str, ...]:
    """What the eager row's batch-size runs show: ``moved``, its batch dependence (``eager_moving_runs``), or a movement
    within float rounding that its gate is tighter than, and the sizes at which it fails itself."""
    runs = measured.sizes.runs if measured.sizes is not None else ()
    notes = []
    rounding = [r for r in runs if _moves(r.moved, bound)] if not moved else []
    if rounding:  # beyond the gate, within float rounding: the gate is tighter than the model's float noise
        worst = max(rounding, key=lambda r: r.moved or 0.0)
        notes.append(within_float_noise(bound, worst.moved or 0.0, None, 0, None))
    if moved:
        worst = max(moved, key=lambda r: r.moved or 0.0)
        main = measured.sizes.main_size if measured.sizes is not None else 0
        notes.append(
            f"the model itself depends on the batch: its outputs at batch size {worst.size} differ from batch size {main} "
            f"by up to MAE {worst.moved:.3g} per image (batch statistics, or a branch on the batch size); every artifact "
            "is judged against eager at the same batch size"
        )
    failing = [r for r in runs if r.error]
    if failing:
        notes.append("the eager model itself fails at batch size " + ", ".join(str(r.size) for r in failing))
    return tuple(notes)


def eager_check_reasons(check: EagerSelfCheck | None, bound: float) -> tuple[str, ...]:
    """Why the eager model cannot be the reference: its weights hold NaN/Inf, or it does not reproduce itself. Empty
    when neither."""
    if check is not None and check.nonfinite_weights:  # issue 44: was blamed on nondeterminism (NaN != NaN)
        return (f"the checkpoint's weights hold NaN/Inf ({'; '.join(check.nonfinite_weights)}): every output they reach is "
                "NaN/Inf, whatever the export; restore or retrain the checkpoint",)
    if check is None or check.max_abs <= bound:
        return ()
    differ = f"two calls on the same batch of {check.images} differ by up to {check.max_abs:.3g} (MAE {check.mae:.3g}) > {bound:g}"
    if check.random and check.reproduces_under_seed is not False:
        return (f"not deterministic: {differ}: forward draws random numbers (dropout left on, e.g. F.dropout without "
                "training=self.training, or torch.rand*/randn_like in forward); the same seed before each call reproduces it",)
    if check.state_changes:
        return (f"stateful forward: {differ}: forward changes the model on every call ({'; '.join(check.state_changes)}): "
                "a Python-side counter or a buffer updated in forward",)
    return (f"not deterministic: {differ}: not from torch's random numbers and no attribute changed (threads, or "
            "state outside the model)",)


def eager_check_notes(check: EagerSelfCheck | None, bound: float) -> tuple[str, ...]:
    if check is None or check.max_abs > bound or not check.state_changes:
        return ()
    return (f"forward changes the model on every call ({'; '.join(check.state_changes)}), though two calls gave the same "
            "outputs: a stateful forward can drift over a long run",)


@dataclass(frozen=True)
class EagerCauses:
    """What the eager row's diagnostics say (``eager_causes``): why it cannot be the reference (``reasons``), whether
    its outputs depend on the batch, and its notes."""

    reasons: tuple[str, ...] = ()
    batch_dependent: bool = False
    notes: tuple[str, ...] = ()


def eager_causes(measured: Measured | None, bound: float, rerun: float) -> EagerCauses:
    """The eager row's causes from its diagnostics: its self-check against ``rerun`` (the rerun bound), and its batch-size
    runs against ``bound`` (the reference MAE): a model that does not reproduce itself has its batch-size movement as its
    noise, not as a dependence on the batch."""
    if measured is None:
        return EagerCauses()
    moved = eager_moving_runs(measured, bound)
    reproduce = eager_check_reasons(measured.eager_check, rerun)
    stateful = eager_check_notes(measured.eager_check, rerun)
    moves = () if reproduce else eager_size_notes(measured, bound, moved)
    return EagerCauses(reasons=reproduce, batch_dependent=bool(moved), notes=moves + stateful)
