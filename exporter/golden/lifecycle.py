"""The golden set lifecycle behind ``export-check golden record|verify|approve``, as typed results.

Golden data changes only here, on an explicit command, through :mod:`export_check.golden.store`
(content-addressed files, manifest replaced last and atomically, only the previous set's own files
collected), under the folder's exclusive lock (:mod:`export_check.golden.lock`) held around the whole
read-modify-commit. Every input is read once: the bytes hashed are the bytes decoded and stored.
Nothing here prints: the command line (``export_check.cli``) and the pytest plugin show the results.

Recording writes format 1, exactly as it always has, for a folder of images or ``.npy`` tensors and a
model returning one tensor, with no ``model-inputs``/``outputs`` settings; otherwise format 2 (sample
archives, several outputs, or a declared signature; ``export_check.golden.discover`` learns the signature).
Format 1 records streaming, a batch at a time (memory flat in the number of inputs); format 2 holds
every sample's outputs, which it needs to learn the signature.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from itertools import chain, islice
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArtifactError, GoldenError, UsageError, describe_exception, one_line
from ..files import sha256_file
from ..model import EagerRunner, eager_logits, load_model, pinned_threads
from ..signature import InputSpec, Signature, SignatureSettings, kind_said
from ..versions import library_versions
from .calibration import CalibrationSplit, default_calibration
from .diff import ApproveDiff, OutputsDiff, diff_references
from .discover import input_specs, kind_of, run_outputs
from .goldenset import INPUT, MANIFEST, VERSION_1, GoldenSet
from .inputs import (
    IMAGE_SUFFIXES,
    TENSOR_SUFFIX,
    Preprocess,
    conform_sample,
    decode_input,
    finite_or_raise,
    image_files,
    read_sample,
    sample_files,
)
from .labels import Label, check_label
from .lock import LOCK_NAME, golden_lock, lock_path
from .manifest import read_manifest, unreferenced_files, verify_golden
from .reading import FILE_MAX_BYTES, LABELS_MAX_BYTES, load_json, read_user_file
from .store import NewInput, check_distinct_names, write_golden, write_golden_v2, writing


def _rows_of(model: Any, batch: np.ndarray) -> np.ndarray:
    """Eager's logits for one batch, which must hold one row per input."""
    rows = eager_logits(model, batch)
    if rows.shape[0] != batch.shape[0]:
        raise GoldenError(f"the model returned {rows.shape[0]} output rows for a batch of {batch.shape[0]} inputs: a golden set "
                            "needs one output per input along the batch axis (does forward ignore its input's batch size?)")
    return rows


def _eager_logits(model: Any, arrays: Iterable[np.ndarray], batch_size: int) -> np.ndarray:
    return np.concatenate([_rows_of(model, batch) for batch in _batched(arrays, batch_size)])


def _batched(arrays: Iterable[np.ndarray], size: int) -> Iterator[np.ndarray]:
    chunk: list[np.ndarray] = []
    for array in arrays:
        chunk.append(array)
        if len(chunk) == size:
            yield np.stack(chunk)
            chunk = []
    if chunk:
        yield np.stack(chunk)


def _model_info(checkpoint: Path, arch: str, arch_kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"checkpoint": checkpoint.name, "checkpoint_sha256": sha256_file(checkpoint), "arch": arch, "arch_kwargs": arch_kwargs}


