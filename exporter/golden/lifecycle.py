"""The golden set lifecycle behind ``export-check golden record|verify|approve``, as typed results.

Golden data changes only here, on an explicit command, through :func:`exporter.golden.store.write_golden`
(content-addressed files, manifest replaced last and atomically). Nothing here prints: the
command line (``exporter.cli``) and the pytest plugin show the results.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GoldenError, UsageError
from ..files import sha256_file
from ..model import eager_logits, load_model, pinned_threads
from ..versions import library_versions
from .inputs import Preprocess, decode_input, finite_or_raise, image_files
from .manifest import MANIFEST, GoldenSet, load_golden, unreferenced_files, verify_golden
from .store import NewInput, write_golden


def _eager_logits(model: Any, arrays: Iterable[np.ndarray], batch_size: int) -> np.ndarray:
    return np.concatenate([eager_logits(model, batch) for batch in _batched(arrays, batch_size)])


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


def _labels(inputs_dir: Path) -> dict[str, int]:
    path = inputs_dir / "labels.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise GoldenError(f"{path}: not a readable JSON object of file name -> label ({exc}); fix or remove it") from None
    if not isinstance(data, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in data.values()):
        raise GoldenError(f"{path}: must map file names to integer labels; fix or remove it")
    return data


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
    if not golden_dir.is_dir() or not any(golden_dir.iterdir()):
        return
    if not (golden_dir / MANIFEST).is_file():
        raise GoldenError(
            f"{golden_dir}: not empty and holds no {MANIFEST}, so it is not a golden set; refusing to write into it, "
            "pass --golden a new or empty folder"
        )
    if not force:
        raise GoldenError(
            f"{golden_dir}: already holds a golden set; to adopt a new checkpoint's logits run `export-check golden approve`, "
            "to replace the whole set pass --force"
        )


def record_golden(
    checkpoint: Path, arch: str, arch_kwargs: dict[str, Any], arch_root: Path | None, golden_dir: Path, inputs_dir: Path,
    preprocess: Preprocess | None, threads: int, batch_size: int, force: bool = False,
) -> GoldenSet:
    """Decode every input, run the eager model on it and write a new golden set atomically."""

    files = image_files(inputs_dir)
    check_record_target(golden_dir, inputs_dir, force)
    labels = _labels(inputs_dir)
    if preprocess is None and any(not f.name.lower().endswith(".npy") for f in files):
        raise UsageError(
            f"{inputs_dir}: holds images, so say how to preprocess them: --size (and --resize/--mode/--mean/--std) "
            "or a preprocess table in [tool.export-check]"
        )
    new_inputs = [NewInput(name=f.name, data=f.read_bytes(), label=labels.get(f.name)) for f in files]
    arrays = [decode_input(item.data, item.name, preprocess, inputs_dir / item.name) for item in new_inputs]
    for item, array in zip(new_inputs, arrays, strict=True):
        if array.shape != arrays[0].shape:
            raise GoldenError(
                f"{inputs_dir / item.name}: decodes to shape {array.shape} but {new_inputs[0].name} to {arrays[0].shape}; "
                "every input must have one shape"
            )
    with pinned_threads(threads):
        model = load_model(checkpoint, arch, arch_kwargs, arch_root)
        reference = _eager_logits(model, arrays, batch_size)
    finite_or_raise(reference, str(checkpoint))
    return write_golden(golden_dir, new_inputs, preprocess, reference, _model_info(checkpoint, arch, arch_kwargs), library_versions())


_KIND_TEXT = {"missing": "MISSING", "changed": "CHANGED", "undecodable": "UNDECODABLE", "broken": "BROKEN"}


def verify(golden_dir: Path) -> tuple[bool, list[str]]:
    """``(intact, lines)``: one line per problem naming the file, then notes on files the manifest does not list."""
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
    else:
        lines.append(f"golden set {golden_dir}: OK ({len(golden)} inputs, reference {golden.reference_shape}, every hash matches)")
    for extra in unreferenced_files(golden):
        lines.append(f"  note: {extra} is not listed in {MANIFEST}; it is ignored (delete it, or re-record to include it)")
    return not problems, lines


@dataclass(frozen=True)
class TopChange:
    name: str
    old: int
    new: int
    label: int | None
    mae: float


@dataclass(frozen=True)
class ApproveDiff:
    """What adopting a new checkpoint's logits changes in a golden set."""

    golden_dir: Path
    inputs: int
    old_shape: tuple[int, ...]
    new_shape: tuple[int, ...]
    mae: float | None  # None when the shapes differ
    max_abs: float | None
    changes: tuple[TopChange, ...]  # inputs whose top-1 class changes
    accuracy: tuple[float, float] | None  # old -> new top-1 accuracy, when every input has a label
    old_checkpoint_sha256: str | None
    new_checkpoint_sha256: str

    @property
    def unchanged(self) -> bool:
        return self.old_shape == self.new_shape and self.mae == 0.0

    def lines(self) -> list[str]:
        if self.old_shape != self.new_shape:
            return [f"reference shape changes {self.old_shape} -> {self.new_shape}; every input's logits are replaced"]
        old_sha = (self.old_checkpoint_sha256 or "unknown")[:12]
        out = [
            f"checkpoint sha256 {old_sha} -> {self.new_checkpoint_sha256[:12]}",
            f"MAE old->new reference: {self.mae:.3e} (max |diff| {self.max_abs:.3e}); "
            f"top-1 changes on {len(self.changes)} of {self.inputs} inputs",
        ]
        for change in self.changes:
            tail = f", label {change.label}" if change.label is not None else ""
            out.append(f"  {change.name}: top-1 {change.old} -> {change.new} (MAE {change.mae:.3e}{tail})")
        if self.accuracy is not None:
            out.append(f"accuracy on labels: {self.accuracy[0]:.1%} -> {self.accuracy[1]:.1%}")
        return out


