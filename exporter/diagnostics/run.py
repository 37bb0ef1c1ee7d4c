"""The diagnostics of one row as measured (:class:`Diagnoser`): batch sizes, reruns, cost, layers.

Each artifact runs through the runner the replay opened from its file (what ships), and what the
replay already computed is reused (``trace.ReplayTrace``): the probe's outputs at the main batch size,
the first batch's output and the per-batch timings. What is new runs here: the other batch sizes,
one rerun of the first batch (compared with the replay's run of it), and timed repeats only when the
replay had fewer than ``LATENCY_REPEATS`` timed batches. Nothing here judges: the records go into
``measurements.Measured``, and ``judge`` decides; the per-layer tables, for the rows the judge says
need one, are ``explain``'s, after the judge.
Nothing here raises for a model's misbehaviour: what goes wrong becomes the row's finding.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import KINDS_BY_NAME, BuildContext
from ..artifacts._common import captured_warnings, dedupe
from ..artifacts.base import logits_of, ran_for
from ..builder import isolation
from ..config import RunConfig
from ..errors import describe_exception
from ..feeds import Feeds, length, samples_first, take
from ..golden.goldenset import GoldenSet
from ..model import EagerRunner
from ..records import EagerSelfCheck, Latency, Measured, Observation, RerunMeasure, SizeRuns
from ..signature import SINGLE, Signature, outputs_mismatch
from . import LATENCY_REPEATS, SMALL_MODEL_PARAMETERS, determinism, shapes
from .trace import ReplayTrace

EAGER = "eager"  # the trace's name for the eager model's outputs


def primary_rows(outputs: Mapping[str, np.ndarray], signature: Signature, what: str) -> np.ndarray:
    """The first compared output, one row per sample: what the diagnostics compare."""
    spec = signature.compared_outputs()[0] if signature.compared_outputs() else signature.outputs[0]
    if spec.name not in outputs:
        raise outputs_mismatch(what, outputs, signature)
    return logits_of(samples_first({spec.name: outputs[spec.name]}, signature), what)


def compared_rows(outputs: Mapping[str, np.ndarray], signature: Signature, what: str) -> np.ndarray:
    """Every compared output, one row per sample, side by side (``shapes.side_by_side``): what the
    batch-size and determinism checks run on."""
    specs = signature.compared_outputs() or signature.outputs[:1]
    missing = [s.name for s in specs if s.name not in outputs]
    if missing:
        raise outputs_mismatch(what, outputs, signature)
    return shapes.side_by_side(samples_first({s.name: outputs[s.name] for s in specs}, signature))


def _eager_primary(model: Any, signature: Signature = SINGLE):
    """Eager as the self-check calls it: its first compared output's rows (the self-check is about the model)."""
    runner = EagerRunner(model, signature)
    return lambda feeds: primary_rows(runner.infer(feeds), signature, EagerRunner.name)


def _eager_infer(model: Any, signature: Signature = SINGLE):
    runner = EagerRunner(model, signature)
    return lambda feeds: compared_rows(runner.infer(feeds), signature, EagerRunner.name)


class _Rows:
    """A runner as the diagnostics call it: a batch of feeds in, every compared output's rows out; ``last_seconds``:
    its last call's time where it ran (``artifacts.base.ran_for``)."""

    def __init__(self, runner: Any, name: str, signature: Signature) -> None:
        self.runner, self.name, self.signature = runner, name, signature

    def __call__(self, feeds: Feeds) -> np.ndarray:
        return compared_rows(self.runner.infer(feeds), self.signature, self.name)

    @property
    def last_seconds(self) -> float | None:
        return getattr(self.runner, "last_seconds", None)


def _sizes_from(infer, trace: ReplayTrace, name: str, probe: Feeds, plan: shapes.SizePlan,
                clock: dict[int, float] | None = None) -> dict[int, Any]:
    """Outputs at every planned size: the main size from the replay, the others run now."""
    replayed = trace.probe_outputs(name)
    todo = tuple(s for s in plan.sizes if s != plan.main or replayed is None)
    out = shapes.run_sizes(infer, probe, todo, plan.main, trace.signature, clock, plan)
    if replayed is not None and plan.main in plan.sizes:
        out[plan.main] = replayed
    return out