def _labels(inputs_dir: Path) -> dict[str, Label]:
    path = inputs_dir / "labels.json"
    if not path.is_file():
        return {}
    raw = read_user_file(path, LABELS_MAX_BYTES, "labels file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GoldenError(f"{path}: not UTF-8 text; fix or remove it") from None
    data = load_json(text, path, "fix or remove it")
    if not isinstance(data, dict):
        raise GoldenError(f"{path}: must map file names to labels (an integer class, or an object of output name -> class or list "
                          "of classes); fix or remove it")
    checked: dict[str, Label] = {}
    for name, value in data.items():
        try:
            label = check_label(value, f"{name!r}")
        except ValueError as exc:
            raise GoldenError(f"{path}: {exc}; fix or remove it") from None
        if label is not None:
            checked[name] = label
    return checked


def check_record_target(golden_dir: Path, inputs_dir: Path, force: bool) -> None:
    """Refuse, before any work, to write where recording would lose data.

    An existing golden set is replaced only with ``force`` (its reference is the approved truth;
    ``golden approve`` is the reviewed way to change it). A folder holding other files is never
    written into, and the inputs may not live inside the golden folder (replacing the set would
    delete them).
    """
    golden_dir, inputs_dir = Path(golden_dir), Path(inputs_dir)
    if golden_dir.exists() and not golden_dir.is_dir():
        raise GoldenError(f"{golden_dir}: exists and is not a directory; pass --golden a new or empty folder")
    inputs_real, golden_real = inputs_dir.resolve(), golden_dir.resolve()
    if inputs_real == golden_real or golden_real in inputs_real.parents:
        raise GoldenError(f"{inputs_dir}: the inputs are inside the golden folder {golden_dir}; keep them in a folder of their own")
    if not golden_dir.is_dir() or not any(p.name != LOCK_NAME for p in golden_dir.iterdir()):
        return  # new, or empty but for our lock file
    if not (golden_dir / MANIFEST).is_file():
        raise GoldenError(
            f"{golden_dir}: not empty and holds no {MANIFEST}, so it is not a golden set; refusing to write into it, "
            "pass --golden a new or empty folder"
        )
    try:  # only a set export-check wrote is ever replaced
        read_manifest(golden_dir)
    except GoldenError as exc:
        reason = str(exc).removeprefix(f"{golden_dir / MANIFEST}: ").split("; ")[0]
        raise GoldenError(
            f"{golden_dir}: its {MANIFEST} is not a golden set export-check can read ({reason}), so the folder is not ours; refusing "
            "to write into it (nothing was changed), pass --golden a new or empty folder"
        ) from None
    if not force:
        raise GoldenError(
            f"{golden_dir}: already holds a golden set; to adopt a new checkpoint's logits run `export-check golden approve`, "
            "to replace the whole set pass --force"
        )


def record_golden(
    checkpoint: Path, arch: str, arch_kwargs: dict[str, Any], arch_root: Path | None, golden_dir: Path, inputs_dir: Path,
    preprocess: Preprocess | None, threads: int, batch_size: int, force: bool = False,
    signature_settings: SignatureSettings | None = None, calibration: int | CalibrationSplit | None = None,
    notes: list[str] | None = None,
) -> GoldenSet:
    """Decode every input, run the eager model on it and write a new golden set atomically.

    ``calibration``: the calibration split to record (:func:`calibration_split`; default: half the
    set, at most 32 samples, by content sha256). ``notes`` gets what the user should know of reading
    the checkpoint (the wrapper key its state_dict was under).

    Format 2 when ``inputs_dir`` holds sample archives (``.npz``/``.safetensors``), when the model
    returns anything but one 2-D tensor, or when ``signature_settings`` declares inputs or outputs;
    format 1 otherwise, exactly as before format 2 existed.
    """
    settings = signature_settings or SignatureSettings()
    archives = sample_files(inputs_dir)
    if archives:
        return _record_samples(checkpoint, arch, arch_kwargs, arch_root, golden_dir, inputs_dir, archives, threads, batch_size, force, settings,
                               calibration, notes)
    paths = image_files(inputs_dir)
    check_record_target(golden_dir, inputs_dir, force)
    check_distinct_names((p.name for p in paths), inputs_dir)
    labels = _labels(inputs_dir)
    if preprocess is None and any(not f.name.lower().endswith(".npy") for f in paths):
        raise UsageError(
            f"{inputs_dir}: holds images, so say how to preprocess them: --size (and --resize/--mode/--mean/--std) "
            "or a preprocess table in [tool.export-check]"
        )
    declared = bool(settings.inputs or settings.outputs)
    with golden_lock(golden_dir), pinned_threads(threads):
        check_record_target(golden_dir, inputs_dir, force)  # again, now that no other writer can change it
        model = load_model(checkpoint, arch, arch_kwargs, arch_root, notes)
        decoded = _decoded_inputs(paths, labels, preprocess, inputs_dir)
        first = list(islice(decoded, batch_size))
        if not declared and _returns_one_matrix(model, [a for _, a in first], checkpoint):
            return _record_streaming(golden_dir, model, first, decoded, preprocess, batch_size,
                                     _model_info(checkpoint, arch, arch_kwargs), calibration)
        # format 2 with the one input of format 1
        unknown = [n for n in settings.inputs if n != INPUT]
        if unknown:
            raise GoldenError(f"[tool.export-check.model-inputs.{unknown[0]}]: the inputs are images or .npy tensors, so the model "
                              f"has one input, named {INPUT!r}; fix the name")
        inputs = (settings.apply_input(InputSpec(INPUT)),)
        new_inputs: list[NewInput] = []  # their bytes (the files as read), filled as the samples stream past eager

        def samples() -> Iterator[dict[str, np.ndarray]]:
            for item, array in chain(first, decoded):
                new_inputs.append(item)
                yield conform_sample({INPUT: array}, inputs, inputs_dir / item.name)

        return _write_v2(golden_dir, model, samples(), inputs, new_inputs, preprocess, settings, checkpoint, arch,
                         arch_kwargs, batch_size, calibration_split(len(paths), calibration, golden_dir))


def _decoded_inputs(paths: Sequence[Path], labels: Mapping[str, Label], preprocess: Preprocess | None,
                    inputs_dir: Path) -> Iterator[tuple[NewInput, np.ndarray]]:
    """Each input read once (a regular file, bounded) and decoded from those very bytes; every one
    must decode to the first one's shape."""
    shape: tuple[int, ...] | None = None
    first = ""
    for path in paths:
        item = NewInput(name=path.name, data=read_user_file(path, FILE_MAX_BYTES, "input"), label=labels.get(path.name))
        array = decode_input(item.data, item.name, preprocess, inputs_dir / item.name)
        if shape is None:
            shape, first = array.shape, item.name
        elif array.shape != shape:
            raise GoldenError(f"{inputs_dir / item.name}: decodes to shape {array.shape} but {first} to {shape}; "
                              "every input must have one shape")
        yield item, array


def _record_streaming(golden_dir: Path, model: Any, first: list[tuple[NewInput, np.ndarray]],
                      rest: Iterator[tuple[NewInput, np.ndarray]], preprocess: Preprocess | None, batch_size: int,
                      info: dict[str, Any], calibration: int | CalibrationSplit | None) -> GoldenSet:
    """Format 1, a batch at a time: store the batch's inputs, keep its logits, read the next batch."""
    from ..artifacts._heap import mapped_large_blocks

    rows = []
    # Each batch's large blocks (decoded images, the batch, activations) mapped apart from the heap:
    # without this the heap grew with the number of inputs (+483 MB for 2,048 images of 224x224 over
    # 32; now +33 MB; benchmarks/record_memory.py, artifacts/_heap.py).
    with writing(golden_dir) as writer, mapped_large_blocks():
        chunk = first
        while chunk:
            for item, _ in chunk:
                writer.add(item)
            rows.append(_rows_of(model, np.stack([array for _, array in chunk])))
            chunk = list(islice(rest, batch_size))
        reference = np.concatenate(rows)
        if reference.size == 0:
            raise GoldenError(f"{info['checkpoint']}: the model's output has no values (shape {reference.shape}): a comparison over "
                              "nothing would pass; return logits with values")
        finite_or_raise(reference, str(info["checkpoint"]))
        split = calibration_split(len(reference), calibration, golden_dir)
        return writer.commit_v1(preprocess, reference, _recording(model, batch_size, split), info, library_versions())


def _returns_one_matrix(model: Any, arrays: Sequence[np.ndarray], checkpoint: Path) -> bool:
    """Whether the model's output for the first batch is one 2-D tensor, ``(batch, classes)``: format 1
    holds exactly that. Any other rank (``(batch,)``, ``(batch, 3, 4)``) is recorded in format 2, which
    keeps each sample's shape as it is (format 1 stored it flattened to 2-D, and the next check failed
    on the shape)."""
    try:
        out = EagerRunner(model).call({INPUT: np.stack(arrays)})
    except ArtifactError as exc:
        raise GoldenError(f"{checkpoint}: {exc}") from None
    except Exception as exc:
        raise GoldenError(f"{checkpoint}: the model fails on the golden inputs ({describe_exception(exc)}); "
                          "check that --arch and the inputs match the model") from None
    return (hasattr(out, "detach") or isinstance(out, np.ndarray)) and getattr(out, "ndim", 0) == 2


def _recording(model: Any, batch_size: int, calibration: CalibrationSplit) -> dict[str, Any]:
    # load_model returns the module after .eval(): the mode the eager model ran in while recording
    return {"batch_size": batch_size, "mode": "train" if getattr(model, "training", False) else "eval",
            "calibration": calibration.to_json()}


def calibration_split(samples: int, calibration: int | CalibrationSplit | None, where: Path) -> CalibrationSplit:
    """The split to record: ``calibration`` samples by content sha256 (an int), a split as given, or the
    default (half the set, at most 32). Too many for the set is a GoldenError naming it."""
    if calibration is None:
        return default_calibration(samples)
    split = calibration if isinstance(calibration, CalibrationSplit) else CalibrationSplit("sha256", calibration)
    if split.rule != "names" and not 0 <= split.count <= samples:
        raise GoldenError(f"{where}: a calibration split of {split.count} samples does not fit a set of {samples}; "
                          f"choose 0 to {samples} (fewer than {samples}: the static int8 kinds are judged on the rest)")
    return split


def _write_v2(
    golden_dir: Path, model: Any, samples: Iterable[Mapping[str, np.ndarray]], inputs: tuple[InputSpec, ...], new_inputs: Sequence[NewInput],
    preprocess: Preprocess | None, settings: SignatureSettings, checkpoint: Path, arch: str, arch_kwargs: dict[str, Any], batch_size: int,
    calibration: CalibrationSplit,
) -> GoldenSet:
    from ..artifacts._heap import mapped_large_blocks

    labels = [item.label for item in new_inputs if isinstance(item.label, int)]  # a class per sample (not per position)
    whys: dict[str, str] = {}
    with mapped_large_blocks():  # as _record_streaming's batches
        outputs, reference = run_outputs(model, samples, inputs, settings, checkpoint, batch_size, labels=labels, whys=whys)
    signature = Signature(inputs=inputs, outputs=outputs)
    # the evidence each default kind was chosen on (golden.evidence), for `golden record` to say: the model is not at hand later
    evidence = {n: w for n, w in whys.items() if w.startswith("evidence: ")}
    recording = {**_recording(model, batch_size, calibration), **({"kinds": evidence} if evidence else {})}
    return write_golden_v2(golden_dir, new_inputs, preprocess, signature, reference, recording,
                           _model_info(checkpoint, arch, arch_kwargs), library_versions())


def _record_samples(
    checkpoint: Path, arch: str, arch_kwargs: dict[str, Any], arch_root: Path | None, golden_dir: Path, inputs_dir: Path,
    archives: list[Path], threads: int, batch_size: int, force: bool, settings: SignatureSettings,
    calibration: int | CalibrationSplit | None = None, notes: list[str] | None = None,
) -> GoldenSet:
    """Format 2 from a folder of sample archives, one per sample, each holding every named input."""
    others = sorted(p.name for p in inputs_dir.iterdir() if p.is_file() and p.suffix.lower() in (*IMAGE_SUFFIXES, TENSOR_SUFFIX))
    if others:
        raise GoldenError(f"{inputs_dir}: holds sample archives ({archives[0].name}) and images or .npy tensors ({others[0]}); "
                          "keep one kind of sample per folder (an .npz per sample holds every input)")
    check_record_target(golden_dir, inputs_dir, force)
    check_distinct_names((p.name for p in archives), inputs_dir)
    labels = _labels(inputs_dir)
    with golden_lock(golden_dir), pinned_threads(threads):
        check_record_target(golden_dir, inputs_dir, force)  # again, now that no other writer can change it
        new_inputs = [NewInput(name=f.name, data=read_user_file(f, FILE_MAX_BYTES, "sample"), label=labels.get(f.name)) for f in archives]
        raw = [read_sample(item.data, item.name, inputs_dir / item.name) for item in new_inputs]
        model = load_model(checkpoint, arch, arch_kwargs, arch_root, notes)
        inputs = input_specs(model, raw, archives, settings)
        samples = [conform_sample(arrays, inputs, path) for arrays, path in zip(raw, archives, strict=True)]
        return _write_v2(golden_dir, model, samples, inputs, new_inputs, None, settings, checkpoint, arch, arch_kwargs, batch_size,
                         calibration_split(len(samples), calibration, golden_dir))


def describe_outputs(golden: GoldenSet) -> str:
    """A format-2 set's reference for people: ``outputs boxes float32 (4, 5), scores float32 (10,)``
    (each output's dtype and per-sample shapes, without the batch axis)."""
    parts = []
    for spec in golden.signature.outputs:
        record = golden.reference_records[spec.name]
        shown = " or ".join(str(shape) for shape in record.shapes)
        parts.append(f"{spec.name} {record.dtype} {shown}" + ("" if spec.compared else " (not compared)"))
    return "outputs " + ", ".join(parts)


def describe_kinds(golden: GoldenSet, settings: SignatureSettings) -> str:
    """Each compared output's kind, why it got it (the settings, or the rule of ``signature.choose_kind`` on the
    recorded values) and the setting that changes it: ``golden record``'s second line."""
    said = []
    for spec in golden.signature.outputs:
        if not spec.compared:
            continue
        record = golden.reference_records[spec.name]
        evidence = golden.recording.get("kinds", {}).get(spec.name)
        if "kind" in settings.outputs.get(spec.name, {}):
            why = "settings"
        elif evidence is not None:
            why = evidence
        else:
            why = kind_of(spec.name, len(record.shapes[0]) + 1, record.dtype, golden.reference_samples()[spec.name]).why
        said.append(kind_said(spec, why))
    return (f"output kinds: {'; '.join(said)}. To change one: kind = \"logits\", \"sequence-logits\" or \"values\" in "
            "[tool.export-check.outputs.NAME]")


_KIND_TEXT = {"missing": "MISSING", "changed": "CHANGED", "undecodable": "UNDECODABLE", "broken": "BROKEN", "lfs-pointer": "LFS POINTER"}


def verify(golden_dir: Path) -> tuple[bool, list[str]]:
    """``(intact, lines)``: one line per problem naming the file, then notes on files the manifest does not list."""
    intact, lines = _verify_lines(golden_dir)
    return intact, [one_line(line) for line in lines]  # a file name of any bytes stays one printable line


def _verify_lines(golden_dir: Path) -> tuple[bool, list[str]]:
    golden, problems = verify_golden(golden_dir)
    if golden is None:
        return False, [f"golden set {golden_dir}: BROKEN", f"  {problems[0].what}"]
    lines = []
    if problems:
        lines.append(f"golden set {golden_dir}: FAILED, {len(problems)} problem(s) in {len(golden)} inputs")
        for problem in problems:
            shown = f"{problem.name} ({problem.file})" if problem.name and problem.name != problem.file else problem.file
            what = problem.what.removeprefix(f"{golden_dir / problem.file}: ")  # the line names the file already
            lines.append(f"  {_KIND_TEXT.get(problem.kind, problem.kind.upper()):<11} {shown}: {what}")
    elif golden.version == VERSION_1:
        lines.append(f"golden set {golden_dir}: OK ({len(golden)} inputs, reference {golden.reference_shape}, every hash matches)")
    else:
        lines.append(f"golden set {golden_dir}: OK ({len(golden)} inputs, {describe_outputs(golden)}, every hash matches)")
    for extra in unreferenced_files(golden):
        lines.append(f"  note: {extra} is not listed in {MANIFEST}; it is ignored (delete it, or re-record to include it)")
    return not problems, lines


class AccuracyDropRefused(GoldenError):
    """``approve_golden`` did not write: the new outputs lose more label accuracy than ``max_accuracy_drop``
    allows. ``diff`` is what approving would have changed (the CLI prints it before the refusal)."""

    exit_code = 1

    def __init__(self, message: str, diff: ApproveDiff | OutputsDiff) -> None:
        super().__init__(message)
        self.diff = diff


def _refuse_drop(diff: ApproveDiff | OutputsDiff, max_accuracy_drop: float | None, golden_dir: Path) -> None:
    """Raise :class:`AccuracyDropRefused` when the diff's label accuracy drops by more than ``max_accuracy_drop`` points."""
    if max_accuracy_drop is None or diff.accuracy is None:
        return
    old, new = diff.accuracy
    drop = 100.0 * (old - new)
    if drop > max_accuracy_drop:
        raise AccuracyDropRefused(f"{golden_dir}: not approved: accuracy on the golden labels drops {old:.1%} -> {new:.1%} ({drop:.2f} points, "
                                  f"more than max-accuracy-drop {max_accuracy_drop:g}); pass --accept-accuracy-drop to approve it anyway", diff)


def approve_golden(
    checkpoint: Path, arch: str, arch_kwargs: dict[str, Any], arch_root: Path | None, golden_dir: Path, threads: int, batch_size: int,
    dry_run: bool = False, signature_settings: SignatureSettings | None = None, calibration: int | CalibrationSplit | None = None,
    notes: list[str] | None = None, max_accuracy_drop: float | None = None,
) -> tuple[ApproveDiff | OutputsDiff, bool]:
    """Compute the new checkpoint's logits (format 2: outputs) on the (verified) golden inputs; unless
    ``dry_run`` or nothing changed, write them as the new reference. Returns the diff and whether it
    was written. A format-2 set keeps its inputs; its outputs' specs are kept, with the
    ``outputs`` settings applied over them (new outputs get their defaults). The calibration split is
    kept (a set that records none gets the default written), unless ``calibration`` gives a new one.
    ``max_accuracy_drop``: refuse (:class:`AccuracyDropRefused`, nothing written) new outputs whose
    accuracy on the golden labels is more than this many points below the old ones'."""
    with golden_lock(golden_dir):  # the whole read-modify-commit: no other writer in between
        golden = read_manifest(golden_dir)
        split = golden.calibration if calibration is None else calibration_split(len(golden), calibration, golden_dir)
        split = replace(split, recorded=True)
        # an unchanged reference is rewritten for a new split only, not for the default an older set lacks
        same_split = calibration is None or (golden.calibration.recorded and split.to_json() == golden.calibration.to_json())
        if golden.version != VERSION_1:
            return _approve_v2(golden, checkpoint, arch, arch_kwargs, arch_root, threads, batch_size, dry_run,
                               signature_settings or SignatureSettings(), split, same_split, notes, max_accuracy_drop)
        old = golden.reference()
        with pinned_threads(threads):
            model = load_model(checkpoint, arch, arch_kwargs, arch_root, notes)
            if golden.inputs and not _returns_one_matrix(model, [golden.load_input(golden.inputs[0])], checkpoint):
                raise GoldenError(f"{checkpoint}: the model does not return one (batch, classes) tensor, the one output the format-1 "
                                  f"golden set {golden_dir} holds; re-record it with `export-check golden record --force`, which keeps "
                                  "every output's shape")
            # each input read once, its hash checked on the bytes that are then decoded
            new = _eager_logits(model, (golden.load_input(item) for item in golden.inputs), batch_size)
        finite_or_raise(new, str(checkpoint))
        info = _model_info(checkpoint, arch, arch_kwargs)
        diff = diff_references(golden, old, new, info["checkpoint_sha256"])
        if dry_run or (diff.unchanged and diff.old_checkpoint_sha256 == diff.new_checkpoint_sha256 and same_split):
            return diff, False
        _refuse_drop(diff, max_accuracy_drop, golden_dir)
        # the inputs are kept as they were verified: a file swapped meanwhile keeps its old hash and fails verify
        write_golden(golden_dir, list(golden.inputs), golden.preprocess, new, info, library_versions(), _recording(model, batch_size, split))
        return diff, True


def _approve_v2(golden: GoldenSet, checkpoint: Path, arch: str, arch_kwargs: dict[str, Any], arch_root: Path | None, threads: int,
                batch_size: int, dry_run: bool, settings: SignatureSettings, split: CalibrationSplit,
                same_split: bool, notes: list[str] | None = None, max_accuracy_drop: float | None = None) -> tuple[OutputsDiff, bool]:
    old = golden.reference_samples()
    samples = [golden.load_sample(item) for item in golden.inputs]
    inputs = golden.signature.inputs
    with pinned_threads(threads):
        model = load_model(checkpoint, arch, arch_kwargs, arch_root, notes)
        outputs, new = run_outputs(model, samples, inputs, SignatureSettings(outputs=settings.outputs), checkpoint, batch_size,
                                   existing=golden.signature)
        recording = _recording(model, batch_size, split)
    signature = Signature(inputs=inputs, outputs=outputs)
    info = _model_info(checkpoint, arch, arch_kwargs)
    diff = diff_references(golden, old, new, info["checkpoint_sha256"], signature)
    if dry_run or (diff.unchanged and diff.old_checkpoint_sha256 == diff.new_checkpoint_sha256 and same_split):
        return diff, False
    _refuse_drop(diff, max_accuracy_drop, golden.root)
    write_golden_v2(golden.root, list(golden.inputs), golden.preprocess, signature, new, recording, info, library_versions())
    return diff, True


__all__ = [
    "AccuracyDropRefused", "lock_path", "record_golden", "check_record_target", "verify", "approve_golden",
    "diff_references", "describe_outputs", "ApproveDiff", "OutputsDiff",
]
