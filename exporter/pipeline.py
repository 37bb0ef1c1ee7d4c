"""The one path for the data: load -> build each artifact -> reload it from disk -> replay -> judge.

``run_check`` produces a :class:`~exporter.results.Report`; it prints nothing and never exits.
Running and judging are separate: replay feeds outputs into accumulators, ``compare.judge`` decides.
Each artifact is isolated: its failure to build, load or run becomes its own ``error`` row.
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
from .artifacts import KINDS, KINDS_BY_NAME, ArtifactKind, BuildContext
from .artifacts._common import as_logits, captured_warnings, dedupe
from .cache import RESTORED, ArtifactCache, cached_rows, open_cache, restore_artifact, store_rows
from .checkpoint import build_model, check_readable_file, load_state_dict, sha256_file
from .compare import ErrorAccumulator, Metrics, ShapeMismatch, judge
from .config import TORCH_INTEROP_THREADS, RunConfig
from .errors import ArchitectureError, ExportCheckError, OutputError
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


def build_artifact(kind: ArtifactKind, ctx: BuildContext, path: Path, source: Path | None) -> BuildOutcome:
    """Build one artifact file, capturing its exporter's warnings; a failure becomes ``error``."""
    outcome = BuildOutcome()
    started = time.perf_counter()
    try:
        with captured_warnings(outcome.notes):
            # Issue 5: in a child process, so a native crash is this row's error (exporter/isolation.py).
            outcome.details = isolation.build(kind, ctx, path, source, outcome.notes)
        outcome.path = path
    except isolation.BuildCrashed as exc:
        outcome.error = str(exc)
        with contextlib.suppress(OSError):
            path.unlink()
    except Exception as exc:  # any exporter failure is this artifact's error, not the run's
        outcome.error = f"build failed: {_describe(exc)}"
        with contextlib.suppress(OSError):
            path.unlink()  # never leave a stale file from an earlier run looking like this one's
    outcome.seconds = time.perf_counter() - started
    return outcome


def _build_all(
    config: RunConfig, ctx: BuildContext, out_dir: Path, progress: Progress, cache: ArtifactCache | None = None
) -> dict[str, BuildOutcome]:
    wanted = set(config.selected_kinds)
    # A derived kind needs its source built first, even if the source itself is not reported.
    wanted |= {KINDS_BY_NAME[name].source for name in config.selected_kinds if KINDS_BY_NAME[name].source}
    built: dict[str, BuildOutcome] = {}
    for kind in (k for k in KINDS if k.name in wanted):
        source_path = None
        if kind.source:
            source = built[kind.source]
            if source.error or source.path is None:
                built[kind.name] = BuildOutcome(error=f"not built: it is derived from {kind.source}, which failed")
                continue
            source_path = source.path
        restored = restore_artifact(cache, kind.name, out_dir / kind.filename()) if cache is not None else None
        if restored is not None:
            built[kind.name] = BuildOutcome(path=restored.path, details=restored.details, notes=list(restored.notes), cache=RESTORED)
            continue
        progress(f"building {kind.name}")
        built[kind.name] = build_artifact(kind, ctx, out_dir / kind.filename(), source_path)
    return built


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
        # Decoded once (when it fits in memory) and run through eager now, while the build server
        # imports its libraries on the other core (exporter/golden_batches.py).
        batches = GoldenBatches(golden, config.batch_size)
        batches.precompute_eager(lambda batch: _eager_logits(model, batch))
        eager_ahead = _eager_sizes_ahead(config, golden, batches, model)
        if any(KINDS_BY_NAME[name].suffix == ".onnx" for name in config.selected_kinds):
            import onnxruntime  # noqa: F401  (the replay's runners need it; importing it now overlaps the server's imports)
        ctx = BuildContext(
            model=model,
            example=torch.from_numpy(batches.first),
            opset=config.opset,
            onnx_exporter=config.onnx_exporter,
            threads=config.threads,
        )
        timings["load_model"] = time.perf_counter() - started - sum(timings.values())
        built = _build_all(config, ctx, out_dir, progress, cache)
        timings["build"] = time.perf_counter() - started - sum(timings.values())
        rows, label_accuracy = _replay_and_judge(config, golden, batches, reference, model, ctx, built, progress, eager_ahead)
        timings["replay"] = time.perf_counter() - started - sum(timings.values())
        if cache is not None:
            rows = store_rows(cache, config, rows, built, label_accuracy)
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