def diff_references(golden: GoldenSet, old: np.ndarray, new: np.ndarray, new_checkpoint_sha256: str) -> ApproveDiff:
    recorded = golden.model.get("checkpoint_sha256")
    common: dict[str, Any] = dict(
        golden_dir=golden.root, inputs=len(golden), old_shape=tuple(old.shape), new_shape=tuple(new.shape),
        old_checkpoint_sha256=recorded if isinstance(recorded, str) else None, new_checkpoint_sha256=new_checkpoint_sha256,
    )
    if old.shape != new.shape:
        return ApproveDiff(mae=None, max_abs=None, changes=(), accuracy=None, **common)
    diff = np.abs(new.astype(np.float64) - old.astype(np.float64)).reshape(len(old), -1)
    per_image = diff.mean(axis=1)
    old_top, new_top = old.reshape(len(old), -1).argmax(axis=1), new.reshape(len(new), -1).argmax(axis=1)
    labels = golden.labels()
    changes = tuple(
        TopChange(golden.inputs[i].name, int(old_top[i]), int(new_top[i]), labels[i], float(per_image[i]))
        for i in np.flatnonzero(old_top != new_top)
    )
    accuracy = None
    if labels and all(label is not None for label in labels):
        truth = np.asarray(labels)
        accuracy = (float(np.mean(old_top == truth)), float(np.mean(new_top == truth)))
    return ApproveDiff(mae=float(diff.mean()), max_abs=float(diff.max()), changes=changes, accuracy=accuracy, **common)


def approve_golden(
    checkpoint: Path, arch: str, arch_kwargs: dict[str, Any], arch_root: Path | None, golden_dir: Path, threads: int, batch_size: int,
    dry_run: bool = False,
) -> tuple[ApproveDiff, bool]:
    """Compute the new checkpoint's logits on the (verified) golden inputs; unless ``dry_run`` or
    nothing changed, write them as the new reference. Returns the diff and whether it was written."""
    golden = load_golden(golden_dir)
    old = golden.reference()
    with pinned_threads(threads):
        model = load_model(checkpoint, arch, arch_kwargs, arch_root)
        new = _eager_logits(model, (golden.load_input(item) for item in golden.inputs), batch_size)
    finite_or_raise(new, str(checkpoint))
    info = _model_info(checkpoint, arch, arch_kwargs)
    diff = diff_references(golden, old, new, info["checkpoint_sha256"])
    if dry_run or (diff.unchanged and diff.old_checkpoint_sha256 == diff.new_checkpoint_sha256):
        return diff, False
    new_inputs = [NewInput(name=item.name, data=(golden.root / item.file).read_bytes(), label=item.label) for item in golden.inputs]
    write_golden(golden_dir, new_inputs, golden.preprocess, new, info, library_versions())
    return diff, True


__all__ = ["record_golden", "check_record_target", "verify", "approve_golden", "diff_references", "ApproveDiff", "TopChange"]
