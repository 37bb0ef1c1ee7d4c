"""Reading a golden set: the manifest, parsed and validated, and every file checked against its hash.

Layout (all paths in the manifest are relative to the golden directory)::

    manifest.json                   format, version, preprocessing, inputs, reference, provenance
    inputs/<stem>.<sha12><suffix>   images (PNG/JPEG/…) or raw input tensors (.npy)
    reference-<sha12>.npy           approved logits, float32, one row per input

Format (manifest ``version``) 1 is that: one float input ``input``, one output ``logits`` (the
signature ``SINGLE``). Format 2 records the model's signature (named inputs of any dtype, named
outputs, their batch and dynamic axes, the outputs' kinds) and holds::

    inputs/<stem>.<sha12>.npz       one sample: every named input without its batch axis (.safetensors too;
                                    an image or .npy when the signature has one input)
    reference-<sha12>.npz           key "<output>/<i>": sample i's approved output without its batch axis

plus ``recording``: the batch size and the model's mode it was recorded with, and (both formats,
since static int8) ``recording.calibration``, the set's calibration split (:class:`CalibrationSplit`). Both formats offer
the same reading API: ``signature``, ``feed_batches`` (named inputs, batched along each input's
batch axis, a batch ending where the input shapes change), ``reference_outputs``, ``labels``.

Everything read from here is untrusted: paths must stay inside the folder, hashes must match.
(Why this module is over 400 lines: it parses and validates both formats' untrusted manifests, and
every check of a field is kept beside the reading of that field, where a reviewer can see both.)
Writing a set (content-addressed, manifest replaced last) is :mod:`export_check.golden.store`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from .. import files
from ..errors import GoldenError
from ..signature import SINGLE, InputSpec, Signature, signature_from_json
from .inputs import (
    IMAGE_SUFFIXES,
    SAMPLE_DTYPES,
    TENSOR_SUFFIX,
    Preprocess,
    conform_sample,
    decode_input,
    is_sample_archive,
    read_npz,
    read_sample,
)
from .reading import (
    ARRAY_MAX_BYTES,
    FILE_MAX_BYTES,
    GOLDEN_MAX_BYTES,
    MANIFEST_MAX_BYTES,
    check_sample_size,
    declared_bytes,
    lfs_pointer,
    load_json,
    load_npy,
    npy_header,
    read_beneath,
)

MANIFEST = "manifest.json"
FORMAT = "export-check-golden"
VERSION_1 = 1  # one float input, one logits output (SINGLE); still written when a set is exactly that
VERSION_2 = 2  # a recorded signature: named inputs and outputs
VERSION = VERSION_2  # the newest version this export-check reads
VERSIONS = (VERSION_1, VERSION_2)
INPUTS_DIR = "inputs"
INPUT = "input"  # format 1's one input
LOGITS = "logits"  # format 1's one output
MODES = ("eval", "train")
REFERENCE_GLOBS = ("reference-*.npy", "reference-*.npz")  # the reference files of our own naming
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
CALIBRATION_RULES = ("sha256", "first", "names")
CALIBRATION_MAX = 32  # the default split's cap: what onnxruntime and PT2E calibrate well on (measured on the digits)


@dataclass(frozen=True)
class CalibrationSplit:
    """The golden samples the statically quantized kinds calibrate on; they are judged on the others.

    ``rule``: ``"sha256"`` the ``count`` inputs of smallest content sha256 (stable: it follows the
    content, not file names or their order, so it spreads over classes however files are named);
    ``"first"`` the first ``count`` in the manifest's order; ``"names"`` the inputs named.
    ``recorded``: False when the manifest says nothing (written before the split existed): then the
    default, :func:`default_calibration`, applies.

    >>> default_calibration(64).describe()
    'the 32 inputs of smallest sha256 (recorded in the manifest)'
    """

    rule: str
    count: int
    names: tuple[str, ...] = ()
    recorded: bool = True

    def to_json(self) -> dict[str, Any]:
        if self.rule == "names":
            return {"rule": "names", "names": list(self.names)}
        return {"rule": self.rule, "count": self.count}

    def indices(self, inputs: Sequence[GoldenInput]) -> tuple[int, ...]:
        """The calibration samples' positions in ``inputs``, ascending."""
        if self.rule == "names":
            wanted = set(self.names)
            return tuple(i for i, item in enumerate(inputs) if item.name in wanted)
        if self.rule == "first":
            return tuple(range(min(self.count, len(inputs))))
        ranked = sorted(range(len(inputs)), key=lambda i: (inputs[i].sha256, i))
        return tuple(sorted(ranked[: self.count]))

    def describe(self) -> str:
        if self.rule == "names":
            what = f"the {len(self.names)} inputs named in the manifest"
        elif self.rule == "first":
            what = f"the first {self.count} inputs"
        else:
            what = f"the {self.count} inputs of smallest sha256"
        return what + (" (recorded in the manifest)" if self.recorded else " (the default: the manifest records no split)")


