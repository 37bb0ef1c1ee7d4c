"""``export-check replay BUNDLE``: a bundle's artifacts judged on this machine, without torch.

The same path as a check after its builds: each artifact is written out of the bundle and reloaded by
its own runtime (``ArtifactKind.open_runner``), the golden inputs are replayed through it batch by
batch at the build's batch size (``observe.Replay``, fed the bundle's arrays and the build machine's
eager outputs instead of a model); what a runtime decides from the CPU it runs on (OpenVINO's inference
precision, and with it the row's gate family) is read here, from this machine's runtime (``decided_here``);
the metrics are accumulated per compared output, and the one judge (``judge.judge_rows``) applies the
bundle's gates. An artifact whose runtime is not installed here is
not applicable, with the reason. The report is a :class:`results.Report` like a check's, labelled with
the target, so every view, ``merge`` and the exit codes are the same.

Nothing here imports torch (``tests/integration/test_replay.py`` replays with torch made unimportable):
a target needs Python, numpy, this package (``pip install --no-deps export-check``) and the runtimes
of the artifacts it replays. The batch-size, determinism and latency diagnostics need the eager model
at other batch sizes: they are the build machine's, and the replay's rows say so.
"""

from __future__ import annotations

import contextlib
import importlib.util
import platform
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from . import __version__
from .artifacts import KINDS_BY_NAME, BuildContext
from .artifacts.runtimes import RUNTIME_MODULES, RUNTIME_SYSTEMS
from .builder.builds import BuildOutcome
from .bundle import MANIFEST, Bundle, open_bundle
from .config import RunConfig
from .errors import UsageError
from .files import FileInfo, prepare_out_dir
from .gates import Thresholds
from .golden.goldenset import GoldenSet
from .golden.labels import Label, check_label, labels_of, primary_labels
from .jstargets.target import JS_TARGETS
from .model import EagerRunner
from .records import Observation
from .results import GoldenSummary, Report
from .run.judge import judge_rows
from .run.observe import Replay
from .signature import SINGLE, Signature, signature_from_json
from .versions import ISA_VARIABLES, library_versions

if TYPE_CHECKING:
    from .jstargets.target import JsTarget

Progress = Callable[[str], None]
NOT_REPLAYED = ("diagnostics (batch sizes, determinism, latency) are the build machine's: a replay judges the golden set at the "
                "build's batch size")


def _quiet(_: str) -> None:
    pass


def missing_runtime(runtime: str) -> str | None:
    """Why ``runtime`` cannot run here (a module it needs cannot be imported; a system it does not predict
    on), or None."""
    systems = RUNTIME_SYSTEMS.get(runtime)
    if systems is not None and platform.system() not in systems:
        return f"the {runtime} runtime predicts only on {', '.join(systems).replace('Darwin', 'macOS')} (this is {platform.system()})"
    for module in RUNTIME_MODULES[runtime]:
        try:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed here"
        except (ImportError, ValueError):  # a parent package that cannot load, or a blocked import
            return f"{module} is not installed here"
    return None


def decided_here(kind: Any, built: dict[str, str]) -> dict[str, str]:
    """The details a kind's runtime decides on the machine that runs it (its module's optional ``replay_details(built)``:
    OpenVINO's inference precision from this machine's CPU plugin), replacing the build machine's; {} for other kinds."""
    decide = getattr(kind.impl(), "replay_details", None)
    return dict(decide(built)) if callable(decide) else {}


class _Sample:
    def __init__(self, index: int) -> None:
        self.name = f"sample {index}"


class _Calibration:
    def __init__(self, text: str) -> None:
        self.text = text

    def describe(self) -> str:
        return self.text


class BundleGolden:
    """What :class:`observe.Replay` reads of a golden set, from a bundle's manifest: the signature, the
    sample count, the calibration split; the samples are named by position (the files stayed at the build)."""

    def __init__(self, signature: Signature, samples: int, calibration: tuple[int, ...], split: str,
                 labels: list[Label | None] | None = None) -> None:
        self.signature, self._samples, self._calibration = signature, samples, calibration
        self._labels: list[Label | None] = list(labels) if labels is not None and len(labels) == samples else [None] * samples
        self.calibration = _Calibration(split)
        self.inputs = [_Sample(i) for i in range(samples)]

    def __len__(self) -> int:
        return self._samples

    def calibration_indices(self) -> tuple[int, ...]:
        return self._calibration

    def labels(self) -> list[int | None]:
        return primary_labels(self._labels, self.signature)

    def labels_of(self, output: str) -> list[int | tuple[int, ...] | None]:
        return labels_of(self._labels, self.signature, output)


