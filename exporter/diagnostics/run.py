"""The diagnostics of one row as measured (:class:`Diagnoser`): batch sizes, reruns, cost; each replay pass's rows
diagnosed inline or on a second thread (:class:`RowDiagnosis`); and eager's self-check (:class:`PendingSelfCheck`).
What they all compare is a batch's rows: every compared output, samples first, one row per sample, side by side in
float32 (``rows_of``, ``side_by_side``), so each check covers every output.

Each artifact runs through the runner the replay opened from its file (what ships), and what the
replay already computed is reused (``trace.ReplayTrace``): the probe's outputs at the main batch size,
the first batch's output and the per-batch timings. What is new runs here: the other batch sizes (planned,
run and measured by ``shapes.SizeCheck`` in one call a row), one rerun of the first batch (compared with the
replay's run of it), and timed repeats only when the replay had fewer than ``LATENCY_REPEATS`` timed batches.
Nothing here judges: the records go into
``measurements.Measured``, and ``judge`` decides; the per-layer tables, for the rows the judge says
need one, are ``explain``'s, after the judge.
Nothing here raises for a model's misbehaviour: what goes wrong becomes the row's finding.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import KINDS_BY_NAME, ArtifactKind
from ..artifacts._common import captured_warnings, dedupe
from ..artifacts.base import ran_for
from ..config import RunConfig
from ..errors import describe_exception
from ..feeds import Feeds, length, samples_first
from ..golden.goldenset import GoldenSet
from ..model import EagerRunner
from ..records import EagerSelfCheck, Latency, Measured, Observation, RerunMeasure
from ..signature import SINGLE, Signature
from . import LATENCY_REPEATS, determinism, shapes
from .shapes import SizeCheck
from .trace import EAGER, ReplayTrace


def rows_of(outputs: Mapping[str, np.ndarray], signature: Signature, what: str, first_only: bool = False) -> np.ndarray:
    """Every compared output of ``outputs`` (``what``'s), one row per sample, side by side (``side_by_side``): what the
    batch-size and determinism checks run on, so each covers every output; with ``first_only``, the first compared
    output's rows alone (what the eager self-check compares: it is about the model).

    >>> rows_of({"logits": np.ones((2, 3, 4))}, SINGLE, "eager").shape
    (2, 12)
    """
    specs = (signature.compared_outputs() or signature.outputs[:1])[: 1 if first_only else None]
    return side_by_side(samples_first(outputs, signature, [s.name for s in specs], what))


def side_by_side(outputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """Every compared output (samples first), one row per sample, the outputs' values side by side in
    float32: what the batch-size and determinism checks run on, so each covers every output."""
    arrays = [np.asarray(a) for a in outputs.values()]
    n = len(arrays[0])
    rows = [a.reshape(n, -1).astype(np.float32, copy=False) for a in arrays]
    return rows[0] if len(rows) == 1 else np.concatenate(rows, axis=1)


class _Rows:
    """A runner as the diagnostics call it: a batch of feeds in, every compared output's rows out (``rows_of``;
    with ``first_only``, the first compared output's: the eager self-check's); ``last_seconds``: its last call's time
    where it ran (``artifacts.base.ran_for``)."""

    def __init__(self, runner: Any, name: str, signature: Signature, first_only: bool = False) -> None:
        self.runner, self.name, self.signature, self.first_only = runner, name, signature, first_only

    def __call__(self, feeds: Feeds) -> np.ndarray:
        return rows_of(self.runner.infer(feeds), self.signature, self.name, self.first_only)

    @property
    def last_seconds(self) -> float | None:
        return getattr(self.runner, "last_seconds", None)


def _eager_rows(eager: EagerRunner, first_only: bool = False) -> _Rows:
    """Eager as the diagnostics call it (``_Rows``)."""
    return _Rows(eager, EagerRunner.name, eager.signature or SINGLE, first_only)


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


def size_check_ahead(eager: EagerRunner, probe: Feeds, count: int, golden: GoldenSet, batch_size: int, budget: float) -> SizeCheck:
    """The run's batch-size check, planned once on the probe (``count`` samples: ``GoldenBatches.head``), eager run at
    every planned size but the main one (the replay computes that one): ``shapes.SizeCheck``.

    The pipeline calls it before the builds, while the build server is still importing its libraries.
    """
    return SizeCheck(_eager_rows(eager), probe, count, golden, eager.model, batch_size, budget)


class PendingSelfCheck:
    """The eager self-check split in two (``eager.first_call``): the first call now, before anything is
    built; the second is the eager pass's own output for the first batch when the pass is held
    (:meth:`finish` with it), else a call of its own (:meth:`finish` with ``None``)."""

    def __init__(self, eager: EagerRunner, feeds: Feeds) -> None:
        from .eager import first_call

        self.feeds, self.signature = feeds, eager.signature or SINGLE
        self.infer = _eager_rows(eager, first_only=True)
        compared = self.signature.compared_outputs()
        self.kind, self.axis = (compared[0].kind, compared[0].class_axis) if compared else ("logits", -1)
        self.pending = first_call(self.infer, eager.model, feeds)

    def finish(self, second_outputs: Mapping[str, np.ndarray] | None) -> EagerSelfCheck:
        second = self.infer(self.feeds) if second_outputs is None else rows_of(second_outputs, self.signature, EagerRunner.name, True)
        return self.pending.finish(second, self.infer, self.feeds, self.kind, self.axis)


class Diagnoser:
    """Measures the diagnostics of one row at a time.

    Set up once the replay has run eager over the golden set (``trace`` holds eager's outputs and
    timings); then :meth:`observe` for each row, as soon as that row's replay is done and while its
    runner is still open, so the pipeline can diagnose one artifact while the next one builds.
    ``size_check``: the run's batch-size check, planned before the builds (``size_check_ahead``), given the trace here.
    """

    def __init__(self, config: RunConfig, size_check: SizeCheck, progress, trace: ReplayTrace,
                 eager_check: EagerSelfCheck | None = None) -> None:
        self.config, self.trace, self.progress, self.eager_check = config, trace, progress, eager_check
        self.eager_infer = size_check.eager  # the run's one eager runner, as the diagnostics call it
        size_check.replayed(trace)
        self.size_check = size_check
        self.probe, self.plan = size_check.probe, size_check.plan
        # said on every row: what the budget left out (docs/explanation/reports-and-diagnostics.md)
        self.scope: dict[str, Any] = {"budget": config.diagnostics_budget, "cut": self.plan.cut} if self.plan.cut else {}
        progress(f"diagnosing: batch sizes {', '.join(map(str, self.plan.sizes))}, determinism, latency ({config.threads} threads)"
                 + (" (bounded by --diagnostics-budget)" if self.plan.cut else ""))

    def observe(self, obs: Observation, runner: Any | None = None, run_failed: bool = False) -> Observation:
        """``obs`` with its diagnostics measured through ``runner``, the replay's open runner for it (the file as it
        ships, opened once, by the replay); a row without one (its file did not open) has none. ``run_failed``: the
        replay failed on some batch; the batch-size check still runs, to say whether the batch size is why."""
        config, began = self.config, time.perf_counter()
        if obs.family == EAGER:
            _, cost = _rerun_and_cost(self.eager_infer, self.trace, EAGER, config.threads, False, self.plan)
            return replace(obs, diagnostics=Measured(sizes=self.size_check.eager_runs(), latency=cost, **self.scope,
                                                     seconds=time.perf_counter() - began, eager_check=self.eager_check))
        if obs.artifact is None or obs.name not in KINDS_BY_NAME or runner is None:
            return obs
        if (obs.error is not None or obs.metrics is None) and not run_failed:
            return obs
        kind = KINDS_BY_NAME[obs.name]
        path = Path(obs.artifact.path)
        # a calibrated kind is judged at every size on the probe samples outside its calibration split only, as its replay is
        calibrated = self.size_check.calibrated_probe() if kind.calibrated else None
        self.progress(f"diagnosing {obs.name}: batch sizes {', '.join(map(str, self.plan.sizes))}, determinism")
        warnings_seen: list[str] = []
        with captured_warnings(warnings_seen):
            try:
                infer = _Rows(runner, obs.name, self.trace.signature)
                sizes, at_one, one = self.size_check.measure(infer, obs.name, calibrated)
                unmeasured: str | None = None
                rerun: RerunMeasure | None = None
                latency: Latency | None = None
                try:
                    rerun, latency = _rerun_and_cost(infer, self.trace, obs.name, config.threads, True, self.plan, at_one, one)
                except Exception as exc:  # it already failed the batch-size check at the main size; said once
                    unmeasured = describe_exception(exc)[:240]
            except Exception as exc:
                return replace(obs, diagnostics=Measured(error=f"the diagnostics of {path.name} failed: {describe_exception(exc)}"))
        new_notes = tuple(n for n in dedupe(warnings_seen) if n not in obs.notes)
        measured = Measured(sizes=sizes, rerun=rerun, latency=latency, unmeasured=unmeasured, **self.scope, notes=new_notes,
                            seconds=time.perf_counter() - began)
        return replace(obs, diagnostics=measured)


@contextlib.contextmanager
def inline(clock: dict[str, float]) -> Any:
    """Counts the time of its block as diagnostics run on the main thread (``replay/diagnostics_inline``)."""
    began = time.perf_counter()
    try:
        yield
    finally:
        clock["replay/diagnostics_inline"] += time.perf_counter() - began


class RowDiagnosis:
    """The diagnosis of one replay pass's rows (``Diagnoser.observe`` through the runners the replay
    used), run on a thread of its own with ``background`` (``--jobs 2`` and more)
    or at once, and the pass's runners closed when it is done.

    In the background it runs on the second core while the main thread replays the next row: on a
    costly model the batch-size runs are a sixth of the replay's cost, and this takes them off the run's
    critical path (benchmarks/large.py; BENCHMARKS.md). At most two runners are open at once: this
    row's and the next one's. The two threads share nothing they write: the replay trace is keyed by
    row, warnings are captured per thread (artifacts._common.captured_warnings), file-descriptor
    redirects are serialised, the progress line is locked. Latency measured while the other thread
    runs shares the machine with it, as it shares it with the builds. The thread is a daemon: an
    interrupted run does not wait for it.
    """

    def __init__(self, diagnoser: Diagnoser, run_failed: set[str], observed: list[tuple[ArtifactKind, Observation, Any | None]],
                 runner_stack: contextlib.ExitStack) -> None:
        """``run_failed``: the replay's kinds opened and then failed on some batch (``observe.Replay.run_failed``)."""
        self.diagnoser, self.run_failed, self.observed = diagnoser, run_failed, observed
        self.runner_stack = runner_stack
        self._thread: threading.Thread | None = None
        self._result: dict[str, Observation] = {}
        self._raised: BaseException | None = None

    def _run(self) -> None:
        try:
            with self.runner_stack:
                for kind, obs, runner in self.observed:
                    self._result[kind.name] = self.diagnoser.observe(obs, runner, kind.name in self.run_failed)
        except BaseException as exc:  # re-raised on the main thread by result()
            self._raised = exc

    def start(self, background: bool, clock: dict[str, float]) -> None:
        if background:
            names = ", ".join(kind.name for kind, _, _ in self.observed)
            self._thread = threading.Thread(target=self._run, name=f"export-check diagnose {names}", daemon=True)
            self._thread.start()
        else:
            with inline(clock):
                self._run()

    def result(self, clock: dict[str, float]) -> dict[str, Observation]:
        if self._thread is not None:
            began = time.perf_counter()
            self._thread.join()
            clock["replay/diagnostics_waited"] += time.perf_counter() - began
        if self._raised is not None:
            raise self._raised
        return self._result
