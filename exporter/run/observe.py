"""Observe: replay the golden set through eager and every artifact reloaded from its file, then
measure each row's diagnostics (``diagnostics.run``). Measurements only (``measurements.Observation``); ``judge`` decides.

With ``by_artifact`` (eager's outputs held in memory, ``--jobs 2``), each artifact is replayed and
diagnosed on its own as soon as its build is done, while the next ones build on the other core;
otherwise one pass over the golden set runs every artifact after all the builds (a streamed set is
decoded once). The observations are the same either way (tests/integration/test_jobs.py).

A kind calibrated on the golden set (``ArtifactKind.calibrated``, static int8) is judged only on the
samples outside its calibration split (``GoldenSet.calibration``); its row says how many of each,
and is an error when no sample is left to judge.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..artifacts import KINDS_BY_NAME, ArtifactKind, BuildContext
from ..artifacts._common import captured_warnings, dedupe
from ..artifacts.base import NotApplicable, logits_of, ran_for
from ..artifacts.parts import artifact_info
from ..builder import isolation
from ..builder.builds import BuildOutcome, Builds, Progress
from ..builder.protocol import PRIVATE_PREFIX, first_sample, load_needs
from ..compare import LABEL_PAD, ErrorAccumulator, LabelMismatch, ShapeMismatch
from ..config import RunConfig
from ..diagnostics.eager import eager_failure
from ..diagnostics.run import EAGER, Diagnoser, RowDiagnosis, inline, side_by_side
from ..diagnostics.runtime_errors import runtime_error
from ..diagnostics.shapes import SizeCheck
from ..diagnostics.trace import ReplayTrace
from ..errors import GoldenError, describe_exception
from ..feeds import length, samples_first
from ..gates import CPU_DEPENDENT_FAMILIES, precision_family
from ..golden.batches import GoldenBatches
from ..golden.goldenset import MANIFEST, VERSION_1, GoldenSet
from ..model import EagerRunner
from ..progress import count_message
from ..records import EagerSelfCheck, Observation
from ..versions import kernel_choices


class Replay:
    """Replays the golden set through runners, batch by batch, accumulating each row's errors
    against eager per compared output, and what the diagnostics reuse (``trace``)."""

    def __init__(self, config: RunConfig, golden: GoldenSet, batches: GoldenBatches, eager: EagerRunner,
                 progress: Progress | None = None) -> None:
        """``eager``: the run's one eager runner; ``progress``: each artifact's replay said as a count of inputs (exporter/progress.py)."""
        self.config, self.golden, self.batches, self.progress = config, golden, batches, progress
        self.signature = golden.signature
        self.compared = self.signature.compared_outputs()
        self.accumulators: dict[str, dict[str, ErrorAccumulator]] = {}
        self.seconds: dict[str, float] = {}
        self.errors: dict[str, str] = {}
        self.run_failed: set[str] = set()  # opened, then failed on some batch: the diagnostics still run through it
        self.eager_acc = self._accumulators()
        self.trace = ReplayTrace.for_run(len(golden), config.batch_size, self.signature)
        self.eager_runner = eager
        self.eager_error: str | None = None
        self.eager_argmax: list[np.ndarray] = []
        self.calibrated = {k.name for k in KINDS_BY_NAME.values() if k.calibrated}
        self._calibration: np.ndarray | None = None  # per sample: in the calibration split (read when a calibrated kind replays)
        self.judged: dict[str, int] = {}
        self._all_labels: dict[str, np.ndarray] = {}  # per output, the golden labels read once (empty: not every sample has one)

    def _judged_mask(self, start: int, n: int) -> np.ndarray:
        """Which samples ``start..start+n-1`` a calibrated kind is judged on: those outside the calibration split."""
        if self._calibration is None:
            self._calibration = np.zeros(len(self.golden), dtype=bool)
            self._calibration[list(self.golden.calibration_indices())] = True
        return ~self._calibration[start : start + n]

    def _labels(self, output: str, start: int, n: int, keep: np.ndarray | None = None) -> np.ndarray | None:
        """The golden labels of ``output`` for samples ``start..start+n-1`` (those ``keep`` marks), when every sample
        of the set has one (golden/labels.py); else None (no accuracy counted). A ``logits`` output's labels are
        one class per sample; a ``sequence-logits`` output's one per position, a shorter sample's padded with
        ``compare.LABEL_PAD`` past its own labels."""
        if output not in self._all_labels:
            self._all_labels[output] = self._read_labels(output)
        found = self._all_labels[output]
        if not len(found):
            return None
        part = found[start:start + n]
        return part if keep is None else part[keep]

    def _where(self) -> str:
        root = getattr(self.golden, "root", None)  # a bundle's replay has no golden folder
        return "the golden set's labels" if root is None else str(root / MANIFEST)

    def _read_labels(self, output: str) -> np.ndarray:
        spec = next((o for o in self.compared if o.name == output), None)
        labels = self.golden.labels_of(output) if spec is not None and spec.kind != "values" else []
        if not labels or any(x is None for x in labels):
            return np.zeros(0, np.int64)
        if spec is not None and spec.kind == "logits":
            if not all(isinstance(x, int) for x in labels):
                raise GoldenError(f"{self._where()}: the labels of output {output} must be one class per sample (it is a logits output); a "
                                  "list of classes is for a sequence-logits output; fix the labels (labels.json) and re-record")
            return np.asarray(labels, dtype=np.int64)
        rows = [x if isinstance(x, tuple) else (x,) for x in labels]
        width = max(len(r) for r in rows)  # samples of other lengths are padded past their own labels
        return np.asarray([list(r) + [LABEL_PAD] * (width - len(r)) for r in rows], dtype=np.int64)

    def _accumulators(self) -> dict[str, ErrorAccumulator]:
        return {o.name: self.config.thresholds.accumulator(o.kind, o.class_axis, o.ctc_blank) for o in self.compared}

    def open(self, kind: ArtifactKind, outcome: BuildOutcome, ctx: BuildContext, stack: contextlib.ExitStack) -> Any | None:
        """The artifact reloaded from its file, as it ships; ``None`` (and the row's error) when it can't be."""
        if outcome.error:
            self.errors[kind.name] = outcome.error
            return None
        assert outcome.path is not None
        failure = outcome.load_failure
        # it lacked what this process imported with the architecture: it loads only where that is imported, not as deployed
        lacked = failure if failure is not None and failure.missing and _imported_here(failure.missing, failure.how) else None
        with captured_warnings(outcome.notes):  # what opening it and running its first sample here warn: the row's notes
            if lacked is None:
                try:
                    if failure is None:  # replayed where nothing of the architecture is imported, as deployed (builder/clean.py)
                        runner = stack.enter_context(isolation.open_deployed(kind, outcome.path, ctx, outcome.notes))
                        if isinstance(runner, isolation.CleanRunner):
                            return runner
                    else:
                        runner = stack.enter_context(kind.open_runner(outcome.path, ctx))
                except isolation.NeedsWhatItLacks as exc:  # it opens only where the architecture's import provides what it names
                    lacked = exc.failure
                except NotApplicable as exc:  # its runtime does not run here (Core ML off macOS): not a failure of the file
                    self.errors[kind.name] = str(exc)
                    outcome.not_applicable = True
                    return None
                except Exception as exc:
                    self.errors[kind.name] = f"reloading {outcome.path.name} failed: {describe_exception(exc)}"
                    return None
            shown = lacked or failure  # with no lack named: it loads here, beside the architecture, and failed where nothing of it is imported
            if shown is not None:
                how, missing = (shown.how, shown.missing) if lacked is not None else ("", "")
                self.errors[kind.name] = load_needs(outcome.path.name, how, missing, _private_file(missing) if missing else None,
                                                    shown.description)
                return None
            clean, differs = outcome.clean_first, None
            if clean is not None and (feeds := first_sample(ctx)) is not None:
                differs = clean_process_difference(runner, feeds, clean)
        if differs is not None:
            self.errors[kind.name] = (
                f"{outcome.path.name} computes differently in this process than where nothing of the architecture is imported: "
                f"{differs} on the first golden sample; something importing the architecture does (a global torch setting, a "
                "registered op, a patched library) changes what the file computes, so a replay here would not be a deployed "
                "process's: move that out of the architecture's import")
            return None
        return runner

    def _compared(self, outputs: dict[str, np.ndarray], what: str) -> dict[str, np.ndarray]:
        """The compared outputs, samples first; every one must be there."""
        return samples_first(outputs, self.signature, [o.name for o in self.compared], what)

    def _eager(self, index: int, start: int, feeds: dict[str, np.ndarray], n: int, record: bool) -> dict[str, np.ndarray]:
        """Eager's compared outputs for the batch of ``n`` samples at ``start`` (held from eager's pass, else run now); with
        ``record``, measured against the golden reference and kept for the diagnostics."""
        try:
            held = self.batches.eager(index)
            if held is None:
                began = time.perf_counter()
                held = (self.eager_runner.infer(feeds), time.perf_counter() - began)
            eager = self._compared(held[0], EagerRunner.name)
        except Exception as exc:
            raise eager_failure(self.config, self.golden, start, feeds, exc, self.eager_runner.infer) from None
        if record:
            if self.eager_error is None:
                reference = samples_first(self.golden.reference_outputs(start, n), self.signature)
                try:
                    for name, acc in self.eager_acc.items():
                        try:
                            acc.add(reference[name], eager[name], self._labels(name, start, n))
                        except LabelMismatch as exc:
                            raise GoldenError(f"{self._where()}: output {name}: {exc}; fix the labels (labels.json) and re-record") from None
                except ShapeMismatch as exc:
                    # a format-1 set holds one 2-D output; before issue 25 a (batch,) or (batch, 3, 4) output was stored flattened
                    flattened = self.golden.version == VERSION_1 and any(array.ndim != 2 for array in eager.values())
                    fix = ("; this golden set (format 1) holds one (batch, classes) output: re-record it with `export-check golden "
                           "record --force`, which keeps every output's shape") if flattened else ""
                    self.eager_error = f"eager output does not match the golden reference: {exc}{fix}"
                except KeyError as exc:
                    self.eager_error = f"eager output {exc} has no golden reference"
            primary = logits_of(eager, EagerRunner.name)
            self.eager_argmax.append(np.argmax(primary, axis=1) if primary.shape[1] else np.zeros(n, np.int64))
            self.trace.add_eager(start, feeds, n, side_by_side(eager), held[1])
        return eager

    def run(self, runners: dict[str, Any], notes: dict[str, list[str]], with_eager: bool) -> None:
        """One pass over the golden set: eager (recorded when ``with_eager``) and every runner."""
        runners = dict(runners)
        for name in runners:
            self.accumulators.setdefault(name, self._accumulators())
            self.seconds.setdefault(name, 0.0)
        for index, (start, feeds) in enumerate(self.batches):
            n = length(feeds, self.signature)
            eager = self._eager(index, start, feeds, n, with_eager)
            for name, runner in list(runners.items()):
                began = time.perf_counter()
                try:
                    with captured_warnings(notes[name]):
                        out = self._compared(runner.infer(feeds), name)
                    self.trace.add_output(name, start, n, side_by_side(out), ran_for(runner, began))
                    if self.progress is not None:  # eager's pass is counted where it runs (pipeline)
                        self.progress(count_message(f"replaying {name}", min(start + n, len(self.golden)), len(self.golden)))
                    reference = eager
                    if name in self.calibrated:  # judged on the samples it was not calibrated on
                        keep = self._judged_mask(start, n)
                        self.judged[name] = self.judged.get(name, 0) + int(keep.sum())
                        reference, out = ({k: v[keep] for k, v in d.items()} for d in (eager, out))
                    for output, acc in self.accumulators[name].items():
                        if len(out[output]):
                            acc.add(reference[output], out[output], self._labels(output, start, n, keep if name in self.calibrated else None))
                except Exception as exc:
                    shown = self.golden.inputs[start:start + n]  # the inputs by their files too: a user finds those
                    files = f" (golden inputs {shown[0].name} to {shown[-1].name})" if shown else ""
                    self.errors[name] = f"running failed at inputs {start}..{start + n - 1}: {runtime_error(exc)}{files}"
                    if not isinstance(exc, isolation.ReplayProcessDied):  # a dead runtime runs no diagnostics
                        self.run_failed.add(name)
                    del runners[name]
                self.seconds[name] += time.perf_counter() - began

    def _metrics(self, accs: dict[str, ErrorAccumulator]) -> dict[str, Any]:
        results = [(name, acc.result()) for name, acc in accs.items()]
        not_compared = tuple(o.name for o in self.signature.outputs if not o.compared)
        return {"metrics": results[0][1] if results else None, "outputs": tuple(results) if len(results) > 1 else (),
                "not_compared": not_compared}

    def eager_observation(self) -> Observation:
        if self.eager_error or not self.compared:
            return Observation(name=EAGER, family=EAGER, compared_with="golden", metrics=None,
                               error=self.eager_error or "every output is excluded from the comparison; compare at least one")
        return Observation(name=EAGER, family=EAGER, compared_with="golden", details=self.recording_details(), **self._metrics(self.eager_acc))

    def recording_details(self) -> tuple[tuple[str, str], ...]:
        """How the golden set was recorded (batch size, mode), when its manifest says, and the check's batch size."""
        recorded = (("recorded_batch_size", self.golden.recorded_batch_size), ("recorded_mode", self.golden.recorded_mode))
        return (("checked_batch_size", str(self.config.batch_size)), *((key, str(value)) for key, value in recorded if value is not None))

    def artifact_observation(self, kind: ArtifactKind, outcome: BuildOutcome) -> Observation:
        artifact = artifact_info(outcome.path) if outcome.path is not None and outcome.path.is_file() else None
        family = precision_family(kind.family, outcome.details)
        details = dict(outcome.details)
        if family in CPU_DEPENDENT_FAMILIES:  # the verdict may change with the CPU: say which decided it
            details.update({key: value for key, value in kernel_choices().items() if key not in details})
        common: dict[str, Any] = {"name": kind.name, "family": family, "compared_with": "eager", "artifact": artifact,
                                  "build_seconds": outcome.seconds, "details": tuple(sorted(details.items())),
                                  "notes": dedupe(outcome.notes)}
        if kind.calibrated:
            common["details"], judged_error = self._calibration_details(kind, common["details"])
            if judged_error and kind.name not in self.errors and kind.name in self.accumulators:
                self.errors[kind.name] = judged_error
        if kind.name in self.errors or kind.name not in self.accumulators:
            return Observation(metrics=None, error=self.errors.get(kind.name) or "no metrics", not_applicable=outcome.not_applicable, **common)
        return Observation(replay_seconds=self.seconds[kind.name], **self._metrics(self.accumulators[kind.name]), **common)

    def _calibration_details(self, kind: ArtifactKind, details: tuple[tuple[str, str], ...]) -> tuple[tuple[tuple[str, str], ...], str | None]:
        """The row's details with its calibration counts; the error when no sample is left to judge."""
        split = self.golden.calibration
        excluded = len(self.golden.calibration_indices())
        judged = self.judged.get(kind.name, len(self.golden) - excluded)
        added = {"judged_samples": str(judged), "calibration_samples_excluded": str(excluded), "calibration_split": split.describe()}
        error = None
        if judged == 0:
            error = (f"not judged: all {len(self.golden)} golden samples are in the calibration split ({split.describe()}), so none is "
                     "left to judge a statically quantized model on; record more samples or a smaller split")
        return tuple(sorted({**dict(details), **added}.items())), error

    def label_accuracy(self) -> float | None:
        labels = self.golden.labels()
        logits = bool(self.compared) and self.compared[0].kind == "logits"
        if logits and self.eager_argmax and all(label is not None for label in labels):
            return float(np.mean(np.concatenate(self.eager_argmax) == np.asarray(labels)))
        return None