def _rerun_and_cost(infer, trace: ReplayTrace, name: str, threads: int, rerun: bool, plan: shapes.SizePlan,
                    at_one: Any = None, one: Feeds | None = None) -> tuple[RerunMeasure | None, Latency]:
    """Determinism and cost from the replay's own first output and timings.

    The rerun (when ``rerun``): the first replayed batch again, compared with the replay's run of it;
    or, when the plan bounds it, image 0 (or the sample ``one``) again at batch size 1, compared with ``at_one``
    (the batch-size check's run of it). Latency: the replay's timed full batches after its warm-up one,
    topped up with reruns of the first batch to ``LATENCY_REPEATS`` when the plan allows.
    """
    seconds = trace.timed_seconds(name)[:LATENCY_REPEATS]
    began_all, max_abs, runs = time.perf_counter(), 0.0, 0
    if plan.rerun_images < plan.main:  # bounded: one image at batch size 1
        batch, first, n = trace.probe_head(1) if one is None else one, at_one[:1] if isinstance(at_one, np.ndarray) else None, 1
        reruns = 1 if rerun and first is not None else 0
    else:
        batch, first = trace.first_batch(), trace.first_output(name)
        n = length(batch, trace.signature)
        reruns = max(1 if rerun else 0, LATENCY_REPEATS - len(seconds) if plan.topups else 0)
    rerun_seconds = []
    for _ in range(reruns):
        began = time.perf_counter()
        out = infer(batch)
        rerun_seconds.append(ran_for(infer, began))
        runs += 1
        if first is not None:
            max_abs = max(max_abs, determinism.max_abs_difference(first, out))
    spent = time.perf_counter() - began_all if reruns else 0.0
    if plan.rerun_images >= plan.main:
        seconds += rerun_seconds
    if not seconds:  # no full batch after the warm-up: the warm-up itself, else the size-1 rerun
        seconds = trace.timed_seconds(name, warmup=True)[:LATENCY_REPEATS]
    if seconds:
        samples, per = [s * 1000.0 / trace.main for s in seconds[:LATENCY_REPEATS]], trace.main
    else:
        samples, per = [s * 1000.0 / n for s in rerun_seconds], n
    cost = Latency(ms_per_image=float(statistics.median(samples)) if samples else float("nan"), batch=per, repeats=len(samples),
                   threads=threads, samples_ms=tuple(float(s) for s in samples), seconds=spent)
    measured = None
    if rerun and first is not None:
        measured = RerunMeasure(runs=1 + runs, images=n, max_abs=max_abs)
    return measured, cost


