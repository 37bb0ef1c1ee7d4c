"""The one path for the data: load -> build each artifact -> reload it from disk -> replay -> judge.

``run_check`` produces a :class:`~exporter.results.Report`; it prints nothing and never exits.
Running and judging are separate: replay feeds outputs into accumulators, ``compare.judge`` decides.
Each artifact is isolated: its failure to build, load or run becomes its own ``error`` row.

Two processes share the work (``--jobs 2``, the default on two cores or more): the build server
(exporter/isolation.py) builds the artifacts one after another, while this process runs eager over
the golden set and then replays and diagnoses each artifact as soon as its file is written. With
``--jobs 1``, or a golden set too large to hold in memory, one thing happens at a time. The rows,
their numbers and the report's order are the same either way (tests/test_jobs.py).
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__, isolation
from .artifacts import BUILD_ORDER, KINDS_BY_NAME, ArtifactKind, BuildContext
from .artifacts._common import as_logits, captured_warnings, dedupe
from .cache import RESTORED, ArtifactCache, cached_rows, open_cache, restore_artifact, store_rows
from .checkpoint import build_model, check_readable_file, load_state_dict, sha256_file
from .compare import ErrorAccumulator, Metrics, ShapeMismatch, judge
from .config import TORCH_INTEROP_THREADS, RunConfig
from .errors import ArchitectureError, ExportCheckError, OutputError
from .diagnostics.run import EAGER, Diagnoser
from .diagnostics.trace import ReplayTrace
from .golden import GoldenSet, load_golden
from .golden_batches import GoldenBatches
from .results import ERROR, FAIL, PASS, FileInfo, GoldenSummary, Report, Row
from .versions import library_versions

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@contextlib.contextmanager
def pinned_threads(threads: int) -> Iterator[None]:
    """Fix torch's intra-op thread count for the run (it changes both speed and numbers), then restore it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    if torch.get_num_interop_threads() != TORCH_INTEROP_THREADS:
        # torch allows this once per process, before any inter-op work; later runs in the same process keep it.
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(TORCH_INTEROP_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def locked_out_dir(out_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the output directory so two runs never interleave their artifacts."""
    import fcntl

    lock_path = out_dir / ".export-check.lock"
    try:
        fh = open(lock_path, "a+")
    except OSError as exc:
        raise OutputError(f"{out_dir}: cannot write there ({exc.strerror or exc}); pass --out to a writable directory") from None
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Another run holds it: wait for it rather than fail, the outcome is the same files.
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def prepare_out_dir(out_dir: Path) -> Path:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{out_dir}: cannot create the output directory ({exc.strerror or exc}); pass --out to a writable directory") from None
    if not out_dir.is_dir():
        raise OutputError(f"{out_dir}: exists and is not a directory; pass --out to a directory")
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise OutputError(f"{out_dir}: not writable; pass --out to a writable directory")
    return out_dir


@dataclass
class BuildOutcome:
    path: Path | None = None
    seconds: float | None = None
    error: str | None = None
    details: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    cache: str | None = None  # cache.RESTORED when the file came from the artifact cache


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        text = "no space left on device while writing the artifact"
    return f"{type(exc).__name__}: {text[:400]}" if text else type(exc).__name__


class BuildJob:
    """One artifact's build: sent to the build server at construction, its outcome on :meth:`result`.

    Isolated builds run in a child of the build server (exporter/isolation.py), one after another
    in the order they were started, while this process goes on. A failure becomes ``error``.
    """

    def __init__(self, kind: ArtifactKind, ctx: BuildContext, path: Path, source: Path | None, timeout: float | None = None) -> None:
        self.kind, self.path = kind, path
        self._began = time.perf_counter()
        self._outcome: BuildOutcome | None = None
        self._notes: list[str] = []
        self._pending: isolation.PendingBuild | None = None
        try:
            with captured_warnings(self._notes):
                self._pending = isolation.start(kind, ctx, path, source, timeout)
        except Exception as exc:  # any exporter failure is this artifact's error, not the run's
            self._outcome = self._failed(BuildOutcome(notes=self._notes), f"build failed: {_describe(exc)}")

    def done(self) -> bool:
        return self._outcome is not None or (self._pending is not None and self._pending.done())

    def result(self) -> BuildOutcome:
        if self._outcome is None:
            assert self._pending is not None
            outcome = BuildOutcome(notes=self._notes)
            try:
                with captured_warnings(outcome.notes):
                    outcome.details = self._pending.wait(outcome.notes)
                outcome.path = self.path
            except (isolation.BuildCrashed, isolation.SourceFailed) as exc:
                self._failed(outcome, str(exc))
            except Exception as exc:  # any exporter failure is this artifact's error, not the run's
                self._failed(outcome, f"build failed: {_describe(exc)}")
            outcome.seconds = self._pending.seconds if self._pending.seconds is not None else time.perf_counter() - self._began
            self._outcome = outcome
        return self._outcome

    def _failed(self, outcome: BuildOutcome, error: str) -> BuildOutcome:
        outcome.error = error
        with contextlib.suppress(OSError):
            self.path.unlink()  # never leave a stale file from an earlier run looking like this one's
        outcome.seconds = time.perf_counter() - self._began
        return outcome


def start_build(kind: ArtifactKind, ctx: BuildContext, path: Path, source: Path | None, timeout: float | None = None) -> BuildJob:
    """Start building one artifact file (in the build server when isolated); ``.result()`` waits for it."""
    return BuildJob(kind, ctx, path, source, timeout)


def build_artifact(kind: ArtifactKind, ctx: BuildContext, path: Path, source: Path | None, timeout: float | None = None) -> BuildOutcome:
    """Build one artifact file and wait for it, capturing its exporter's warnings; a failure becomes ``error``."""
    return start_build(kind, ctx, path, source, timeout).result()


class _Builds:
    """The run's artifact files, in ``BUILD_ORDER``: restored from the cache, or built.

    ``ahead``: every build is sent to the build server at once, and :meth:`get` waits for one, so
    the caller replays each artifact while the next ones build on the other core (``--jobs 2``).
    Otherwise each is built when :meth:`get` asks for it (``--jobs 1``). ``waited`` is the time
    this process spent waiting for builds.
    """

    def __init__(self, config: RunConfig, ctx: BuildContext, out_dir: Path, progress: Progress,
                 cache: ArtifactCache | None, ahead: bool) -> None:
        wanted = set(config.selected_kinds)
        # A derived kind needs its source built first, even if the source itself is not reported.
        wanted |= {KINDS_BY_NAME[name].source for name in config.selected_kinds if KINDS_BY_NAME[name].source}
        self.order = [k for k in BUILD_ORDER if k.name in wanted]
        self.ctx, self.out_dir, self.progress, self.timeout = ctx, out_dir, progress, config.build_timeout or None
        self.outcomes: dict[str, BuildOutcome] = {}
        self.jobs: dict[str, BuildJob] = {}
        self.waited = 0.0
        for kind in self.order:
            restored = restore_artifact(cache, kind.name, out_dir / kind.filename()) if cache is not None else None
            if restored is not None:
                self.outcomes[kind.name] = BuildOutcome(path=restored.path, details=restored.details, notes=list(restored.notes), cache=RESTORED)
            elif ahead:
                self.jobs[kind.name] = start_build(kind, ctx, out_dir / kind.filename(), self._source_path(kind), self.timeout)

    def _source_path(self, kind: ArtifactKind) -> Path | None:
        return None if kind.source is None else self.out_dir / KINDS_BY_NAME[kind.source].filename()

    def get(self, name: str) -> BuildOutcome:
        """``name``'s outcome, waiting for (or running) its build."""
        if name in self.outcomes:
            return self.outcomes[name]
        kind = KINDS_BY_NAME[name]
        source = self.get(kind.source) if kind.source else None
        began = time.perf_counter()
        job = self.jobs.get(name)
        if job is None or not job.done():
            self.progress(f"building {name}")
        if source is not None and (source.error or source.path is None):
            if job is not None:
                job.result()  # the server refused it (in-process, it may have built from an earlier run's file)
            with contextlib.suppress(OSError):
                (self.out_dir / kind.filename()).unlink()  # an earlier run's file must not pass for this run's
            outcome = BuildOutcome(error=f"not built: it is derived from {kind.source}, which failed")
        elif job is not None:
            outcome = job.result()
        else:
            outcome = build_artifact(kind, self.ctx, self.out_dir / kind.filename(), self._source_path(kind), self.timeout)
        self.waited += time.perf_counter() - began
        self.outcomes[name] = outcome
        return outcome


def _file_info(path: Path) -> FileInfo:
    return FileInfo(path=str(path), size_bytes=path.stat().st_size, sha256=sha256_file(path))


def run_check(config: RunConfig, progress: Progress = _quiet) -> Report:
    """Run the whole check described by ``config`` and return its report."""
    started = time.perf_counter()
    # Validate everything cheap first, so bad input fails before any export starts.
    check_readable_file(config.checkpoint, "checkpoint", "pass the path of a .pth/.pt/.safetensors state_dict")
    golden = load_golden(config.golden)
    reference = golden.reference()
    out_dir = prepare_out_dir(config.out_dir)
    checkpoint_info = _file_info(config.checkpoint)
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
            builds = _Builds(config, ctx, out_dir, progress, cache, ahead)
            batches.precompute_eager(lambda batch: _eager_logits(model, batch))
            eager_ahead = _eager_sizes_ahead(config, golden, batches, model)
            if any(KINDS_BY_NAME[name].suffix == ".onnx" for name in config.selected_kinds):
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
                return stack.enter_context(kind.impl().open_runner(outcome.path, ctx))
        except Exception as exc:
            self.errors[kind.name] = f"reloading {outcome.path.name} failed: {_describe(exc)}"
            return None

    def _eager(self, index: int, start: int, batch: np.ndarray, record: bool) -> np.ndarray:
        try:
            ahead = self.batches.eager(index)
            if ahead is None:
                began = time.perf_counter()
                ahead = (_eager_logits(self.model, batch), time.perf_counter() - began)
        except Exception as exc:
            raise ArchitectureError(
                f"{self.config.checkpoint}: the eager model fails on the golden inputs ({_describe(exc)}); "
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
                        out = runner.infer(batch)
                    self.trace.add_output(name, start, batch, out, time.perf_counter() - began)
                    self.accumulators[name].add(eager, out)
                except Exception as exc:
                    self.errors[name] = f"running failed at inputs {start}..{start + len(batch) - 1}: {_describe(exc)}"
                    del runners[name]
                self.seconds[name] += time.perf_counter() - began

    def eager_row(self) -> Row:
        return _eager_row(self.config, None if self.eager_error else self.eager_acc.result(), self.eager_error)

    def artifact_row(self, kind: ArtifactKind, outcome: BuildOutcome) -> Row:
        artifact = _file_info(outcome.path) if outcome.path is not None and outcome.path.is_file() else None
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
    builds: _Builds,
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


def _eager_logits(model: Any, batch: np.ndarray) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return as_logits(model(torch.from_numpy(batch)), "the eager model")


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
    gate = config.thresholds.eager_gate
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


__all__ = ["run_check", "prepare_out_dir", "pinned_threads", "ExportCheckError"]