@dataclasses.dataclass(frozen=True)
class Observed:
    """What the observe stage hands on: every row measured (eager first, then the selected kinds in order), eager's
    accuracy on the golden labels, and the diagnostics' probe and plan (the images and sizes an explanation reuses)."""

    observations: list[Observation]
    label_accuracy: float | None
    probe: Any
    plan: Any


def clean_process_difference(runner: Any, feeds: dict[str, np.ndarray], clean: dict[str, Any]) -> str | None:
    """How the outputs of ``runner`` (the file reloaded in this process, which imported the architecture) for the first
    golden sample (``feeds``: ``protocol.first_sample``) differ from ``clean`` (the same file's, in the build server's load
    host, which imported nothing of it; builder/server.py's probe): ``None`` when every output is the same, bit for bit (the same file, input,
    runtime and thread count compute the same; NaN equals NaN). A first run that raises here is the replay's to
    report (``None``); so is a file that does not reproduce itself (random ops, dropout left on): when the outputs
    differ, the sample is run once more here, and a second run unlike the first says nothing of the architecture
    (the determinism check fails such a file)."""
    try:
        here = runner.infer(feeds)
        found = _differences(here, clean)
        if found and _differences(runner.infer(feeds), {name: np.asarray(value) for name, value in here.items()}):
            return None
    except Exception:
        return None
    return "; ".join(found) or None


