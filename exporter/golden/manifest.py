"""Reading a golden set: the manifest, parsed and validated, and every file checked against its hash.

Layout (all paths in the manifest are relative to the golden directory)::

    manifest.json                   format, version, preprocessing, inputs, reference, provenance
    inputs/<stem>.<sha12><suffix>   images (PNG/JPEG/…) or raw input tensors (.npy)
    reference-<sha12>.npy           approved logits, float32, one row per input

Everything read from here is untrusted: paths must stay inside the folder, hashes must match.
Writing a set (content-addressed, manifest replaced last) is :mod:`exporter.golden.store`.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from ..errors import GoldenError
from .inputs import IMAGE_SUFFIXES, TENSOR_SUFFIX, Preprocess, decode_input

MANIFEST = "manifest.json"
FORMAT = "export-check-golden"
VERSION = 1
INPUTS_DIR = "inputs"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class GoldenInput:
    name: str  # the original file name, for people
    file: str  # relative path inside the golden folder
    sha256: str
    label: int | None = None


@dataclass(frozen=True)
class GoldenSet:
    root: Path
    preprocess: Preprocess | None  # None: every input is a raw .npy tensor
    inputs: tuple[GoldenInput, ...]
    reference_file: str
    reference_sha256: str
    reference_shape: tuple[int, ...]
    model: dict[str, Any]  # checkpoint name and hash, arch, arch kwargs it was recorded with
    recorded_with: dict[str, str]
    created: str
    manifest_sha256: str

    def __len__(self) -> int:
        return len(self.inputs)

    def reference(self) -> np.ndarray:
        data = _read_verified(self.root, self.reference_file, self.reference_sha256)
        try:
            array = np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise GoldenError(f"{self.root / self.reference_file}: not a readable .npy array ({exc}); re-record the golden set") from None
        if tuple(array.shape) != self.reference_shape or not np.issubdtype(array.dtype, np.floating):
            raise GoldenError(
                f"{self.root / self.reference_file}: holds {array.dtype} {tuple(array.shape)}, manifest says float "
                f"{self.reference_shape}; re-record the golden set"
            )
        return array.astype(np.float32, copy=False)

    def load_input(self, item: GoldenInput) -> np.ndarray:
        """Read one input, check its hash, decode and preprocess it."""
        data = _read_verified(self.root, item.file, item.sha256)
        return decode_input(data, item.file, self.preprocess, self.root / item.file)

    def batches(self, batch_size: int) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start, batch)`` over the set, decoding one batch at a time."""
        for start in range(0, len(self.inputs), batch_size):
            chunk = self.inputs[start : start + batch_size]
            arrays = [self.load_input(item) for item in chunk]
            shapes = {a.shape for a in arrays}
            if len(shapes) != 1:
                raise GoldenError(f"{self.root}: inputs have different shapes {sorted(shapes)}; re-record with one preprocessing")
            yield start, np.stack(arrays).astype(np.float32, copy=False)

    def labels(self) -> list[int | None]:
        return [item.label for item in self.inputs]

