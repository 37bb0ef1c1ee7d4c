"""What approving new weights would change in a golden set's references: per input (format 1) or
per output and sample (format 2), as typed diffs that the CLI and the pytest plugin show."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np

from ..errors import one_line
from ..signature import OutputSpec, Signature
from .discover import LOGITS_KINDS, sample_axis
from .goldenset import GoldenSet


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


@dataclass(frozen=True)
class SampleChange:
    """One sample whose top-1 (per position, for sequence logits) changes in one output."""

    name: str
    old: tuple[int, ...]
    new: tuple[int, ...]
    positions: int  # how many positions changed (1 for a logits output)
    label: int | None
    mae: float

    def line(self) -> str:
        tail = f", label {self.label}" if self.label is not None else ""
        if len(self.old) == 1:
            return f"  {self.name}: top-1 {self.old[0]} -> {self.new[0]} (MAE {self.mae:.3e}{tail})"
        return f"  {self.name}: top-1 changes at {self.positions} of {len(self.old)} positions (MAE {self.mae:.3e}{tail})"


@dataclass(frozen=True)
class OutputChange:
    """What adopting the new outputs changes in one output of a format-2 set."""

    name: str
    kind: str
    status: str  # "compared", "reshaped" (a sample's shape or the dtype changes), "new", "removed"
    mae: float | None = None
    max_abs: float | None = None
    changes: tuple[SampleChange, ...] | None = None  # the logits kinds: samples whose top-1 changes
    old: str = ""  # "float32 (10,)" when reshaped
    new: str = ""
    compared: bool = True

    @property
    def unchanged(self) -> bool:
        return self.status == "compared" and self.max_abs == 0.0

    def lines(self, samples: int) -> list[str]:
        head = f"output {self.name} [{self.kind}{'' if self.compared else ', not compared'}]"
        if self.status == "new":
            return [f"{head}: new ({self.new})"]
        if self.status == "removed":
            return [f"{head}: removed (was {self.old})"]
        if self.status == "reshaped":
            return [f"{head}: changes {self.old} -> {self.new}; every sample's value is replaced"]
        line = f"{head}: MAE {self.mae:.3e} (max |diff| {self.max_abs:.3e})"
        if self.changes is None:
            return [line]
        return [f"{line}; top-1 changes on {len(self.changes)} of {samples} inputs", *(c.line() for c in self.changes)]


@dataclass(frozen=True)
class OutputsDiff:
    """What adopting a new checkpoint's outputs changes in a format-2 golden set, output by output."""

    golden_dir: Path
    inputs: int
    outputs: tuple[OutputChange, ...]
    signature_changes: tuple[str, ...]  # e.g. "output scores: kind logits -> values"
    accuracy: tuple[float, float] | None  # old -> new top-1 accuracy of the first compared logits output, when every input has a label
    old_checkpoint_sha256: str | None
    new_checkpoint_sha256: str

    @property
    def unchanged(self) -> bool:
        return not self.signature_changes and all(o.unchanged for o in self.outputs)

    def lines(self) -> list[str]:
        old_sha = (self.old_checkpoint_sha256 or "unknown")[:12]
        out = [f"checkpoint sha256 {old_sha} -> {self.new_checkpoint_sha256[:12]}"]
        for change in self.outputs:
            out.extend(change.lines(self.inputs))
        out.extend(self.signature_changes)
        if self.accuracy is not None:
            out.append(f"accuracy on labels: {self.accuracy[0]:.1%} -> {self.accuracy[1]:.1%}")
        return out


@overload
def diff_references(golden: GoldenSet, old: np.ndarray, new: np.ndarray, new_checkpoint_sha256: str,
                    signature: None = None) -> ApproveDiff: ...


@overload
def diff_references(golden: GoldenSet, old: Mapping[str, Sequence[np.ndarray]], new: Mapping[str, Sequence[np.ndarray]],
                    new_checkpoint_sha256: str, signature: Signature) -> OutputsDiff: ...