def _differences(here: dict[str, Any], clean: dict[str, Any]) -> list[str]:
    """What differs between the outputs ``here`` and ``clean`` (the reference), output by output, bit for bit."""
    found = []
    for name, theirs in clean.items():
        ours = np.asarray(here[name]) if name in here else None
        if ours is None:
            found.append(f"output {name} is missing")
        elif ours.shape != theirs.shape or ours.dtype != theirs.dtype:
            found.append(f"output {name} is {ours.dtype}{list(ours.shape)} here, {theirs.dtype}{list(theirs.shape)} there")
        elif not np.array_equal(ours, theirs, equal_nan=ours.dtype.kind in "fc"):
            gap = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
            found.append(f"output {name} differs by max |diff| {float(np.nanmax(gap)) if np.isfinite(gap).any() else math.inf:.3g}")
    return found


def _imported_here(missing: str, how: str) -> bool:
    """Whether this process holds the module a clean load lacked (the architecture's, or one it imported):
    otherwise the load failed for a reason of its own, and this process's reload says which."""
    return (missing if how == "module" else missing.rpartition(".")[0]) in sys.modules


def _private_file(dotted: str) -> str | None:
    """The file of the lone architecture module (imported under export-check's private name) that
    defines ``dotted``; None for a module with a name of its own."""
    module = sys.modules.get(dotted.rpartition(".")[0])
    if module is None or not module.__name__.startswith(PRIVATE_PREFIX):
        return None
    return getattr(module, "__file__", None) or module.__name__