def default_calibration(samples: int) -> CalibrationSplit:
    """Half the set, at most 32 samples, by content sha256: 32 of 64 golden digits, 0 of 1 (too few)."""
    return CalibrationSplit("sha256", min(CALIBRATION_MAX, samples // 2))


def calibration_from_json(manifest: Path, value: Any, inputs: Sequence[GoldenInput]) -> CalibrationSplit:
    """``recording.calibration`` validated against the set's inputs."""
    where = "recording.calibration"
    _require(isinstance(value, dict) and value.get("rule") in CALIBRATION_RULES, manifest,
             f"{where} must be an object whose rule is one of {', '.join(CALIBRATION_RULES)}")
    if value["rule"] == "names":
        names = value.get("names")
        _require(isinstance(names, list) and all(isinstance(n, str) for n in names) and len(set(names)) == len(names), manifest,
                 f"{where}.names must be a list of distinct input names")
        known = {item.name for item in inputs}
        unknown = [n for n in names if n not in known]
        _require(not unknown, manifest, f"{where}.names names {unknown[:1]!r}, which is not an input of the set")
        return CalibrationSplit("names", len(names), tuple(names))
    count = value.get("count")
    _require(_is_int(count) and count <= len(inputs), manifest, f"{where}.count must be an integer from 0 to {len(inputs)} (the inputs)")
    return CalibrationSplit(value["rule"], count)


@dataclass(frozen=True)
class GoldenInput:
    name: str  # the original file name, for people
    file: str  # relative path inside the golden folder
    sha256: str
    label: int | None = None


@dataclass(frozen=True)
class OutputRecord:
    """What a format-2 manifest says of one output's reference: its dtype and the distinct shapes of
    its samples (without the batch axis)."""

    dtype: str
    shapes: tuple[tuple[int, ...], ...]

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shapes": [list(s) for s in self.shapes]}


@dataclass(frozen=True)
class GoldenSet:
    root: Path
    preprocess: Preprocess | None  # None: every input is a raw .npy tensor (format 1) or a sample archive
    inputs: tuple[GoldenInput, ...]  # one entry per sample
    reference_file: str
    reference_sha256: str
    reference_shape: tuple[int, ...]  # format 1: the logits array's; format 2: (samples,)
    model: dict[str, Any]  # checkpoint name and hash, arch, arch kwargs it was recorded with
    recorded_with: dict[str, str]
    created: str
    manifest_sha256: str
    signature: Signature = SINGLE
    version: int = VERSION_1
    # {"batch_size": N, "mode": "eval"|"train"}: how the reference was recorded; {} in a format-1
    # manifest written before export-check recorded it
    recording: dict[str, Any] = field(default_factory=dict)
    reference_records: dict[str, OutputRecord] = field(default_factory=dict)  # format 2: by output name
    # Decoded references, read once per set (the set itself is frozen; this holds what was read).
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.inputs)

    @property
    def calibration(self) -> CalibrationSplit:
        """The calibration split the manifest records, or the default (``recorded=False``) when it records none."""
        value = self.recording.get("calibration")
        if isinstance(value, CalibrationSplit):
            return value
        return replace(default_calibration(len(self)), recorded=False)

    def calibration_indices(self) -> tuple[int, ...]:
        """The positions of the calibration samples in :attr:`inputs`, ascending."""
        return self.calibration.indices(self.inputs)

    @property
    def recorded_batch_size(self) -> int | None:
        """The batch size the reference was computed at (None: an older format-1 manifest does not say)."""
        value = self.recording.get("batch_size")
        return value if isinstance(value, int) else None

    @property
    def recorded_mode(self) -> str | None:
        """``"eval"`` or ``"train"``: the mode the eager model was in while recording (None: not recorded)."""
        value = self.recording.get("mode")
        return value if isinstance(value, str) else None

    def reference(self) -> np.ndarray:
        """Format 1: the approved logits, one row per input (read and checked on every call).
        Format 2: the first output's references stacked along its batch axis (GoldenError when its
        samples' shapes differ; use :meth:`reference_outputs`)."""
        if self.version != VERSION_1:
            return self.reference_outputs(0, len(self))[self.signature.outputs[0].name]
        data = _read_verified(self.root, self.reference_file, self.reference_sha256)
        shown = self.root / self.reference_file
        shape, dtype, _ = npy_header(data, shown, "reference")  # before allocating: the manifest's shape, a float dtype
        if shape != self.reference_shape or dtype.kind != "f":
            raise GoldenError(f"{shown}: holds {dtype} {shape}, manifest says float {self.reference_shape}; re-record the golden set")
        array = load_npy(data, shown, "reference")
        with np.errstate(over="ignore"):
            array = array.astype(np.float32, copy=False)
        if not np.all(np.isfinite(array)):
            bad = int(array.size - np.count_nonzero(np.isfinite(array)))
            raise GoldenError(f"{shown}: the reference holds {bad} NaN, Inf or float32-overflowing values; re-record or approve the "
                              "golden set from a checkpoint with finite logits")
        return array

    def reference_samples(self) -> dict[str, list[np.ndarray]]:
        """Every output's approved value per sample, without the batch axis, by output name; read,
        hash-checked and validated once per set (every key present, dtype and shape as the manifest
        says, finite). Format 1: ``{"logits": rows}``."""
        if "samples" not in self._cache:
            if self.version == VERSION_1:
                self._cache["samples"] = {LOGITS: list(self._reference_v1())}
            else:
                self._cache["samples"] = self._read_reference_v2()
        samples: dict[str, list[np.ndarray]] = self._cache["samples"]
        return samples

    def _reference_v1(self) -> np.ndarray:
        if "v1" not in self._cache:
            self._cache["v1"] = self.reference()
        array: np.ndarray = self._cache["v1"]
        return array

    def _read_reference_v2(self) -> dict[str, list[np.ndarray]]:
        path = self.root / self.reference_file
        arrays = read_npz(_read_verified(self.root, self.reference_file, self.reference_sha256), path, "reference", ARRAY_MAX_BYTES)
        expected = {f"{o.name}/{i}" for o in self.signature.outputs for i in range(len(self))}
        extra = sorted(set(arrays) - expected)
        if extra:
            raise GoldenError(f"{path}: holds {extra[0]!r}, which is no output of a sample of this set; re-record the golden set")
        out: dict[str, list[np.ndarray]] = {}
        for spec in self.signature.outputs:
            record = self.reference_records[spec.name]
            values = []
            for i in range(len(self)):
                key = f"{spec.name}/{i}"
                if key not in arrays:
                    raise GoldenError(f"{path}: has no {key!r} (output {spec.name} of sample {i}); re-record the golden set")
                array = arrays[key]
                if str(array.dtype) != record.dtype or tuple(array.shape) not in record.shapes:
                    raise GoldenError(f"{path}: {key!r} holds {array.dtype} {tuple(array.shape)}, the manifest says {record.dtype} "
                                      f"of shape {' or '.join(str(s) for s in record.shapes)}; re-record the golden set")
                if array.dtype.kind == "f" and not np.all(np.isfinite(array)):  # (the dtype is the manifest's: no overflow on reading)
                    raise GoldenError(f"{path}: {key!r} (output {spec.name} of sample {i}) holds NaN or Inf; re-record or approve the "
                                      "golden set from a checkpoint with finite outputs")
                values.append(array)
            out[spec.name] = values
        return out

    def reference_outputs(self, start: int, count: int) -> dict[str, np.ndarray]:
        """The approved outputs of samples ``start .. start+count-1``, each stacked along its output's
        batch axis (the batch :meth:`feed_batches` yields at ``start``). Format 1: ``{"logits": rows}``."""
        if self.version == VERSION_1:
            return {LOGITS: self._reference_v1()[start : start + count]}
        samples = self.reference_samples()
        out = {}
        for spec in self.signature.outputs:
            part = samples[spec.name][start : start + count]
            shapes = {a.shape for a in part}
            if len(shapes) > 1:
                raise GoldenError(f"{self.root / self.reference_file}: output {spec.name} of samples {start}..{start + count - 1} has "
                                  f"shapes {sorted(shapes)}, which do not stack into one batch; re-record the golden set")
            out[spec.name] = np.stack(part, axis=spec.batch_axis) if part else np.zeros((0,), dtype=np.float32)
        return out

    def empty_outputs(self) -> list[tuple[str, tuple[int, ...]]]:
        """The compared outputs whose reference holds no values in any sample (``(N, 0)`` logits), each
        with its shape: judged, they would pass on nothing."""
        if self.version == VERSION_1:
            return [(LOGITS, self.reference_shape[1:])] if 0 in self.reference_shape[1:] else []
        return [(spec.name, self.reference_records[spec.name].shapes[0]) for spec in self.signature.compared_outputs()
                if spec.name in self.reference_records and all(0 in shape for shape in self.reference_records[spec.name].shapes)]

    def load_input(self, item: GoldenInput) -> np.ndarray:
        """Read one input, check its hash, decode and preprocess it (format 1; format 2: the array of
        a set with one input)."""
        if self.version != VERSION_1:
            if len(self.signature.inputs) != 1:
                raise ValueError(f"{self.root}: the golden set has inputs {', '.join(self.signature.input_names)}; use load_sample")
            return self.load_sample(item)[self.signature.inputs[0].name]
        data = _read_verified(self.root, item.file, item.sha256)
        return decode_input(data, item.file, self.preprocess, self.root / item.file)

    def load_sample(self, item: GoldenInput) -> dict[str, np.ndarray]:
        """One sample's named inputs, without the batch axis, in the signature's dtypes (hash checked, decoded)."""
        if self.version == VERSION_1:
            return {INPUT: self.load_input(item)}
        data = _read_verified(self.root, item.file, item.sha256)
        shown = self.root / item.file
        if is_sample_archive(item.file):
            arrays = read_sample(data, item.file, shown)
        else:  # an image or .npy tensor: the one input
            arrays = {self.signature.inputs[0].name: decode_input(data, item.file, self.preprocess, shown)}
        return conform_sample(arrays, self.signature.inputs, shown)

    def batches(self, batch_size: int) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start, batch)`` over the set, decoding one batch at a time (the one input's batch;
        see :meth:`feed_batches` for several)."""
        if self.version != VERSION_1:
            if len(self.signature.inputs) != 1:
                raise ValueError(f"{self.root}: the golden set has inputs {', '.join(self.signature.input_names)}; use feed_batches")
            name = self.signature.inputs[0].name
            for start, feeds in self.feed_batches(batch_size):
                yield start, feeds[name]
            return
        for start in range(0, len(self.inputs), batch_size):
            chunk = self.inputs[start : start + batch_size]
            arrays = [self.load_input(item) for item in chunk]
            shapes = {a.shape for a in arrays}
            if len(shapes) != 1:
                raise GoldenError(f"{self.root}: inputs have different shapes {sorted(shapes)}; re-record with one preprocessing")
            yield start, np.stack(arrays).astype(np.float32, copy=False)

    def feed_batches(self, batch_size: int) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """Yield ``(start, feeds)``: consecutive samples, decoded a batch at a time, each input stacked
        along its batch axis in its dtype. A batch ends at ``batch_size`` samples or where the next
        sample's input shapes differ. Format 1: ``{"input": batch}``, the batches of :meth:`batches`."""
        if self.version == VERSION_1:
            for start, batch in self.batches(batch_size):
                yield start, {INPUT: batch}
            return
        yield from stack_batches((self.load_sample(item) for item in self.inputs), self.signature.inputs, batch_size)

    def labels(self) -> list[int | None]:
        return [item.label for item in self.inputs]