class BundleBatches:
    """The golden batches of a bundle, read one at a time, each with the build machine's eager outputs."""

    def __init__(self, bundle: Bundle, signature: Signature, inputs: tuple[str, ...], outputs: tuple[str, ...]) -> None:
        self.bundle, self.signature, self.inputs, self.outputs = bundle, signature, inputs, outputs
        self._eager: dict[int, dict[str, np.ndarray]] = {}

    def __iter__(self) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        self._eager.clear()
        for index, (start, feeds, eager) in enumerate(self.bundle.batches(self.outputs, self.inputs)):
            self._eager = {index: eager}  # one batch held at a time
            yield start, feeds

    def eager(self, index: int) -> tuple[dict[str, np.ndarray], float] | None:
        held = self._eager.get(index)
        return None if held is None else (held, 0.0)


def _parts(bundle: Any, artifact: dict[str, Any], dest: Path) -> list[str]:
    """The members beside an artifact's file that belong to it (artifacts/parts.py), each one a companion of its name."""
    from .artifacts.parts import companion_names

    parts = artifact.get("parts") or []
    allowed = {f"artifacts/{name}" for name in companion_names(dest.name)}
    if not isinstance(parts, list) or not all(isinstance(p, str) and p in allowed for p in parts):
        raise UsageError(f"{bundle.path}: artifact {artifact.get('name')!r} names parts {str(parts)[:80]} that are not its "
                         "own files; pass a bundle written by `export-check check --bundle`, unedited")
    return [str(p) for p in parts]


def _field(manifest: dict[str, Any], where: str, *path: str) -> Any:
    value: Any = manifest
    for key in path:
        if not isinstance(value, dict) or key not in value:
            raise UsageError(f"{where}: no {'.'.join(path)}; pass a bundle written by `export-check check --bundle`, unedited")
        value = value[key]
    return value


def _bundle_set(bundle: Bundle, where: str, signature: Signature) -> tuple[BundleGolden, BundleBatches]:
    """The golden set a bundle carries, as :class:`observe.Replay` reads it: its sample count, calibration split and
    labels from the manifest (``where``), and its batches with the build machine's eager outputs."""
    m = bundle.manifest
    calibration = _field(m, where, "calibration")
    labels = m.get("labels")
    try:
        labels = [check_label(x, f"labels[{i}]") for i, x in enumerate(labels)] if isinstance(labels, list) else None
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}; pass a bundle written by `export-check check --bundle`, unedited") from None
    golden = BundleGolden(signature, int(m["samples"]), tuple(int(i) for i in calibration["indices"]), str(calibration["split"]), labels)
    inputs = signature.input_names
    outputs = tuple(o.name for o in signature.compared_outputs())
    return golden, BundleBatches(bundle, signature, inputs, outputs)


def replay_bundle(path: Path, out_dir: Path, target: str | None = None, threads: int | None = None,
                  progress: Progress = _quiet, public: Any = None, cache_dir: Path | None = None) -> Report:
    """The bundle at ``path`` replayed and judged here; its artifacts are written under ``out_dir``. With
    ``public`` (report/signing.PublicKeys, ``--verify-key``) only a bundle signed by one of those keys is taken.
    ``target`` ``node`` or ``browser``: the onnxruntime rows run in JavaScript (``jstargets``; its npm packages
    installed under ``cache_dir``), every other row is not applicable there."""
    started = time.perf_counter()
    bundle = open_bundle(path, public=public)
    js = None
    if target in JS_TARGETS:
        from .config import default_cache_dir
        from .jstargets.target import JsTarget
        from .settings import find_settings

        js = JsTarget(JS_TARGETS[target], cache_dir or find_settings().get("cache_dir") or default_cache_dir(), progress)
    try:
        return _replay(bundle, out_dir, target or platform.node() or "target", threads, progress, started, js)
    finally:
        bundle.close()


