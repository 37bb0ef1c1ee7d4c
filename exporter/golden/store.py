"""Writing a golden set: content-addressed data files, the manifest replaced atomically last.

Data files are content-addressed and never overwritten; ``manifest.json`` is replaced atomically
last, so a writer killed at any point leaves either the old or the new set, both complete. Files
of earlier sets that the new manifest no longer names are then removed (only files of our own
naming: ``inputs/``, ``reference-*.npy`` and ``reference-*.npz``).

``write_golden`` writes format 1 (one float input, the logits); ``write_golden_v2`` format 2 (a
signature, one sample archive per input entry, the per-sample references in one ``.npz``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from .. import files
from ..errors import GoldenError
from ..signature import Signature
from .inputs import Preprocess
from .manifest import FORMAT, INPUTS_DIR, MANIFEST, REFERENCE_GLOBS, VERSION_1, VERSION_2, GoldenSet, OutputRecord, parse_manifest, sha256_bytes


def _write_atomic(path: Path, data: bytes) -> None:
    # One module-level writer, so that the fault tests can kill the process between writes.
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_bytes(path, data)


def _content_name(name: str, data: bytes) -> str:
    stem, suffix = os.path.splitext(os.path.basename(name))
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", stem)[:80] or "input"
    return f"{stem}.{sha256_bytes(data)[:12]}{suffix.lower()}"


@dataclass(frozen=True)
class NewInput:
    name: str
    data: bytes
    label: int | None = None


def write_golden(
    root: Path,
    inputs: Sequence[NewInput],
    preprocess: Preprocess | None,
    reference: np.ndarray,
    model: dict[str, Any],
    recorded_with: dict[str, str],
) -> GoldenSet:
    """Write a golden set into ``root`` so that a crash at any point leaves the previous one intact."""
    if len(inputs) == 0:
        raise GoldenError(f"{root}: no inputs to record")
    if reference.shape[0] != len(inputs):
        raise ValueError("one reference row per input")
    root.mkdir(parents=True, exist_ok=True)
    entries = _write_inputs(root, inputs)
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(reference, dtype=np.float32), allow_pickle=False)
    ref_bytes = buf.getvalue()
    ref_rel = f"reference-{sha256_bytes(ref_bytes)[:12]}.npy"
    if not (root / ref_rel).is_file():
        _write_atomic(root / ref_rel, ref_bytes)
    manifest = {
        "format": FORMAT,
        "version": VERSION_1,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "preprocess": preprocess.to_json() if preprocess else None,
        "inputs": entries,
        "reference": {"file": ref_rel, "sha256": sha256_bytes(ref_bytes), "shape": list(reference.shape), "dtype": "float32"},
        "model": model,
        "recorded_with": recorded_with,
    }
    return _commit(root, manifest, {e["file"] for e in entries} | {ref_rel})


def _write_inputs(root: Path, inputs: Sequence[NewInput]) -> list[dict[str, Any]]:
    """Each input's file, content-addressed under ``inputs/`` (an identical file already there is kept)."""
    entries = []
    for item in inputs:
        rel = f"{INPUTS_DIR}/{_content_name(item.name, item.data)}"
        target = root / rel
        if not (target.is_file() and not target.is_symlink() and sha256_bytes(target.read_bytes()) == sha256_bytes(item.data)):
            _write_atomic(target, item.data)
        entry: dict[str, Any] = {"name": item.name, "file": rel, "sha256": sha256_bytes(item.data)}
        if item.label is not None:
            entry["label"] = int(item.label)
        entries.append(entry)
    return entries


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """An ``.npz`` archive of ``arrays`` whose bytes depend on the arrays alone (``numpy.savez``
    stamps each member with the current time, which would change the content address)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key, array in arrays.items():
            member = io.BytesIO()
            np.save(member, np.ascontiguousarray(array), allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0)), member.getvalue())
    return buf.getvalue()


def write_golden_v2(
    root: Path,
    inputs: Sequence[NewInput],
    preprocess: Preprocess | None,
    signature: Signature,
    reference: Mapping[str, Sequence[np.ndarray]],
    recording: dict[str, Any],
    model: dict[str, Any],
    recorded_with: dict[str, str],
) -> GoldenSet:
    """Write a format-2 golden set into ``root`` (a crash at any point leaves the previous one intact).

    ``inputs`` are the samples' files as given (sample archives, or images/.npy for one input);
    ``reference[output][i]`` is sample ``i``'s approved output without its batch axis.
    """
    if len(inputs) == 0:
        raise GoldenError(f"{root}: no inputs to record")
    if sorted(reference) != sorted(signature.output_names) or any(len(v) != len(inputs) for v in reference.values()):
        raise ValueError("one reference per output of the signature and sample")
    root.mkdir(parents=True, exist_ok=True)
    entries = _write_inputs(root, inputs)
    arrays = {f"{spec.name}/{i}": value for spec in signature.outputs for i, value in enumerate(reference[spec.name])}
    ref_bytes = npz_bytes(arrays)
    ref_rel = f"reference-{sha256_bytes(ref_bytes)[:12]}.npz"
    if not (root / ref_rel).is_file():
        _write_atomic(root / ref_rel, ref_bytes)
    outputs = {}
    for spec in signature.outputs:
        values = reference[spec.name]
        shapes = sorted({tuple(v.shape) for v in values})
        outputs[spec.name] = OutputRecord(dtype=str(values[0].dtype), shapes=tuple(shapes)).to_json()
    manifest = {
        "format": FORMAT,
        "version": VERSION_2,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "preprocess": preprocess.to_json() if preprocess else None,
        "signature": signature.to_json(),
        "inputs": entries,
        "reference": {"file": ref_rel, "sha256": sha256_bytes(ref_bytes), "samples": len(inputs), "outputs": outputs},
        "recording": recording,
        "model": model,
        "recorded_with": recorded_with,
    }
    return _commit(root, manifest, {e["file"] for e in entries} | {ref_rel})


def _commit(root: Path, manifest: dict[str, Any], keep: set[str]) -> GoldenSet:
    """Write the manifest (the commit point: until this replace, readers see the previous manifest
    and its files), then remove the earlier set's files it no longer names."""
    text = json.dumps(manifest, indent=2, allow_nan=False) + "\n"
    _write_atomic(root / MANIFEST, text.encode("utf-8"))
    _collect_garbage(root, keep)
    return parse_manifest(root, text)


def _collect_garbage(root: Path, keep: set[str]) -> None:
    """Remove data files of earlier sets that the new manifest no longer names (only ours)."""
    inputs_dir = root / INPUTS_DIR
    candidates = list(inputs_dir.iterdir()) if inputs_dir.is_dir() else []
    candidates += [p for pattern in REFERENCE_GLOBS for p in root.glob(pattern)]
    for path in candidates:
        rel = path.relative_to(root).as_posix()
        if rel not in keep and path.is_file() and not path.name.startswith("."):
            with contextlib.suppress(OSError):
                path.unlink()


__all__ = ["NewInput", "npz_bytes", "write_golden", "write_golden_v2"]