def _replay_and_judge(
    config: RunConfig,
    golden: GoldenSet,
    batches: GoldenBatches,
    reference: np.ndarray,
    model: Any,
    ctx: BuildContext,
    built: dict[str, BuildOutcome],
    progress: Progress,
    eager_ahead: dict[int, Any] | None = None,
) -> tuple[list[Row], float | None]:
    from .diagnostics.run import EAGER, diagnose_rows
    from .diagnostics.trace import ReplayTrace

    kinds = [KINDS_BY_NAME[name] for name in config.selected_kinds]
    errors: dict[str, str] = {k.name: built[k.name].error for k in kinds if built[k.name].error}
    accumulators = {k.name: ErrorAccumulator() for k in kinds}
    replay_seconds = {k.name: 0.0 for k in kinds}
    eager_acc = ErrorAccumulator()
    eager_error: str | None = None
    eager_argmax: list[np.ndarray] = []
    trace = ReplayTrace.for_run(len(golden), config.batch_size)  # what the diagnostics reuse

    with contextlib.ExitStack() as stack:
        runners: dict[str, Any] = {}
        for kind in kinds:
            if kind.name in errors:
                continue
            path = built[kind.name].path
            assert path is not None
            try:
                with captured_warnings(built[kind.name].notes):
                    runners[kind.name] = stack.enter_context(kind.impl().open_runner(path, ctx))
            except Exception as exc:
                errors[kind.name] = f"reloading {path.name} failed: {_describe(exc)}"

        progress(f"replaying {len(golden)} inputs through {len(runners)} artifacts")
        for index, (start, batch) in enumerate(batches):
            trace.add_batch(start, batch)
            try:
                ahead = batches.eager(index)
                if ahead is None:
                    began = time.perf_counter()
                    ahead = (_eager_logits(model, batch), time.perf_counter() - began)
                eager = ahead[0]
                trace.add_output(EAGER, start, batch, eager, ahead[1])
            except Exception as exc:
                raise ArchitectureError(
                    f"{config.checkpoint}: the eager model fails on the golden inputs ({_describe(exc)}); "
                    "check that --arch and the golden set's preprocessing match the model"
                ) from None
            eager_argmax.append(np.argmax(eager, axis=1))
            if eager_error is None:
                try:
                    eager_acc.add(reference[start : start + len(batch)], eager)
                except ShapeMismatch as exc:
                    eager_error = f"eager output does not match the golden reference: {exc}"
            for name, runner in list(runners.items()):
                began = time.perf_counter()
                try:
                    with captured_warnings(built[name].notes):
                        out = runner.infer(batch)
                    trace.add_output(name, start, batch, out, time.perf_counter() - began)
                    accumulators[name].add(eager, out)
                except Exception as exc:
                    errors[name] = f"running failed at inputs {start}..{start + len(batch) - 1}: {_describe(exc)}"
                    del runners[name]
                replay_seconds[name] += time.perf_counter() - began

        rows = [_eager_row(config, None if eager_error else eager_acc.result(), eager_error)]
        for kind in kinds:
            outcome = built[kind.name]
            artifact = _file_info(outcome.path) if outcome.path is not None and outcome.path.is_file() else None
            if kind.name in errors:
                rows.append(_artifact_row(config, kind, outcome, artifact, None, None, errors[kind.name]))
                continue
            rows.append(_artifact_row(config, kind, outcome, artifact, accumulators[kind.name].result(), replay_seconds[kind.name]))
        # Batch sizes, determinism, latency, where it diverges: through the replay's open runners,
        # reusing what the replay computed (exporter/diagnostics/trace.py).
        rows = diagnose_rows(config, golden, model, ctx, rows, progress, trace=trace, runners=runners, eager_ahead=eager_ahead)
    labels = golden.labels()
    label_accuracy = None
    if eager_argmax and all(label is not None for label in labels):
        predicted = np.concatenate(eager_argmax)
        label_accuracy = float(np.mean(predicted == np.asarray(labels)))
    return rows, label_accuracy


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