def sample_shapes(sample: Mapping[str, np.ndarray], inputs: Sequence[InputSpec]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(sample[spec.name].shape) for spec in inputs)


def stack_batches(
    samples: Iterable[Mapping[str, np.ndarray]], inputs: Sequence[InputSpec], batch_size: int
) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """Consecutive samples as batches: a batch ends at ``batch_size`` samples or where the next
    sample's input shapes differ; each input stacked along its batch axis, in its dtype. Recording
    and replay batch through this one function, so they agree."""
    pending: list[Mapping[str, np.ndarray]] = []
    start = index = 0
    shapes: tuple[tuple[int, ...], ...] = ()
    for index, sample in enumerate(samples):
        these = sample_shapes(sample, inputs)
        if pending and (these != shapes or len(pending) >= batch_size):
            yield start, stack_samples(pending, inputs)
            pending, start = [], index
        shapes = these
        pending.append(sample)
    if pending:
        yield start, stack_samples(pending, inputs)


def stack_samples(samples: Sequence[Mapping[str, np.ndarray]], inputs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    return {spec.name: np.stack([s[spec.name] for s in samples], axis=spec.batch_axis).astype(spec.dtype, copy=False) for spec in inputs}


def feeds_length(feeds: Mapping[str, np.ndarray], signature: Signature) -> int:
    """How many samples a batch of ``feeds`` holds (the first input's size on its batch axis)."""
    spec = signature.inputs[0]
    array = feeds[spec.name] if spec.name in feeds else next(iter(feeds.values()))
    return int(array.shape[spec.batch_axis]) if array.ndim > spec.batch_axis else len(array)


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
    data = read_beneath(root, rel, FILE_MAX_BYTES, "restore it or re-record the golden set",
                        f"{path}: listed in {MANIFEST} but missing; restore it or re-record the golden set")
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
    data = load_json(text, manifest)
    _require(isinstance(data, dict), manifest, "the manifest must be a JSON object")
    _require(data.get("format") == FORMAT, manifest, f"format is {data.get('format')!r}, expected {FORMAT!r}")
    version = data.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise GoldenError(f"{manifest}: manifest version {version} is newer than this export-check reads ({VERSION}); upgrade export-check")
    _require(version in VERSIONS, manifest,
             f"unknown manifest version {version!r} (this export-check reads {', '.join(map(str, VERSIONS))})")
    v2 = version == VERSION_2
    preprocess = None
    if data.get("preprocess") is not None:
        try:
            preprocess = Preprocess.from_json(data["preprocess"])
        except ValueError as exc:
            raise GoldenError(f"{manifest}: bad preprocess spec ({exc}); fix it or re-record the golden set") from None
    signature = SINGLE
    if v2:
        try:
            signature = signature_from_json(data.get("signature"), str(manifest))
        except ValueError as exc:
            raise GoldenError(f"{exc}; fix the signature or re-record the golden set with `export-check golden record`") from None
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
        if v2 and is_sample_archive(rel):
            pass
        else:
            _require(not v2 or len(signature.inputs) == 1, manifest,
                     f"inputs[{i}].file {rel!r} is not a .npz or .safetensors sample, which a set of several inputs needs")
            is_tensor = rel.lower().endswith(TENSOR_SUFFIX)
            _require(is_tensor or preprocess is not None, manifest, f"inputs[{i}] is an image but there is no preprocess spec")
            _require(is_tensor or rel.lower().endswith(IMAGE_SUFFIXES), manifest, f"inputs[{i}].file {rel!r} is neither an image nor .npy")
        inputs.append(GoldenInput(name=name, file=rel, sha256=sha, label=label))
    ref = data.get("reference")
    _require(isinstance(ref, dict), manifest, "'reference' must be an object")
    _safe_relative(root, ref.get("file"), "reference.file")
    _require(isinstance(ref.get("sha256"), str) and bool(_HEX64.match(ref["sha256"])), manifest, "reference.sha256 must be 64 hex digits")
    records: dict[str, OutputRecord] = {}
    recording: dict[str, Any] = {}
    if v2:
        _require(ref["file"].lower().endswith(".npz"), manifest, "reference.file must be an .npz archive")
        samples = ref.get("samples")
        _require(_is_int(samples) and samples == len(inputs), manifest, f"reference has {samples!r} samples for {len(inputs)} inputs")
        records = _output_records(manifest, ref.get("outputs"), signature)
        recording = _recording(manifest, data.get("recording"))
        shape: Any = [len(inputs)]
    else:
        shape = ref.get("shape")
        _require(
            isinstance(shape, list) and len(shape) >= 1 and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape),
            manifest,
            "reference.shape must be a list of non-negative integers",
        )
        _require(shape[0] == len(inputs), manifest, f"reference has {shape[0]} rows for {len(inputs)} inputs")
        if data.get("recording") is not None:  # written since format 1 records it too; older manifests lack it
            recording = _recording(manifest, data.get("recording"))
    raw_recording = data.get("recording")
    if isinstance(raw_recording, dict) and raw_recording.get("calibration") is not None:
        recording["calibration"] = calibration_from_json(manifest, raw_recording["calibration"], inputs)
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
        signature=signature,
        version=VERSION_2 if v2 else VERSION_1,
        recording=recording,
        reference_records=records,
    )