def observe_all(
    config: RunConfig,
    golden: GoldenSet,
    batches: GoldenBatches,
    eager: EagerRunner,
    ctx: BuildContext,
    builds: Builds,
    progress: Progress,
    size_check: SizeCheck,
    by_artifact: bool = True,
    eager_check: EagerSelfCheck | None = None,
    timings: dict[str, float] | None = None,
) -> Observed:
    """Every row observed: replayed and measured (numbers only; the pipeline then judges them, explains the rows the
    judge flags, and judges again: run/explain.py).

    One loop replays every mode, a pass at a time. ``by_artifact`` (eager's outputs are held): eager's
    pass runs first, from memory, and each artifact gets a pass of its own as soon as its build is
    done, its diagnosis running (with ``--jobs 2``, on a second thread) while the next one builds and
    replays. Otherwise (a streamed set, decoded once) one pass after every build runs eager and every
    artifact together. ``timings`` gets what the diagnostics cost this thread:
    ``replay/diagnostics_inline`` (run on it) and ``replay/diagnostics_waited`` (waiting for the
    ones in the background, ``RowDiagnosis``)."""
    clock = timings if timings is not None else {}
    clock["replay/diagnostics_inline"] = clock["replay/diagnostics_waited"] = 0.0
    replay = Replay(config, golden, batches, eager, progress)
    rows: dict[str, Observation] = {}
    background = by_artifact and config.effective_jobs > 1
    diagnoser: Diagnoser | None = None
    label_accuracy: float | None = None

    def eager_row() -> Diagnoser:
        """Eager's row, diagnosed, and its accuracy on the golden labels: once its pass is done."""
        nonlocal label_accuracy
        with inline(clock):
            made = Diagnoser(config, size_check, progress, replay.trace, eager_check)
            rows[EAGER] = made.observe(replay.eager_observation())
        label_accuracy = replay.label_accuracy()
        return made

    if by_artifact:  # eager's pass, from the outputs held, and its row, while the first build runs
        replay.run({}, {}, with_eager=True)
        diagnoser = eager_row()
    pending: RowDiagnosis | None = None
    for group in _passes(builds, config, by_artifact):
        stack = contextlib.ExitStack()  # the pass's runners: closed once its rows are diagnosed
        try:
            runners = {kind.name: runner for kind, outcome in group if (runner := replay.open(kind, outcome, ctx, stack)) is not None}
            if runners or diagnoser is None:
                shown = next(iter(runners)) if len(runners) == 1 and by_artifact else f"{len(runners)} artifacts"
                progress(f"replaying {len(golden)} inputs through {shown}")
                replay.run(runners, {kind.name: outcome.notes for kind, outcome in group if kind.name in runners}, with_eager=diagnoser is None)
            if diagnoser is None:
                diagnoser = eager_row()
            observed = [(kind, replay.artifact_observation(kind, outcome), runners.get(kind.name)) for kind, outcome in group]
            if pending is not None:  # the previous pass's rows were diagnosed while this one replayed
                rows.update(pending.result(clock))
        except BaseException:
            stack.close()
            raise
        # Batch sizes, determinism, latency: through the runners the replay used, reusing what it
        # computed (exporter/diagnostics/trace.py).
        pending = RowDiagnosis(diagnoser, replay.run_failed, observed, stack)
        pending.start(background, clock)
    if pending is not None:
        rows.update(pending.result(clock))
    selected = [KINDS_BY_NAME[name] for name in config.selected_kinds]
    assert diagnoser is not None  # the eager row is diagnosed in every run
    return Observed([rows[EAGER], *(rows[kind.name] for kind in selected)], label_accuracy, diagnoser.probe, diagnoser.plan)


def _passes(builds: Builds, config: RunConfig, by_artifact: bool) -> Iterator[list[tuple[ArtifactKind, BuildOutcome]]]:
    """The replay's passes, each the selected kinds it runs with their build outcomes, in build order (a
    derived kind's source first): one kind a pass as each build is done, or all of them after every build."""
    outcomes: list[tuple[ArtifactKind, BuildOutcome]] = []
    for kind in builds.order:
        outcome = builds.get(kind.name)  # waits for (or runs) the build; a source only built for a derived kind too
        if kind.name not in config.selected_kinds:  # by name: a kind's identity is its name
            continue
        if by_artifact:
            yield [(kind, outcome)]
        else:
            outcomes.append((kind, outcome))
    if not by_artifact:
        yield outcomes