def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _safe_relative(root: Path, rel: Any, field: str) -> Path:
    """Resolve a manifest path, refusing anything that could leave the golden folder."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel:
        raise GoldenError(f"{root / MANIFEST}: {field} must be a relative path string, got {rel!r}; re-record the golden set")
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or rel.startswith("~") or re.match(r"^[A-Za-z]:", rel):
        raise GoldenError(f"{root / MANIFEST}: {field} {rel!r} points outside the golden folder; refused, re-record the golden set")
    path = root.joinpath(*pure.parts)
    # Links could point anywhere: no component below the root may be a symlink.
    probe = root
    for part in pure.parts:
        probe = probe / part
        if probe.is_symlink():
            raise GoldenError(f"{root / MANIFEST}: {field} {rel!r} is a symbolic link; refused, store the real file instead")
    return path


def _read_verified(root: Path, rel: str, expected: str) -> bytes:
    path = _safe_relative(root, rel, "file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise GoldenError(f"{path}: listed in {MANIFEST} but missing; restore it or re-record the golden set") from None
    except IsADirectoryError:
        raise GoldenError(f"{path}: is a directory, expected a file; restore it or re-record the golden set") from None
    except OSError as exc:
        raise GoldenError(f"{path}: cannot read ({exc.strerror or exc}); check its permissions") from None
    actual = sha256_bytes(data)
    if actual != expected:
        raise GoldenError(
            f"{path}: content changed since recording (sha256 {actual[:12]}… != manifest {expected[:12]}…); "
            "restore the file, or re-record/approve the golden set if the change is intended"
        )
    return data


def _require(cond: bool, manifest: Path, what: str) -> None:
    if not cond:
        raise GoldenError(f"{manifest}: {what}; re-record the golden set with `export-check golden record`")


def parse_manifest(root: Path, text: str) -> GoldenSet:
    """Parse and validate manifest text (no file contents are read)."""
    manifest = root / MANIFEST
    try:
        data = json.loads(text, parse_constant=lambda c: _raise_constant(manifest, c))
    except json.JSONDecodeError as exc:
        raise GoldenError(f"{manifest}: not valid JSON ({exc.msg} at line {exc.lineno}); restore it or re-record the golden set") from None
    _require(isinstance(data, dict), manifest, "the manifest must be a JSON object")
    _require(data.get("format") == FORMAT, manifest, f"format is {data.get('format')!r}, expected {FORMAT!r}")
    version = data.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise GoldenError(f"{manifest}: manifest version {version} is newer than this export-check reads ({VERSION}); upgrade export-check")
    _require(version == VERSION, manifest, f"unknown manifest version {version!r} (this export-check reads {VERSION})")
    preprocess = None
    if data.get("preprocess") is not None:
        try:
            preprocess = Preprocess.from_json(data["preprocess"])
        except ValueError as exc:
            raise GoldenError(f"{manifest}: bad preprocess spec ({exc}); fix it or re-record the golden set") from None
    raw_inputs = data.get("inputs")
    _require(isinstance(raw_inputs, list), manifest, "'inputs' must be a list")
    _require(len(raw_inputs) > 0, manifest, "the golden set has no inputs")
    inputs = []
    seen: set[str] = set()
    for i, entry in enumerate(raw_inputs):
        _require(isinstance(entry, dict), manifest, f"inputs[{i}] must be an object")
        rel = entry.get("file")
        _safe_relative(root, rel, f"inputs[{i}].file")
        _require(rel not in seen, manifest, f"inputs[{i}].file {rel!r} is listed twice")
        seen.add(rel)
        sha = entry.get("sha256")
        _require(isinstance(sha, str) and bool(_HEX64.match(sha)), manifest, f"inputs[{i}].sha256 must be 64 hex digits")
        label = entry.get("label")
        _require(label is None or (isinstance(label, int) and not isinstance(label, bool)), manifest, f"inputs[{i}].label must be an integer")
        name = entry.get("name", rel)
        _require(isinstance(name, str), manifest, f"inputs[{i}].name must be a string")
        is_tensor = rel.lower().endswith(TENSOR_SUFFIX)
        _require(is_tensor or preprocess is not None, manifest, f"inputs[{i}] is an image but there is no preprocess spec")
        _require(is_tensor or rel.lower().endswith(IMAGE_SUFFIXES), manifest, f"inputs[{i}].file {rel!r} is neither an image nor .npy")
        inputs.append(GoldenInput(name=name, file=rel, sha256=sha, label=label))
    ref = data.get("reference")
    _require(isinstance(ref, dict), manifest, "'reference' must be an object")
    _safe_relative(root, ref.get("file"), "reference.file")
    _require(isinstance(ref.get("sha256"), str) and bool(_HEX64.match(ref["sha256"])), manifest, "reference.sha256 must be 64 hex digits")
    shape = ref.get("shape")
    _require(
        isinstance(shape, list) and len(shape) >= 1 and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape),
        manifest,
        "reference.shape must be a list of non-negative integers",
    )
    _require(shape[0] == len(inputs), manifest, f"reference has {shape[0]} rows for {len(inputs)} inputs")
    model = data.get("model", {})
    _require(isinstance(model, dict), manifest, "'model' must be an object")
    recorded_with = data.get("recorded_with", {})
    _require(isinstance(recorded_with, dict), manifest, "'recorded_with' must be an object")
    created = data.get("created", "")
    _require(isinstance(created, str), manifest, "'created' must be a string")
    return GoldenSet(
        root=root,
        preprocess=preprocess,
        inputs=tuple(inputs),
        reference_file=ref["file"],
        reference_sha256=ref["sha256"],
        reference_shape=tuple(shape),
        model=model,
        recorded_with={str(k): str(v) for k, v in recorded_with.items()},
        created=created,
        manifest_sha256=sha256_bytes(text.encode("utf-8")),
    )


def _raise_constant(manifest: Path, constant: str) -> Any:
    raise GoldenError(f"{manifest}: {constant} is not valid in a manifest; restore it or re-record the golden set")


def read_manifest(root: Path) -> GoldenSet:
    if not root.exists():
        raise GoldenError(f"{root}: golden set not found; pass --golden DIR or record one with `export-check golden record`")
    if not root.is_dir():
        raise GoldenError(f"{root}: golden set must be a directory holding {MANIFEST}; pass --golden DIR")
    manifest = root / MANIFEST
    if manifest.is_symlink():
        raise GoldenError(f"{manifest}: is a symbolic link; refused, store the real file instead")
    try:
        raw = manifest.read_bytes()
    except FileNotFoundError:
        raise GoldenError(f"{manifest}: missing, so {root} is not a golden set; record one with `export-check golden record`") from None
    except OSError as exc:
        raise GoldenError(f"{manifest}: cannot read ({exc.strerror or exc}); check its permissions") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GoldenError(f"{manifest}: not UTF-8 text; restore it or re-record the golden set") from None
    return parse_manifest(root, text)


def load_golden(root: Path) -> GoldenSet:
    """Read the manifest and verify every file's hash before any expensive work starts."""
    golden = read_manifest(root)
    for item in golden.inputs:
        _read_verified(root, item.file, item.sha256)
    golden.reference()
    return golden