def _replay(bundle: Bundle, out_dir: Path, target: str, threads: int | None, progress: Progress, started: float,
            js: JsTarget | None = None) -> Report:
    m = bundle.manifest
    where = f"{bundle.path}: {MANIFEST}"
    signature = SINGLE if m.get("signature") is None else signature_from_json(m["signature"], where)
    thresholds = Thresholds.from_json(_field(m, where, "thresholds"), where)
    settings = _field(m, where, "settings")
    artifacts = _field(m, where, "artifacts")
    unknown = [a.get("name") for a in artifacts if a.get("name") not in KINDS_BY_NAME]
    if unknown:
        raise UsageError(f"{bundle.path}: artifact kind {unknown[0]!r} is not one this export-check {__version__} knows; replay with the "
                         f"version that wrote the bundle ({m.get('tool_version')})")
    provenance = _field(m, where, "provenance")
    config = RunConfig(checkpoint=Path(str(provenance["checkpoint"]["path"])), arch="(bundle)", golden=Path(str(provenance["golden"]["path"])),
                       out_dir=out_dir, kinds=tuple(a["name"] for a in artifacts), thresholds=thresholds,
                       batch_size=int(settings["batch_size"]), threads=threads or int(settings["threads"]),
                       fp16_optimization=str(settings["fp16_optimization"]))
    out = prepare_out_dir(out_dir)
    golden, batches = _bundle_set(bundle, where, signature)
    # Replay reads these as a golden set and its batches: the parts a replay without eager uses (BundleGolden, BundleBatches)
    # no eager model here: eager's outputs are the bundle's (BundleBatches.eager), never computed
    replay = Replay(config, cast(GoldenSet, golden), cast(Any, batches), EagerRunner(None, signature))
    ctx = BuildContext(model=None, example=None, opset=config.opset, onnx_exporter=config.onnx_exporter, threads=config.threads,
                       signature=signature, fp16_optimization=config.fp16_optimization)
    build_kernels = set(ISA_VARIABLES) | {"cpu_flags"}  # the build machine's: this machine's are recorded instead
    observations: list[Observation] = []
    opened: list[tuple[Any, BuildOutcome]] = []
    timings: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        runners: dict[str, Any] = {}
        for artifact in artifacts:
            kind = KINDS_BY_NAME[artifact["name"]]
            details = {k: str(v) for k, v in dict(artifact.get("details") or {}).items() if k not in build_kernels}
            missing = missing_runtime(kind.runtime) if js is None else js.missing(kind.runtime, kind.name)
            if missing is not None:
                observations.append(Observation(name=kind.name, family=kind.family, compared_with="eager", metrics=None, not_applicable=True,
                                                error=f"not applicable on {target}: {missing} (the {kind.runtime} runtime replays "
                                                      f"{kind.name}); replay it where that runtime runs"))
                continue
            details.update(decided_here(kind, details))  # OpenVINO's precision, and so the gate family, is the target's
            dest = out / Path(str(artifact["file"])).name
            progress(f"replay on {target}: loading {kind.name}")
            for member in _parts(bundle, artifact, dest):  # its ONNX .data first: the graph names it
                bundle.extract(member, dest.with_name(Path(member).name))
            extracted = bundle.extract(str(artifact["file"]), dest)
            outcome = BuildOutcome(path=extracted, details=details)
            runner = replay.open(kind, outcome, ctx, stack) if js is None else js.open_row(replay.errors, kind, extracted, ctx, stack)
            if runner is not None:
                runners[kind.name] = runner
            opened.append((kind, outcome))
        timings["load"] = time.perf_counter() - started
        progress(f"replay on {target}: {len(golden)} golden samples through {len(runners)} artifacts")
        replay.run(runners, {kind.name: outcome.notes for kind, outcome in opened}, with_eager=False)
        timings["replay"] = time.perf_counter() - started - timings["load"]
    by_name = {obs.name: obs for obs in observations}
    for kind, outcome in opened:
        by_name[kind.name] = replay.artifact_observation(kind, outcome)
    ordered = [by_name[a["name"]] for a in artifacts]
    rows = judge_rows(ordered, thresholds)
    checkpoint = provenance["checkpoint"]
    golden_json = provenance["golden"]
    return Report(
        tool_version=__version__,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        checkpoint=FileInfo(path=str(checkpoint["path"]), size_bytes=int(checkpoint["size_bytes"]), sha256=str(checkpoint["sha256"])),
        golden=GoldenSummary(path=str(golden_json["path"]), inputs=int(golden_json["inputs"]), manifest_sha256=str(golden_json["manifest_sha256"]),
                             created=str(golden_json["created"]), recorded_checkpoint_sha256=golden_json.get("recorded_checkpoint_sha256"),
                             recorded_with=tuple(sorted(dict(golden_json.get("recorded_with") or {}).items())), label_accuracy=None),
        thresholds=thresholds,
        settings=(("batch_size", config.batch_size), ("bundle", str(bundle.path)), ("threads", config.threads)),
        versions=tuple(sorted(({k: v for k, v in library_versions(config.kinds).items() if k != "onnxruntime"} | js.versions()
                               if js is not None else library_versions(config.kinds)).items())),
        rows=tuple(rows),
        seconds=time.perf_counter() - started,
        out_dir=str(out),
        timings=tuple((k, round(v, 4)) for k, v in timings.items()),
        run_notes=(NOT_REPLAYED, *([js.note()] if js is not None else [])),
        target=target,
        observations=tuple(ordered),
    )