def _is_int(value: Any, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _output_records(manifest: Path, outputs: Any, signature: Signature) -> dict[str, OutputRecord]:
    names = signature.output_names
    _require(isinstance(outputs, dict) and sorted(outputs) == sorted(names), manifest,
             f"reference.outputs must describe each output of the signature ({', '.join(names)}) once")
    records = {}
    for spec in signature.outputs:
        entry = outputs[spec.name]
        where = f"reference.outputs[{spec.name!r}]"
        _require(isinstance(entry, dict) and entry.get("dtype") in SAMPLE_DTYPES, manifest,
                 f"{where}.dtype must be one of {', '.join(SAMPLE_DTYPES)}")
        shapes = entry.get("shapes")
        _require(
            isinstance(shapes, list) and len(shapes) >= 1
            and all(isinstance(s, list) and len(s) < 32 and all(_is_int(d) for d in s) for s in shapes),
            manifest, f"{where}.shapes must be a list of shapes (lists of non-negative integers)",
        )
        _require(all(spec.batch_axis <= len(s) for s in shapes), manifest,
                 f"output {spec.name}'s batch axis {spec.batch_axis} does not fit its shapes {shapes}")
        records[spec.name] = OutputRecord(dtype=entry["dtype"], shapes=tuple(tuple(s) for s in shapes))
    return records


def _recording(manifest: Path, recording: Any) -> dict[str, Any]:
    _require(isinstance(recording, dict), manifest, "'recording' must be an object holding batch_size and mode")
    _require(_is_int(recording.get("batch_size"), 1), manifest, "recording.batch_size must be an integer >= 1")
    _require(recording.get("mode") in MODES, manifest, f"recording.mode must be one of {', '.join(MODES)}")
    return {"batch_size": recording["batch_size"], "mode": recording["mode"]}


def read_manifest(root: Path) -> GoldenSet:
    if not root.exists():
        raise GoldenError(f"{root}: golden set not found; pass --golden DIR or record one with `export-check golden record`")
    if not root.is_dir():
        raise GoldenError(f"{root}: golden set must be a directory holding {MANIFEST}; pass --golden DIR")
    manifest = root / MANIFEST
    if manifest.is_symlink():
        raise GoldenError(f"{manifest}: is a symbolic link; refused, store the real file instead")
    if not manifest.exists():
        raise GoldenError(f"{manifest}: missing, so {root} is not a golden set; record one with `export-check golden record`")
    raw = read_beneath(root, MANIFEST, MANIFEST_MAX_BYTES, "restore it or re-record the golden set")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GoldenError(f"{manifest}: not UTF-8 text; restore it or re-record the golden set") from None
    return parse_manifest(root, text)


def load_golden(root: Path) -> GoldenSet:
    """Read the manifest and verify every file's hash before any expensive work starts."""
    golden = read_manifest(root)
    total = 0
    for item in golden.inputs:
        total += _declared(root, item)
        if total > GOLDEN_MAX_BYTES:
            raise _over_total(total, root / item.file)
    if golden.version == VERSION_1:
        golden.reference()
    else:
        golden.reference_samples()  # every key present, as the manifest says, finite
    return golden


def _declared(root: Path, item: GoldenInput) -> int:
    """The decoded bytes ``item``'s file declares, the file read and hash-checked; one GoldenError
    naming it when that is over ``SAMPLE_MAX_BYTES``."""
    shown = root / item.file
    size = declared_bytes(_read_verified(root, item.file, item.sha256), item.file, shown)
    check_sample_size(size, shown)
    return size


def _over_total(total: int, shown: Path) -> GoldenError:
    return GoldenError(f"{shown}: with it the samples declare {total:,} bytes of arrays once decompressed, over the {GOLDEN_MAX_BYTES:,} "
                       "bytes a golden set may hold in all; record a smaller set")


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
        data = files.read_fd(files.open_beneath(root, rel), FILE_MAX_BYTES, path)
    except OSError:  # a link, a FIFO, too large, unreadable
        return "broken"
    if sha256_bytes(data) == expected:
        return "undecodable"
    return "changed" if lfs_pointer(data) is None else "lfs-pointer"  # a pointer: never downloaded (`git lfs pull`), not changed


def verify_golden(root: Path) -> tuple[GoldenSet | None, list[Problem]]:
    """Check everything and collect every problem (for ``golden verify``), instead of stopping at the first."""
    try:
        golden = read_manifest(root)
    except GoldenError as exc:
        return None, [Problem(MANIFEST, str(exc))]
    problems = []
    total = 0  # the bound on the set's total is said once, of the sample that crosses it
    for item in golden.inputs:
        try:
            size = _declared(root, item)
            total += size
            if total - size <= GOLDEN_MAX_BYTES < total:  # said once, of the sample that crosses it
                raise _over_total(total, root / item.file)
            golden.load_sample(item)
        except GoldenError as exc:
            problems.append(Problem(item.file, str(exc), _classify(root, item.file, item.sha256), item.name))
    try:
        if golden.version == VERSION_1:
            golden.reference()
        else:
            golden.reference_samples()
    except GoldenError as exc:
        problems.append(Problem(golden.reference_file, str(exc), _classify(root, golden.reference_file, golden.reference_sha256)))
    return golden, problems


def unreferenced_files(golden: GoldenSet) -> list[str]:
    """Data files in the folder's own namespace (``inputs/``, ``reference-*.npy``, ``reference-*.npz``) that the manifest does not name."""
    listed = {item.file for item in golden.inputs} | {golden.reference_file}
    inputs_dir = golden.root / INPUTS_DIR
    found = list(inputs_dir.iterdir()) if inputs_dir.is_dir() and not inputs_dir.is_symlink() else []
    found += [p for pattern in REFERENCE_GLOBS for p in golden.root.glob(pattern)] + list(golden.root.glob(".*.partial"))
    return sorted(rel for rel in (p.relative_to(golden.root).as_posix() for p in found) if rel not in listed)


__all__ = [
    "MANIFEST",
    "VERSION_1",
    "VERSION_2",
    "GoldenInput",
    "GoldenSet",
    "OutputRecord",
    "feeds_length",
    "stack_batches",
    "Problem",
    "load_golden",
    "parse_manifest",
    "read_manifest",
    "verify_golden",
    "unreferenced_files",
]