@dataclass(frozen=True)
class Problem:
    file: str
    what: str
    kind: str = "broken"  # "missing", "changed" (hash), "undecodable" or "broken" (anything else)
    name: str = ""  # the input's original file name, when the problem is one input


def _classify(root: Path, rel: str, expected: str) -> str:
    path = root / rel
    if not path.exists():
        return "missing"
    try:
        if path.is_file() and not path.is_symlink() and sha256_bytes(path.read_bytes()) != expected:
            return "changed"
    except OSError:
        return "broken"
    return "undecodable" if path.is_file() and not path.is_symlink() else "broken"


def verify_golden(root: Path) -> tuple[GoldenSet | None, list[Problem]]:
    """Check everything and collect every problem (for ``golden verify``), instead of stopping at the first."""
    try:
        golden = read_manifest(root)
    except GoldenError as exc:
        return None, [Problem(MANIFEST, str(exc))]
    problems = []
    for item in golden.inputs:
        try:
            golden.load_input(item)
        except GoldenError as exc:
            problems.append(Problem(item.file, str(exc), _classify(root, item.file, item.sha256), item.name))
    try:
        golden.reference()
    except GoldenError as exc:
        problems.append(Problem(golden.reference_file, str(exc), _classify(root, golden.reference_file, golden.reference_sha256)))
    return golden, problems


def unreferenced_files(golden: GoldenSet) -> list[str]:
    """Data files in the folder's own namespace (``inputs/``, ``reference-*.npy``) that the manifest does not name."""
    listed = {item.file for item in golden.inputs} | {golden.reference_file}
    inputs_dir = golden.root / INPUTS_DIR
    found = list(inputs_dir.iterdir()) if inputs_dir.is_dir() and not inputs_dir.is_symlink() else []
    found += list(golden.root.glob("reference-*.npy")) + list(golden.root.glob(".*.partial"))
    return sorted(rel for rel in (p.relative_to(golden.root).as_posix() for p in found) if rel not in listed)


__all__ = [
    "MANIFEST",
    "GoldenInput",
    "GoldenSet",
    "Problem",
    "load_golden",
    "parse_manifest",
    "read_manifest",
    "verify_golden",
    "unreferenced_files",
]
