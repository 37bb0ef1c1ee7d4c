"""The one path for the data: load -> build each artifact -> reload it from disk -> replay -> judge.

``run_check`` produces a :class:`~exporter.results.Report`; it prints nothing and never exits.
Running and judging are separate: replay feeds outputs into accumulators, ``compare.judge`` decides.
Each artifact is isolated: its failure to build, load or run becomes its own ``error`` row.

Two processes share the work (``--jobs 2``, the default on two cores or more): the build server
(exporter/build/isolation.py) builds the artifacts one after another, while this process runs eager over
the golden set and then replays and diagnoses each artifact as soon as its file is written. With
``--jobs 1``, or a golden set too large to hold in memory, one thing happens at a time. The rows,
their numbers and the report's order are the same either way (tests/test_jobs.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .artifacts import KINDS_BY_NAME, ArtifactKind, BuildContext
from .artifacts._common import captured_warnings, dedupe
from .artifacts.base import INPUT, logits_of
from .build import isolation
from .build.builds import BuildOutcome, Builds
from .cache import cached_rows, open_cache, store_rows
from .checkpoint import build_model, load_state_dict
from .model import eager_logits, pinned_threads
from .compare import ErrorAccumulator, Metrics, ShapeMismatch, judge
from .config import RunConfig
from .errors import ArchitectureError, ExportCheckError, describe_exception
from .files import check_readable_file, file_info, locked_out_dir, prepare_out_dir
from .diagnostics.run import EAGER, Diagnoser
from .diagnostics.trace import ReplayTrace
from .golden.batches import GoldenBatches
from .golden.manifest import GoldenSet, load_golden
from .results import ERROR, FAIL, PASS, FileInfo, GoldenSummary, Report, Row
from .versions import library_versions

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def run_check(config: RunConfig, progress: Progress = _quiet) -> Report:
    """Run the whole check described by ``config`` and return its report."""
    started = time.perf_counter()
    # Validate everything cheap first, so bad input fails before any export starts.
    check_readable_file(config.checkpoint, "checkpoint", "pass the path of a .pth/.pt/.safetensors state_dict")
    golden = load_golden(config.golden)
    reference = golden.reference()
    out_dir = prepare_out_dir(config.out_dir)
    checkpoint_info = file_info(config.checkpoint)
    timings = {"verify_inputs": time.perf_counter() - started}

    cache = open_cache(config, checkpoint_info.sha256, golden.manifest_sha256)
    if cache is not None:
        with locked_out_dir(out_dir):
            # Every row's artifact and metrics cached and intact: no model, no torch, no replay.
            hit = cached_rows(cache, config, out_dir)
        timings["cache_lookup"] = time.perf_counter() - started - sum(timings.values())
        if hit is not None and not config.diagnose:  # --diagnose wants tables a cached row may not hold
            progress(f"every artifact and its metrics found in the cache {config.cache_dir}")
            return _report(config, golden, checkpoint_info, hit[0], hit[1], started, out_dir, timings)

    # Start the build server (each export runs in a child of it, so a native crash costs one row)
    # now, so that it imports the export libraries while this process loads the model.
    isolation.prewarm()
    import torch

    with pinned_threads(config.threads), locked_out_dir(out_dir):
        progress("loading checkpoint")
        state = load_state_dict(config.checkpoint)
        model = build_model(config.arch, config.arch_kwargs, state, config.checkpoint, config.arch_root)
        batches = GoldenBatches(golden, config.batch_size)  # decoded once when it fits in memory
        ctx = BuildContext(
            model=model,
            example=torch.from_numpy(batches.first),
            opset=config.opset,
            onnx_exporter=config.onnx_exporter,
            threads=config.threads,
        )
        # --jobs 2: every build goes to the build server now; this process runs eager over the set
        # meanwhile, then replays and diagnoses each artifact as soon as it is built, while the next
        # ones build on the other core. A streamed set is replayed once, after all the builds.
        ahead = config.effective_jobs > 1 and batches.held is not None and isolation.enabled()
        try:
            builds = Builds(config, ctx, out_dir, progress, cache, ahead)
            batches.precompute_eager(lambda batch: eager_logits(model, batch))
            eager_ahead = _eager_sizes_ahead(config, golden, batches, model)
            if any(KINDS_BY_NAME[name].runtime == "onnxruntime" for name in config.selected_kinds):
                import onnxruntime  # noqa: F401  (the replay's runners need it)
            timings["load_model"] = time.perf_counter() - started - sum(timings.values())
            rows, label_accuracy = _replay_and_judge(
                config, golden, batches, reference, model, ctx, builds, progress, eager_ahead, by_artifact=batches.eager_held()
            )
        finally:
            isolation.settle()  # a run stopped early leaves no build running behind it
        replayed = time.perf_counter() - started - sum(timings.values())
        timings["build"] = builds.waited
        timings["replay"] = replayed - builds.waited
        if cache is not None:
            rows = store_rows(cache, config, rows, builds.outcomes, label_accuracy)
            timings["cache_store"] = time.perf_counter() - started - sum(timings.values())
    return _report(config, golden, checkpoint_info, rows, label_accuracy, started, out_dir, timings)


def _report(
    config: RunConfig,
    golden: GoldenSet,
    checkpoint_info: FileInfo,
    rows: list[Row],
    label_accuracy: float | None,
    started: float,
    out_dir: Path,
    timings: dict[str, float],
) -> Report:
    recorded_ckpt = golden.model.get("checkpoint_sha256")
    return Report(
        tool_version=__version__,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        checkpoint=checkpoint_info,
        golden=GoldenSummary(
            path=str(config.golden),
            inputs=len(golden),
            manifest_sha256=golden.manifest_sha256,
            created=golden.created,
            recorded_checkpoint_sha256=recorded_ckpt if isinstance(recorded_ckpt, str) else None,
            recorded_with=tuple(sorted(golden.recorded_with.items())),
            label_accuracy=label_accuracy,
        ),
        thresholds=config.thresholds,
        settings=tuple(sorted(config.settings_json().items())),
        versions=tuple(sorted(library_versions().items())),
        rows=tuple(rows),
        seconds=time.perf_counter() - started,
        out_dir=str(out_dir),
        timings=tuple((stage, round(seconds, 4)) for stage, seconds in timings.items()),
    )


class _Replay:
    """Replays the golden set through runners, batch by batch, accumulating each row's errors
    against eager and what the diagnostics reuse (``trace``)."""

    def __init__(self, config: RunConfig, golden: GoldenSet, batches: GoldenBatches, reference: np.ndarray, model: Any) -> None:
        self.config, self.golden, self.batches, self.reference, self.model = config, golden, batches, reference, model
        self.trace = ReplayTrace.for_run(len(golden), config.batch_size)
        self.accumulators: dict[str, ErrorAccumulator] = {}
        self.seconds: dict[str, float] = {}
        self.errors: dict[str, str] = {}
        self.eager_acc = ErrorAccumulator()
        self.eager_error: str | None = None
        self.eager_argmax: list[np.ndarray] = []

    def open(self, kind: ArtifactKind, outcome: BuildOutcome, ctx: BuildContext, stack: contextlib.ExitStack) -> Any | None:
        """The artifact reloaded from its file, as it ships; ``None`` (and the row's error) when it can't be."""
        if outcome.error:
            self.errors[kind.name] = outcome.error
            return None
        assert outcome.path is not None
        try:
            with captured_warnings(outcome.notes):
                return stack.enter_context(kind.open_runner(outcome.path, ctx))
        except Exception as exc:
            self.errors[kind.name] = f"reloading {outcome.path.name} failed: {describe_exception(exc)}"
            return None

    def _eager(self, index: int, start: int, batch: np.ndarray, record: bool) -> np.ndarray:
        try:
            ahead = self.batches.eager(index)
            if ahead is None:
                began = time.perf_counter()
                ahead = (eager_logits(self.model, batch), time.perf_counter() - began)
        except Exception as exc:
            raise ArchitectureError(
                f"{self.config.checkpoint}: the eager model fails on the golden inputs ({describe_exception(exc)}); "
                "check that --arch and the golden set's preprocessing match the model"
            ) from None
        eager = ahead[0]
        if record:
            self.trace.add_batch(start, batch)
            self.trace.add_output(EAGER, start, batch, eager, ahead[1])
            self.eager_argmax.append(np.argmax(eager, axis=1))
            if self.eager_error is None:
                try:
                    self.eager_acc.add(self.reference[start : start + len(batch)], eager)
                except ShapeMismatch as exc:
                    self.eager_error = f"eager output does not match the golden reference: {exc}"
        return eager

    def run(self, runners: dict[str, Any], notes: dict[str, list[str]], with_eager: bool) -> None:
        """One pass over the golden set: eager (recorded when ``with_eager``) and every runner."""
        runners = dict(runners)
        for name in runners:
            self.accumulators.setdefault(name, ErrorAccumulator())
            self.seconds.setdefault(name, 0.0)
        for index, (start, batch) in enumerate(self.batches):
            eager = self._eager(index, start, batch, with_eager)
            for name, runner in list(runners.items()):
                began = time.perf_counter()
                try:
                    with captured_warnings(notes[name]):
                        out = logits_of(runner.infer({INPUT: batch}), name)
                    self.trace.add_output(name, start, batch, out, time.perf_counter() - began)
                    self.accumulators[name].add(eager, out)
                except Exception as exc:
                    self.errors[name] = f"running failed at inputs {start}..{start + len(batch) - 1}: {describe_exception(exc)}"
                    del runners[name]
                self.seconds[name] += time.perf_counter() - began

    def eager_row(self) -> Row:
        return _eager_row(self.config, None if self.eager_error else self.eager_acc.result(), self.eager_error)

    def artifact_row(self, kind: ArtifactKind, outcome: BuildOutcome) -> Row:
        artifact = file_info(outcome.path) if outcome.path is not None and outcome.path.is_file() else None
        if kind.name in self.errors or kind.name not in self.accumulators:
            return _artifact_row(self.config, kind, outcome, artifact, None, None, self.errors.get(kind.name))
        return _artifact_row(self.config, kind, outcome, artifact, self.accumulators[kind.name].result(), self.seconds[kind.name])

    def label_accuracy(self) -> float | None:
        labels = self.golden.labels()
        if self.eager_argmax and all(label is not None for label in labels):
            return float(np.mean(np.concatenate(self.eager_argmax) == np.asarray(labels)))
        return None


def _replay_and_judge(
    config: RunConfig,
    golden: GoldenSet,
    batches: GoldenBatches,
    reference: np.ndarray,
    model: Any,
    ctx: BuildContext,
    builds: Builds,
    progress: Progress,
    eager_ahead: dict[int, Any] | None = None,
    by_artifact: bool = True,
) -> tuple[list[Row], float | None]:
    """Every row, judged and diagnosed. ``by_artifact``: eager's outputs are held, so each artifact
    is replayed (and diagnosed) on its own as soon as its build is done; otherwise, after every
    build, one pass over the golden set runs every artifact (a streamed set is decoded once)."""
    selected = [KINDS_BY_NAME[name] for name in config.selected_kinds]
    replay = _Replay(config, golden, batches, reference, model)
    rows: dict[str, Row] = {}
    with contextlib.ExitStack() as stack:
        if by_artifact:
            replay.run({}, {}, with_eager=True)  # eager's pass, from the outputs held
            diagnoser = Diagnoser(config, golden, model, progress, replay.trace, eager_ahead)
            rows["eager"] = diagnoser.row(replay.eager_row(), ctx)
            for kind in builds.order:  # build order; a derived kind's source comes first
                outcome = builds.get(kind.name)
                if kind not in selected:
                    continue
                with contextlib.ExitStack() as one:
                    runner = replay.open(kind, outcome, ctx, one)
                    if runner is not None:
                        progress(f"replaying {len(golden)} inputs through {kind.name}")
                        replay.run({kind.name: runner}, {kind.name: outcome.notes}, with_eager=False)
                    # Batch sizes, determinism, latency, where it diverges: through the runner the
                    # replay used, reusing what it computed (exporter/diagnostics/trace.py).
                    rows[kind.name] = diagnoser.row(replay.artifact_row(kind, outcome), ctx, runner)
        else:
            outcomes = {kind.name: builds.get(kind.name) for kind in builds.order}
            runners = {}
            for kind in selected:
                runner = replay.open(kind, outcomes[kind.name], ctx, stack)
                if runner is not None:
                    runners[kind.name] = runner
            progress(f"replaying {len(golden)} inputs through {len(runners)} artifacts")
            replay.run(runners, {name: outcomes[name].notes for name in runners}, with_eager=True)
            diagnoser = Diagnoser(config, golden, model, progress, replay.trace, eager_ahead)
            rows["eager"] = diagnoser.row(replay.eager_row(), ctx)
            for kind in selected:
                runner = runners.get(kind.name) if kind.name not in replay.errors else None
                rows[kind.name] = diagnoser.row(replay.artifact_row(kind, outcomes[kind.name]), ctx, runner)
    return [rows["eager"], *(rows[kind.name] for kind in selected)], replay.label_accuracy()


def _eager_sizes_ahead(config: RunConfig, golden: GoldenSet, batches: GoldenBatches, model: Any) -> dict[int, Any] | None:
    """Eager's share of the batch-size check, run before the builds (only for a set held in memory)."""
    from .diagnostics.run import eager_sizes_ahead
    from .diagnostics.trace import ReplayTrace

    probe = batches.head(ReplayTrace.for_run(len(golden), config.batch_size).probe_count)
    return None if probe is None else eager_sizes_ahead(model, probe, config.batch_size)


def _artifact_row(
    config: RunConfig,
    kind: ArtifactKind,
    outcome: BuildOutcome,
    artifact: FileInfo | None,
    metrics: Metrics | None,
    replay_seconds: float | None,
    error: str | None = None,
) -> Row:
    """One artifact's row: its metrics judged against its family's gate, or its error."""
    gate = config.thresholds.gate_for(kind.family)
    common: dict[str, Any] = {
        "name": kind.name,
        "family": kind.family,
        "compared_with": "eager",
        "gate": gate,
        "build_seconds": outcome.seconds,
        "details": tuple(sorted(outcome.details.items())),
        "notes": dedupe(outcome.notes),
        "artifact": artifact,
    }
    if error is not None or metrics is None:
        return Row(status=ERROR, metrics=None, reasons=(error or "no metrics",), **common)
    verdict = judge(metrics, gate)
    return Row(
        status=PASS if verdict.passed else FAIL, metrics=metrics, reasons=verdict.reasons, replay_seconds=replay_seconds, **common
    )


def _eager_row(config: RunConfig, metrics: Metrics | None, error: str | None) -> Row:
    gate = config.thresholds.gate_for("eager")
    if error or metrics is None:
        return Row(name="eager", family="eager", compared_with="golden", status=FAIL, gate=gate, metrics=None, reasons=(error or "no metrics",))
    verdict = judge(metrics, gate)
    reasons = verdict.reasons
    if not verdict.passed:
        reasons += ("the checkpoint's logits differ from the approved reference: wrong or retrained weights?",)
    return Row(
        name="eager",
        family="eager",
        compared_with="golden",
        status=PASS if verdict.passed else FAIL,
        gate=gate,
        metrics=metrics,
        reasons=reasons,
    )


__all__ = ["run_check", "ExportCheckError"]
