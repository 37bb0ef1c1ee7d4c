"""The golden set lifecycle behind ``export-check golden record|verify|approve``.

Golden data changes only here, on an explicit command, through :func:`exporter.golden.write_golden`
(content-addressed files, manifest replaced last and atomically).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint import build_model, load_state_dict, sha256_file
from .errors import GoldenError, UsageError
from .golden import NewInput, decode_input, finite_or_raise, image_files, read_manifest, verify_golden, write_golden
from .preprocess import Preprocess
from .versions import library_versions


def _floats(text: str | None, name: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"--{name} takes comma-separated numbers, got {text!r}") from None


def _size(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    parts = text.lower().split("x")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise UsageError(f"--size takes N or HxW, got {text!r}") from None
    if len(values) == 1:
        values = values * 2
    if len(values) != 2:
        raise UsageError(f"--size takes N or HxW, got {text!r}")
    return values[0], values[1]


def preprocess_from_args(
    size: str | None, resize: int | None, mode: str | None, mean: str | None, std: str | None, configured: dict[str, Any] | None
) -> Preprocess | None:
    """Command-line flags over ``[tool.export-check.preprocess]``; ``None`` when nothing says how (tensors only)."""
    data: dict[str, Any] = dict(configured or {})
    if size is not None:
        data["size"] = list(_size(size) or ())
    for key, value in (("resize", resize), ("mode", mode), ("mean", _floats(mean, "mean")), ("std", _floats(std, "std"))):
        if value is not None:
            data[key] = list(value) if isinstance(value, tuple) else value
    if not data:
        return None
    if "mode" in data and "mean" not in data and data["mode"] == "L":
        data.setdefault("mean", [0.5])
        data.setdefault("std", [0.5])
    try:
        return Preprocess.from_json(data)
    except ValueError as exc:
        raise UsageError(f"bad preprocessing ({exc}); fix --size/--resize/--mode/--mean/--std") from None


def _eager_logits(model: Any, arrays: Iterable[np.ndarray], batch_size: int) -> np.ndarray:
    import torch

    from .artifacts._common import as_logits

    outputs = []
    for batch in _batched(arrays, batch_size):
        with torch.inference_mode():
            outputs.append(as_logits(model(torch.from_numpy(batch)), "the eager model"))
    return np.concatenate(outputs)


def _batched(arrays: Iterable[np.ndarray], size: int) -> Iterator[np.ndarray]:
    chunk: list[np.ndarray] = []
    for array in arrays:
        chunk.append(array)
        if len(chunk) == size:
            yield np.stack(chunk)
            chunk = []
    if chunk:
        yield np.stack(chunk)


def _load_model(checkpoint: Path, arch: str, arch_kwargs: dict[str, Any], arch_root: Path | None) -> Any:
    state = load_state_dict(checkpoint)
    return build_model(arch, arch_kwargs, state, checkpoint, arch_root)


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


def record(
    checkpoint: Path, arch: str, arch_kwargs: dict[str, Any], arch_root: Path | None, golden_dir: Path, inputs_dir: Path,
    preprocess: Preprocess | None, threads: int, batch_size: int,
) -> int:
    from .pipeline import pinned_threads

    files = image_files(inputs_dir)
    labels = _labels(inputs_dir)
    if preprocess is None and any(not f.name.lower().endswith(".npy") for f in files):
        raise UsageError(f"{inputs_dir}: holds images, so say how to preprocess them: --size (and --resize/--mode/--mean/--std)")
    new_inputs = [NewInput(name=f.name, data=f.read_bytes(), label=labels.get(f.name)) for f in files]
    arrays = [decode_input(item.data, item.name, preprocess, inputs_dir / item.name) for item in new_inputs]
    with pinned_threads(threads):
        model = _load_model(checkpoint, arch, arch_kwargs, arch_root)
        reference = _eager_logits(model, arrays, batch_size)
    finite_or_raise(reference, str(checkpoint))
    write_golden(golden_dir, new_inputs, preprocess, reference, _model_info(checkpoint, arch, arch_kwargs), library_versions())
    print(f"recorded {len(new_inputs)} inputs and their reference logits {tuple(reference.shape)} into {golden_dir}")
    return 0


def verify(golden_dir: Path) -> int:
    golden, problems = verify_golden(golden_dir)
    if golden is None:
        print(f"golden set {golden_dir}: BROKEN\n  {problems[0].what}")
        return 1
    if problems:
        print(f"golden set {golden_dir}: {len(problems)} problem(s) in {len(golden)} inputs")
        for problem in problems:
            print(f"  {problem.file}: {problem.what}")
        return 1
    print(f"golden set {golden_dir}: OK ({len(golden)} inputs, reference {golden.reference_shape}, every hash matches)")
    return 0


def approve(
    checkpoint: Path, arch: str, arch_kwargs: dict[str, Any], arch_root: Path | None, golden_dir: Path, threads: int, batch_size: int, dry_run: bool
) -> int:
    from .golden import load_golden
    from .pipeline import pinned_threads

    golden = load_golden(golden_dir)
    old = golden.reference()
    with pinned_threads(threads):
        model = _load_model(checkpoint, arch, arch_kwargs, arch_root)
        new = _eager_logits(model, (golden.load_input(item) for item in golden.inputs), batch_size)
    finite_or_raise(new, str(checkpoint))
    if new.shape != old.shape:
        print(f"reference shape changes {old.shape} -> {new.shape}")
    else:
        _print_diff(golden, old, new)
    if dry_run:
        print("dry run: golden set unchanged")
        return 0
    new_inputs = [NewInput(name=item.name, data=(golden.root / item.file).read_bytes(), label=item.label) for item in golden.inputs]
    write_golden(golden_dir, new_inputs, golden.preprocess, new, _model_info(checkpoint, arch, arch_kwargs), library_versions())
    print(f"approved: {golden_dir} now holds the logits of {checkpoint}")
    return 0


def _print_diff(golden: Any, old: np.ndarray, new: np.ndarray) -> None:
    mae = float(np.mean(np.abs(new.astype(np.float64) - old)))
    old_top, new_top = old.argmax(axis=1), new.argmax(axis=1)
    changed = np.flatnonzero(old_top != new_top)
    print(f"MAE old->new reference: {mae:.3e}; top-1 changes on {len(changed)} of {len(old)} inputs")
    labels = golden.labels()
    for i in changed:
        label = labels[i]
        tail = f" (label {label})" if label is not None else ""
        print(f"  {golden.inputs[i].name}: top-1 {old_top[i]} -> {new_top[i]}{tail}")
    if all(label is not None for label in labels):
        truth = np.asarray(labels)
        print(f"accuracy on labels: {np.mean(old_top == truth):.1%} -> {np.mean(new_top == truth):.1%}")
    sys.stdout.flush()


__all__ = ["record", "verify", "approve", "preprocess_from_args", "read_manifest"]