@dataclass(frozen=True)
class CalibratedProbe:
    """What a calibrated row's batch-size check runs (static int8: judged on the probe samples outside its calibration
    split only, at every size, on as many of them as the row's own figure). A size other than the main one and the
    whole probe runs on those samples alone, in whole batches of it (a sample's batch-mates do not change a static
    int8 output, and eager runs the same batches); the main size (the replay's) and the whole-probe batch run over
    every probe sample and are compared on the judged ones. Under a plan the budget cut, a size runs as many judged
    samples as the plan's count (so its cost is unchanged), and the bounded determinism rerun is the first of them.
    Outputs come back at their probe positions (``scatter``), so that ``judged`` masks them all alike.

    >>> probe = CalibratedProbe.plan(shapes.full_plan(16, 64), np.arange(64) % 2 == 1, {"input": np.zeros((64, 1))}, SINGLE)
    >>> probe.alone, probe.whole.counts
    (((1, 32), (7, 28)), ((16, 64), (64, 64)))
    >>> bounded = CalibratedProbe.plan(shapes.bounded_plan(16, 64, 45, 4), np.arange(64) % 2 == 1, {"input": np.zeros((64, 1))}, SINGLE)
    >>> bounded.alone, bounded.whole.counts
    (((1, 2), (7, 7)), ((16, 64), (33, 33)))
    """

    whole: shapes.SizePlan  # the sizes run over the probe (the main one from the replay)
    alone: tuple[tuple[int, int], ...]  # (size, samples) run on the judged samples alone
    judged: np.ndarray  # over the probe: outside the calibration split
    feeds: Feeds  # the judged samples

    @classmethod
    def plan(cls, plan: shapes.SizePlan, judged: np.ndarray, probe: Feeds, signature: Signature) -> CalibratedProbe:
        count, n = len(judged), int(judged.sum())
        # as many judged samples as the plan's count at that size, or all of them (in whole batches) when the budget cut nothing
        alone = tuple((size, n // size * size if not plan.cut else max(size, min(plan.images(size), n) // size * size))
                      for size in plan.sizes if size not in (plan.main, count) and 0 < size <= n)
        whole = replace(plan, counts=tuple((size, images) for size, images in plan.counts if size not in dict(alone)))
        positions = np.flatnonzero(judged)
        feeds = {spec.name: np.take(probe[spec.name], positions, axis=spec.batch_axis) for spec in signature.inputs}
        return cls(whole=whole, alone=alone, judged=judged, feeds=feeds)

    def run(self, infer, signature: Signature, clock: dict[int, float] | None = None) -> dict[int, Any]:
        """``infer``'s outputs at the sizes run on the judged samples alone, at their probe positions."""
        if not self.alone:
            return {}
        plan = replace(self.whole, counts=self.alone)
        out = shapes.run_sizes(infer, self.feeds, plan.sizes, self.whole.main, signature, clock, plan)
        return {size: self.scatter(got) for size, got in out.items()}

    def first_row(self, scattered: Any) -> Any:
        """The first judged sample's row of a scattered output (what the bounded determinism rerun compares with)."""
        if not isinstance(scattered, np.ndarray):
            return scattered
        first = int(np.flatnonzero(self.judged)[0])
        return scattered[first : first + 1]

    def scatter(self, got: Any) -> Any:
        """Rows of the judged samples put back at their probe positions (the others NaN, never compared)."""
        if not isinstance(got, np.ndarray):
            return got
        positions = np.flatnonzero(self.judged)[: len(got)]
        full = np.full((int(positions[-1]) + 1 if len(positions) else 0, *got.shape[1:]), np.nan, dtype=np.float32)
        full[positions] = got
        return full


def _measure(infer, trace: ReplayTrace, name: str, probe: Feeds, eager_at: dict[int, Any], plan: shapes.SizePlan,
             threads: int, columns: tuple[shapes.Column, ...], calibrated: CalibratedProbe | None = None) -> Measured:
    clock: dict[int, float] = {}
    outputs = _sizes_from(infer, trace, name, probe, plan if calibrated is None else calibrated.whole, clock)
    if calibrated is not None:
        outputs.update(calibrated.run(infer, trace.signature, clock))
    judged = None if calibrated is None else calibrated.judged
    (_, runs), *others = shapes.measure_outputs(outputs, eager_at, plan.main, columns, clock=clock, judged=judged)
    unmeasured = rerun = cost = None
    try:
        at_one, one = outputs.get(1), None
        if calibrated is not None and 1 in dict(calibrated.alone):  # its size-1 rows are the judged samples': rerun the first of them
            at_one, one = calibrated.first_row(at_one), take(calibrated.feeds, trace.signature, 0, 1)
        rerun, cost = _rerun_and_cost(infer, trace, name, threads, True, plan, at_one, one)
    except Exception as exc:  # it already failed the batch-size check at the main size; said once
        unmeasured = describe_exception(exc)[:240]
    return Measured(sizes=SizeRuns(main_size=plan.main, runs=runs, outputs=tuple(others)), rerun=rerun, latency=cost, unmeasured=unmeasured)


class SizeOutputs(dict):
    """Eager's outputs by batch size (``eager_sizes_ahead``), with the plan every row then follows."""

    plan: shapes.SizePlan




def parameter_count(model: Any) -> int | None:
    """The model's parameters, each shared one once (what the plan reads of the model); None: it holds none to count."""
    params = getattr(model, "parameters", None)
    if params is None:
        return None
    return sum(int(p.numel()) for p in params())


def plan_for(parameters: int | None, probe_count: int, batch_size: int, golden_size: int, budget: float) -> shapes.SizePlan:
    """The plan that fits ``budget`` (a share of the replay of ``golden_size`` images per row, counted in images), or the
    full plan for a model of at most ``SMALL_MODEL_PARAMETERS`` parameters (``None``: not counted, then the share).
    A function of the model's size and the set's counts only: no clock.

    >>> plan_for(78_714, 64, 16, 64, 0.15).cut, plan_for(25_600_000, 64, 16, 64, 0.15).cut[0]
    ((), 'latency from the replay only')
    """
    main = min(batch_size, probe_count)
    timed = golden_size // main - 1  # the replay's timed full batches after its warm-up
    small = parameters is not None and parameters <= SMALL_MODEL_PARAMETERS
    return shapes.bounded_plan(main, probe_count, math.inf if small else budget * golden_size, LATENCY_REPEATS - timed)


def eager_sizes_ahead(model: Any, probe: Feeds, batch_size: int, signature: Signature = SINGLE, golden_size: int | None = None,
                      budget: float = 1e9) -> SizeOutputs:
    """Eager over the probe at every planned size but the main one (the replay computes that one);
    the plan is chosen here (``plan_for``) and carried on the result for every row.

    The pipeline calls it before the builds, while the build server is still importing its libraries.
    """
    infer = _eager_infer(model, signature)
    count = length(probe, signature)
    plan = plan_for(parameter_count(model), count, batch_size, golden_size or count, budget)
    out = SizeOutputs(shapes.run_sizes(infer, probe, tuple(s for s in plan.sizes if s != plan.main), plan.main, signature, plan=plan))
    out.plan = plan
    return out


def eager_self_check(model: Any, feeds: Feeds, signature: Signature = SINGLE) -> EagerSelfCheck:
    """Eager first: two calls of the eager model on ``feeds`` (the first golden batch), before any build."""
    from .eager import check_eager

    compared = signature.compared_outputs()
    kind, axis = (compared[0].kind, compared[0].class_axis) if compared else ("logits", -1)
    return check_eager(_eager_primary(model, signature), model, feeds, kind, axis)


class PendingSelfCheck:
    """The eager self-check split in two (``eager.first_call``): the first call now, before anything is
    built; the second is the eager pass's own output for the first batch when the pass is held
    (:meth:`finish` with it), else a call of its own (:meth:`finish` with ``None``)."""

    def __init__(self, model: Any, feeds: Feeds, signature: Signature = SINGLE) -> None:
        from .eager import first_call

        self.feeds, self.signature = feeds, signature
        self.infer = _eager_primary(model, signature)
        compared = signature.compared_outputs()
        self.kind, self.axis = (compared[0].kind, compared[0].class_axis) if compared else ("logits", -1)
        self.pending = first_call(self.infer, model, feeds)

    def finish(self, second_outputs: Mapping[str, np.ndarray] | None) -> EagerSelfCheck:
        second = self.infer(self.feeds) if second_outputs is None else primary_rows(second_outputs, self.signature, EagerRunner.name)
        return self.pending.finish(second, self.infer, self.feeds, self.kind, self.axis)


class Diagnoser:
    """Measures the diagnostics of one row at a time.

    Set up once the replay has run eager over the golden set (``trace`` holds eager's outputs and
    timings); then :meth:`observe` for each row, as soon as that row's replay is done and while its
    runner is still open, so the pipeline can diagnose one artifact while the next one builds.
    ``eager_ahead`` is ``eager_sizes_ahead``'s result.
    """

    def __init__(self, config: RunConfig, golden: GoldenSet, model: Any, progress, trace: ReplayTrace,
                 eager_ahead: dict[int, Any] | None = None, eager_check: EagerSelfCheck | None = None) -> None:
        self.config, self.golden, self.model, self.trace, self.progress = config, golden, model, trace, progress
        self.eager_check = eager_check
        self.signature = trace.signature
        self.probe = trace.probe()
        count = length(self.probe, self.signature)
        self.main = min(config.batch_size, count)
        self.eager_infer = _eager_infer(model, self.signature)
        # where each compared output sits in the rows the checks compare: every output is checked
        self.columns = shapes.columns_of(samples_first(golden.reference_outputs(0, 1), self.signature), self.signature)
        replayed = trace.probe_outputs(EAGER)
        plan = getattr(eager_ahead, "plan", None)
        if eager_ahead is not None and plan is not None and replayed is not None and plan.main == self.main:
            self.plan: shapes.SizePlan = plan
            self.eager_at = {**eager_ahead, self.main: replayed}
        else:
            self.plan = plan_for(parameter_count(model), count, config.batch_size, len(golden), config.diagnostics_budget)
            self.eager_at = _sizes_from(self.eager_infer, trace, EAGER, self.probe, self.plan)
        self.sizes = self.plan.sizes
        self._calibrated: CalibratedProbe | None = None  # made for the first calibrated row
        self._calibrated_eager: dict[int, Any] = {}
        self._calibrated_lock = threading.Lock()
        # said on every row: what the budget left out (docs/explanation/reports-and-diagnostics.md)
        self.scope: dict[str, Any] = {"budget": config.diagnostics_budget, "cut": self.plan.cut} if self.plan.cut else {}
        progress(f"diagnosing: batch sizes {', '.join(map(str, self.sizes))}, determinism, latency ({config.threads} threads)"
                 + (" (bounded by --diagnostics-budget)" if self.plan.cut else ""))

    def calibrated_probe(self) -> CalibratedProbe:
        """What a calibrated row's batch-size check runs on (``CalibratedProbe``), with eager's outputs there: made once,
        for the first calibrated row, and shared by the others."""
        with self._calibrated_lock:
            if self._calibrated is None:
                count = length(self.probe, self.signature)
                judged = np.ones(count, dtype=bool)
                judged[[i for i in self.golden.calibration_indices() if i < count]] = False
                self._calibrated = CalibratedProbe.plan(self.plan, judged, self.probe, self.signature)
                eager_at = dict(self.eager_at)
                eager_at.update(self._calibrated.run(self.eager_infer, self.signature))
                self._calibrated_eager = eager_at
            return self._calibrated

    def observe(self, obs: Observation, ctx: BuildContext, runner: Any | None = None, run_failed: bool = False) -> Observation:
        """``obs`` with its diagnostics measured. ``runner`` is the replay's open runner for it
        (without one, the artifact is reopened from its file). ``run_failed``: the replay failed on
        some batch; the batch-size check still runs, to say whether the batch size is why."""
        config, began = self.config, time.perf_counter()
        if obs.family == EAGER:
            _, cost = _rerun_and_cost(self.eager_infer, self.trace, EAGER, config.threads, False, self.plan)
            (_, runs), *others = shapes.measure_outputs(self.eager_at, self.eager_at, self.main, self.columns)
            sizes = SizeRuns(main_size=self.main, runs=runs, outputs=tuple(others))
            return replace(obs, diagnostics=Measured(sizes=sizes, latency=cost, **self.scope,
                                                     seconds=time.perf_counter() - began,
                                                     eager_check=self.eager_check))
        if obs.artifact is None or obs.name not in KINDS_BY_NAME:
            return obs
        if (obs.error is not None or obs.metrics is None) and not (run_failed and runner is not None):
            return obs
        kind = KINDS_BY_NAME[obs.name]
        path = Path(obs.artifact.path)
        # a calibrated kind is judged at every size on the probe samples outside its calibration split only, as its replay is
        calibrated = self.calibrated_probe() if kind.calibrated else None
        eager_at = self._calibrated_eager if calibrated is not None else self.eager_at
        self.progress(f"diagnosing {obs.name}: batch sizes {', '.join(map(str, self.sizes))}, determinism")
        warnings_seen: list[str] = []
        with captured_warnings(warnings_seen):
            try:
                with contextlib.ExitStack() as stack:
                    opened = runner or stack.enter_context(isolation.open_deployed(kind, path, ctx, warnings_seen))
                    measured = _measure(_Rows(opened, obs.name, self.signature), self.trace, obs.name, self.probe, eager_at,
                                        self.plan, config.threads, self.columns, calibrated)
            except Exception as exc:
                return replace(obs, diagnostics=Measured(error=f"reopening {path.name} for diagnostics failed: {exc}"))
        new_notes = tuple(n for n in dedupe(warnings_seen) if n not in obs.notes)
        measured = replace(measured, **self.scope, notes=new_notes, seconds=time.perf_counter() - began)
        return replace(obs, diagnostics=measured)