def diff_references(golden: GoldenSet, old: Any, new: Any, new_checkpoint_sha256: str, signature: Signature | None = None) -> Any:
    """The diff approving ``new`` would make: format 1, the logits arrays (:class:`ApproveDiff`);
    format 2, every output's per-sample values with the new ``signature`` (:class:`OutputsDiff`)."""
    if signature is not None:
        return _diff_outputs(golden, old, new, new_checkpoint_sha256, signature)
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
        TopChange(one_line(golden.inputs[i].name), int(old_top[i]), int(new_top[i]), labels[i], float(per_image[i]))
        for i in np.flatnonzero(old_top != new_top)
    )
    accuracy = None
    if labels and all(label is not None for label in labels):
        truth = np.asarray(labels)
        accuracy = (float(np.mean(old_top == truth)), float(np.mean(new_top == truth)))
    return ApproveDiff(mae=float(diff.mean()), max_abs=float(diff.max()), changes=changes, accuracy=accuracy, **common)


def _shapes_text(values: Sequence[np.ndarray]) -> str:
    shapes = sorted({tuple(v.shape) for v in values})
    return f"{values[0].dtype} {' or '.join(str(s) for s in shapes)}" if values else "nothing"


def _top1(value: np.ndarray, spec: OutputSpec) -> np.ndarray:
    """A sample's top-1 class per position (one position for a logits output)."""
    axis = sample_axis(spec.class_axis, value.ndim + 1, spec.batch_axis)
    return np.asarray(value.argmax(axis=axis)).reshape(-1)


def _diff_outputs(golden: GoldenSet, old: Mapping[str, Sequence[np.ndarray]], new: Mapping[str, Sequence[np.ndarray]],
                  new_checkpoint_sha256: str, signature: Signature) -> OutputsDiff:
    labels = golden.labels()
    changes: list[OutputChange] = []
    accuracy = None
    for spec in signature.outputs:
        values = new[spec.name]
        if spec.name not in old:
            changes.append(OutputChange(spec.name, spec.kind, "new", new=_shapes_text(values), compared=spec.compared))
            continue
        before = old[spec.name]
        if len(before) != len(values) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(before, values, strict=False)):
            changes.append(OutputChange(spec.name, spec.kind, "reshaped", old=_shapes_text(before), new=_shapes_text(values),
                                        compared=spec.compared))
            continue
        total, count, peak = 0.0, 0, 0.0
        per_sample = []
        for a, b in zip(before, values, strict=True):
            diff = np.abs(b.astype(np.float64) - a.astype(np.float64))
            total, count = total + float(diff.sum()), count + diff.size
            peak = max(peak, float(diff.max()) if diff.size else 0.0)
            per_sample.append(float(diff.mean()) if diff.size else 0.0)
        top: tuple[SampleChange, ...] | None = None
        if spec.kind in LOGITS_KINDS:
            found = []
            old_tops, new_tops = [_top1(a, spec) for a in before], [_top1(b, spec) for b in values]
            for i, (a, b) in enumerate(zip(old_tops, new_tops, strict=True)):
                moved = int(np.count_nonzero(a != b))
                if moved:
                    found.append(SampleChange(one_line(golden.inputs[i].name), tuple(int(x) for x in a), tuple(int(x) for x in b), moved, labels[i],
                                              per_sample[i]))
            top = tuple(found)
            if (accuracy is None and spec.compared and spec.kind == "logits" and labels and all(label is not None for label in labels)
                    and all(t.size == 1 for t in old_tops + new_tops)):
                truth = np.asarray(labels)
                accuracy = (float(np.mean(np.concatenate(old_tops) == truth)), float(np.mean(np.concatenate(new_tops) == truth)))
        changes.append(OutputChange(spec.name, spec.kind, "compared", mae=total / max(count, 1), max_abs=peak, changes=top,
                                    compared=spec.compared))
    for name, before in old.items():
        if name not in signature.output_names:
            changes.append(OutputChange(name, golden.signature.output(name).kind, "removed", old=_shapes_text(before)))
    signature_changes = []
    if signature.inputs != golden.signature.inputs:
        signature_changes.append("inputs: " + ", ".join(str(i.to_json()) for i in signature.inputs))
    for spec in signature.outputs:
        if spec.name in golden.signature.output_names:
            was = golden.signature.output(spec.name)
            for key, value in spec.to_json().items():
                if was.to_json()[key] != value:
                    signature_changes.append(f"output {spec.name}: {key.replace('_', ' ')} {was.to_json()[key]} -> {value}")
    recorded = golden.model.get("checkpoint_sha256")
    return OutputsDiff(golden_dir=golden.root, inputs=len(golden), outputs=tuple(changes), signature_changes=tuple(signature_changes),
                       accuracy=accuracy, old_checkpoint_sha256=recorded if isinstance(recorded, str) else None,
                       new_checkpoint_sha256=new_checkpoint_sha256)
