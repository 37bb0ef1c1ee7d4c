"""The one way through: config -> golden set -> build -> observe -> judge -> explain -> judge -> Report.

``run_check`` produces a :class:`~export_check.results.Report`; it prints nothing and never exits. The
CLI, the pytest plugin and fleet runs all call it. Observing and judging are separate: ``observe``
replays and measures (``records.Observation``), ``judge`` alone decides; ``explain`` is a pass of its own
after the observe stage, on the rows the judge flags (per-layer tables, the reduced subgraph), and the
report judges every row once more on what it added. A cached run is the same path with the builds and
replays restored from the cache (``cache``), judged by the same code. Each artifact is isolated: its failure to
build, load or run becomes its own ``error`` row.

Two processes share the work (``--jobs 2``, the default on two cores or more): the build server
(exporter/builder/isolation.py) builds the artifacts one after another, while this process runs eager
over the golden set and then replays and diagnoses each artifact as soon as its file is written.
With ``--jobs 1`` one thing happens at a time. A golden set too large to hold in memory is decoded
once into a temporary file during eager's pass (golden/batches.py), and read back from it by every
replay; only a set that cannot be spilled (a full disk) is replayed in one pass after every build. The
rows, their numbers and the report's order are the same either way (tests/integration/test_jobs.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..artifacts import KINDS_BY_NAME, BuildContext
from ..artifacts._heap import reused_heap
from ..artifacts.base import INPUT, ModelRecipe
from ..builder import isolation
from ..builder.builds import Builds
from ..cache.runs import CacheUnavailable, cached_run, open_cache, restore_run, store_observations
from ..cache.store import ArtifactCache
from ..config import RunConfig
from ..diagnostics.eager import eager_failure
from ..diagnostics.run import PendingSelfCheck, size_check_ahead
from ..diagnostics.shapes import SizeCheck
from ..diagnostics.trace import ReplayTrace
from ..errors import ExportCheckError, UsageError
from ..files import FileInfo, check_readable_file, file_info, locked_out_dir, prepare_out_dir
from ..golden.batches import GoldenBatches
from ..golden.goldenset import GoldenSet
from ..golden.manifest import checked_golden
from ..model import EagerRunner, fingerprint, load_model, pinned_threads
from ..paths import check_outputs
from ..progress import count_message
from ..records import EagerSelfCheck, Observation
from ..results import GoldenSummary, Report
from ..signature import SINGLE, Signature
from ..versions import library_versions
from . import observe
from .explain import Explainer, explain_flagged
from .judge import judge_rows, layers_missing

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def run_check(config: RunConfig, progress: Progress = _quiet, keep_helpers: bool = True) -> Report:
    """Run the whole check described by ``config`` and return its report. ``keep_helpers=False``: this process runs no
    other check (the CLI's one run), so its build server and runtime hosts end once the builds and replays are done,
    before explain (their memory is not the tree's while it explains); else they stay, warm, for the next run."""
    started = time.perf_counter()
    check_outputs(config)  # --out must not be, or hold, what the run reads (exporter/paths.py)
    # Validate everything cheap first, so bad input fails before any export starts.
    check_readable_file(config.checkpoint, "checkpoint", "pass the path of a .pth/.pt/.safetensors state_dict")
    if config.language:  # prompts for a language model: its decode loop is checked instead (issue 45)
        from ..decode.run import run_generation  # imported here: it imports torch and the decode kinds

        return run_generation(config, progress)
    golden = checked_golden(config.golden, config.signature_settings)
    out_dir = prepare_out_dir(config.out_dir)
    checkpoint_info = file_info(config.checkpoint)
    timings = {"verify_inputs": time.perf_counter() - started}
    run_notes: list[str] = list(config.settings_ignored)
    with locked_out_dir(out_dir):
        # Under the lock: another process (a pytest-xdist worker, a fleet) that held it may have just built and stored
        # these very artifacts; then this is a hit, not a second build. A hit needs no model, no torch and no replay.
        try:  # best effort: without a key or a folder the run goes on without it
            cache = open_cache(config, checkpoint_info.sha256, golden.manifest_sha256, golden.signature.to_json())
        except CacheUnavailable as exc:
            cache = None
            run_notes.append(f"cache: not used by this run: {exc}")
        found = _cache_hit(cache, config, out_dir, run_notes)
        if cache is not None:
            timings["judge_only" if config.judge_only else "cache_lookup"] = time.perf_counter() - started - sum(timings.values())
        if found is not None:
            progress(f"every artifact and its metrics found in the cache {config.cache_dir}")
        else:
            found = _replayed(config, golden, cache, out_dir, progress, started, timings, run_notes, keep_helpers)
    return _report(config, golden, checkpoint_info, found[0], found[1], started, out_dir, timings, run_notes)


def _replayed(config: RunConfig, golden: GoldenSet, cache: ArtifactCache | None, out_dir: Path, progress: Progress, started: float,
              timings: dict[str, float], run_notes: list[str], keep_helpers: bool = True) -> tuple[list[Observation], float | None]:
    """Build, replay, observe and explain every row (the cache's files reused where it has them), and store what was
    observed: the observations and the golden set's label accuracy. ``timings`` gets each stage's time since the run
    ``started`` (each stage is the time since the sum of the ones before it); ``keep_helpers``: as in ``run_check``."""
    # Start the build server (each export runs in a child of it, so a native crash costs one row) now, so that it
    # imports the export libraries while this process loads the model. Before torch runs here: it may be forked.
    isolation.prewarm(config.kinds, config.build_timeout or None)
    with pinned_threads(config.threads):
        progress("loading checkpoint")
        model = load_model(config.checkpoint, config.arch, config.arch_kwargs, config.arch_root, run_notes, config.build_timeout)
        eager = EagerRunner(model, golden.signature)  # the eager model as every stage of this process runs it
        # what tells this model from another the build server could build from the same checkpoint; taken before eager's
        # first call, as the server's fresh build of the recipe is (a forward that fills a buffer cannot move it)
        model_fingerprint = fingerprint(model)
        batches = GoldenBatches(golden, config.batch_size)  # decoded once: held when it fits in memory, else spilled to a file
        # static int8 (a kind whose row says it is calibrated): the golden set's calibration split, read now; none: nothing read
        calibration = golden.calibration_batches(config.batch_size) if any(KINDS_BY_NAME[n].calibrated for n in config.selected_kinds) else ()
        progress("running the eager model on the first batch (does it reproduce itself?)")
        began = time.perf_counter()
        # eager first, before anything is built; its second call on the first batch is the eager pass's
        try:
            pending_check = PendingSelfCheck(eager, batches.first)
        except Exception as exc:  # the model cannot take the golden inputs: the run's one-line error, naming the input
            raise eager_failure(config, golden, 0, batches.first, exc, eager.infer) from None
        parts = {"load_model/eager_self_check": time.perf_counter() - began}  # parts of load_model, for the benchmarks
        ctx = _build_context(config, golden.signature, batches, model, model_fingerprint, calibration)
        # --jobs 2: every build goes to the build server now; this process runs eager over the set
        # meanwhile, then replays and diagnoses each artifact as soon as it is built, while the next
        # ones build on the other core. A set that can only stream is replayed once, after all the builds.
        ahead = config.effective_jobs > 1 and batches.rereadable and isolation.enabled()
        try:
            builds = Builds(config, ctx, out_dir, progress, cache, ahead)
            eager_check, size_check = _eager_stage(config, golden, batches, eager, pending_check, parts, progress)
            if any(KINDS_BY_NAME[name].runtime == "onnxruntime" for name in config.selected_kinds):
                import onnxruntime  # noqa: F401  (the replay's runners need it)
            timings["load_model"] = time.perf_counter() - started - sum(timings.values())
            observed = observe.observe_all(config, golden, batches, eager, ctx, builds, progress, size_check,
                                           by_artifact=batches.eager_held(), eager_check=eager_check, timings=parts)
            if not keep_helpers:  # every build read and every replay done: nothing of the run needs them any more
                isolation.shutdown()
            # explain: what only the rows the judge flags need (per-layer tables, the reduced subgraph); _report judges again
            began = time.perf_counter()
            explainer = Explainer(config, golden, model, observed.probe, observed.plan, progress, ctx)
            observations, label_accuracy = explain_flagged(observed.observations, explainer), observed.label_accuracy
            parts["replay/explain"] = time.perf_counter() - began
        finally:
            isolation.settle()  # a run stopped early leaves no build running behind it
            batches.close()  # a spilled set's file
    replayed = time.perf_counter() - started - sum(timings.values())
    timings["build"] = builds.waited
    timings["replay"] = replayed - builds.waited
    if cache is not None:
        observations = store_observations(cache, config, observations, builds.outcomes, label_accuracy)
        if cache.problems:  # best effort: the run's verdicts stand; each row's note says why its entry was not kept
            count, reason = len(cache.problems), next(iter(cache.problems.values())).removeprefix("cache: ")
            run_notes.append(f"cache: {count} {'entry' if count == 1 else 'entries'} not stored: {reason}")
        timings["cache_store"] = time.perf_counter() - started - sum(timings.values())
    timings.update(parts)  # after the stages: each stage above is the time since the sum of the ones before it
    return observations, label_accuracy


def _build_context(config: RunConfig, signature: Signature, batches: GoldenBatches, model: Any, model_fingerprint: str,
                   calibration: tuple[dict[str, np.ndarray], ...]) -> BuildContext:
    """What every build of the run reads: the model, the first batch as its example, the settings, the calibration split."""
    import torch

    first = {name: torch.from_numpy(np.ascontiguousarray(array)) for name, array in batches.first.items()}
    axis_sizes = _axis_sizes(signature, batches)
    return BuildContext(
        model=model,
        example=first[INPUT] if signature is SINGLE else first,
        opset=config.opset,
        onnx_exporter=config.onnx_exporter,
        threads=config.threads,
        signature=signature,
        calibration=calibration,
        fp16_optimization=config.fp16_optimization,
        axis_extents=_axis_extents(axis_sizes),
        axis_sizes=axis_sizes,
        # the build server builds its own copy from the checkpoint (mapped: one copy of the weights between them)
        recipe=ModelRecipe(str(config.checkpoint), config.arch, tuple(sorted(config.arch_kwargs.items())),
                           None if config.arch_root is None else str(config.arch_root), model_fingerprint),
    )


def _eager_stage(config: RunConfig, golden: GoldenSet, batches: GoldenBatches, eager: EagerRunner, pending_check: PendingSelfCheck,
                 parts: dict[str, float], progress: Progress) -> tuple[EagerSelfCheck, SizeCheck]:
    """Eager over the whole set (while the first builds run), its self-check finished on the first batch, and the
    batch-size check planned, with eager at its other sizes: the eager check and the size check. ``parts`` gets each
    one's time."""
    began = time.perf_counter()
    with reused_heap():  # eager's activations reused batch to batch, as a torch runner's are (artifacts/_heap.py)
        batches.precompute_eager(eager.infer, counted=lambda done, total: progress(count_message("eager over the golden set", done, total)))
    parts["load_model/eager_pass"] = time.perf_counter() - began
    began = time.perf_counter()
    held = batches.eager(0)
    eager_check = pending_check.finish(None if held is None else held[0])
    parts["load_model/eager_self_check"] += time.perf_counter() - began
    progress("eager at the other batch sizes of the diagnostics")
    began = time.perf_counter()
    with reused_heap():
        probe, count = batches.head(ReplayTrace.for_run(len(golden), config.batch_size).probe_count)  # the samples the trace records
        size_check = size_check_ahead(eager, probe, count, golden, config.batch_size, config.diagnostics_budget)
    parts["load_model/eager_batch_sizes"] = time.perf_counter() - began
    return eager_check, size_check


def _cache_hit(cache: ArtifactCache | None, config: RunConfig, out_dir: Path, run_notes: list[str]) -> tuple[list[Observation], float | None] | None:
    """Every row from the cache, when each is there and today's gates can be judged on it: a verdict that asks for a
    per-layer table an entry does not hold is a miss (the files are reused, the rows replayed).

    ``--judge-only``: the cached observations of this very check (same checkpoint, golden set, settings, versions),
    or a one-line error; what a gate would have a full check measure (a per-layer table, a metric an older entry
    lacks) is not measured, and a run note says so."""
    if cache is None:
        if config.judge_only:
            why = next((n for n in run_notes if n.startswith("cache:")), "the cache is off (--no-cache)")
            raise UsageError(f"--judge-only judges a cached check, and this run has no cache ({why}); run the check without --judge-only")
        return None
    found = cached_run(cache, config)
    if found is None:
        if config.judge_only:
            raise UsageError(f"--judge-only: no cached run of this check in {config.cache_dir} (never run with these settings, or the "
                             "checkpoint, golden set, settings or library versions changed since); run it once without --judge-only")
        return None
    wanting = [o.name for o in found.observations if layers_missing(o, config.thresholds, config.diagnose)]
    if wanting and not config.judge_only:
        return None
    restored = restore_run(cache, found, out_dir)
    if restored is None and config.judge_only:
        raise UsageError(f"--judge-only: the cached artifacts cannot be put into {out_dir} intact; run the check without --judge-only")
    if wanting:
        run_notes.append(f"--judge-only: judged from the cache without a replay; a full check would also measure {', '.join(wanting)} "
                         "(a per-layer table, or a metric these entries lack): run it without --judge-only for them")
    return restored


def _report(
    config: RunConfig,
    golden: GoldenSet,
    checkpoint_info: FileInfo,
    observations: list[Observation],
    label_accuracy: float | None,
    started: float,
    out_dir: Path,
    timings: dict[str, float],
    run_notes: list[str] | None = None,
) -> Report:
    from ..report import node_data

    judged = tuple(judge_rows(observations, config.thresholds, config.diagnose, config.strict))  # the verdicts: one pure judge
    rows, node_files = node_data.write_all(judged, out_dir)  # each row's per-layer table, where it has one, for Model Explorer
    recorded_ckpt = golden.model.get("checkpoint_sha256")
    return Report(
        tool_version=__version__,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
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
        versions=tuple(sorted(library_versions(config.selected_kinds).items())),
        rows=rows,
        seconds=time.perf_counter() - started,
        out_dir=str(out_dir),
        timings=tuple((stage, round(seconds, 4)) for stage, seconds in timings.items()),
        settings_files=config.settings_files,
        run_notes=tuple(run_notes or ()),
        observations=tuple(observations),
        node_data=node_files,
    )


__all__ = ["run_check", "ExportCheckError"]


def _axis_sizes(signature: Signature, batches: GoldenBatches) -> tuple[tuple[tuple[str, int, int], ...], ...]:
    """Each distinct combination of the declared dynamic input axes' sizes besides the batch in the golden set, sorted
    (read only when one is declared): ``(((input, axis, size), ...), ...)``."""
    declared = [(spec.name, axis) for spec in signature.inputs for axis, _ in spec.dynamic_axes if axis != spec.batch_axis]
    if not declared:
        return ()
    seen = {tuple(int(feeds[name].shape[axis]) for name, axis in declared) for _, feeds in batches}
    return tuple(tuple((name, axis, size) for (name, axis), size in zip(declared, sizes, strict=True)) for sizes in sorted(seen))


def _axis_extents(sizes: tuple[tuple[tuple[str, int, int], ...], ...]) -> tuple[tuple[str, int, int], ...]:
    """Per declared dynamic input axis besides the batch, the longest size in the golden set (from ``_axis_sizes``)."""
    if not sizes:
        return ()
    return tuple((name, axis, max(combo[k][2] for combo in sizes)) for k, (name, axis, _) in enumerate(sizes[0]))

