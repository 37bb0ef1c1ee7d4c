"""A golden set as read: :class:`GoldenSet`, its inputs (:class:`GoldenInput`) and its outputs'
records (:class:`OutputRecord`), with the reading API both manifest formats share: each input read,
hash-checked, decoded and preprocessed (``load_input``, ``load_sample``), the samples stacked into
batches (``batches``, ``feed_batches``; :func:`stack_batches` is the one batching function recording
and replay share), and the approved references read once per set and checked against the manifest
(``reference``, ``reference_samples``, ``reference_outputs``). Every file is read beneath the
golden folder by a path the manifest gives (checked once, when the manifest is parsed: nothing
leaves the folder, no link is followed) within the bounds of :mod:`export_check.golden.reading`
(:func:`read_beneath`) and must match its sha256 (:func:`read_verified`, which hands the bytes on once);
its bytes are decoded whole by :mod:`export_check.golden.inputs`. Parsing and validating the manifest that
builds a GoldenSet is :mod:`export_check.golden.manifest`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import files
from ..errors import GoldenError
from ..feeds import length
from ..signature import SINGLE, InputSpec, Signature
from .calibration import CalibrationSplit, default_calibration
from .inputs import Preprocess, decode_input, decode_sample, load_npy, load_npz, npy_header
from .labels import Label, labels_of, primary_labels
from .reading import ARRAY_MAX_BYTES, FILE_MAX_BYTES, describe, sha256_bytes
from .reading import MANIFEST as MANIFEST  # named here too, where the run and the store import it from

VERSION_1 = 1  # one float input, one logits output (SINGLE); still written when a set is exactly that
VERSION_2 = 2  # a recorded signature: named inputs and outputs
INPUT = "input"  # format 1's one input
LOGITS = "logits"  # format 1's one output


def read_beneath(root: Path, rel: str, limit: int, fix: str, missing: str = "") -> bytes:
    """``root/rel``'s bytes, or one GoldenError line: missing (``missing`` says so), a link, not a
    regular file, too large, unreadable, a Git LFS pointer in place of the file."""
    shown = root / rel
    try:
        data = files.read_fd(files.open_beneath(root, rel), limit, shown)
    except FileNotFoundError:
        raise GoldenError(missing or f"{shown}: missing; {fix}") from None
    except files.UnsafeFile as exc:
        raise GoldenError(f"{shown}: {describe(exc)}; refused, {fix}") from None
    except IsADirectoryError:
        raise GoldenError(f"{shown}: is a directory, expected a file; {fix}") from None
    except OSError as exc:
        raise GoldenError(f"{shown}: cannot read ({describe(exc)}); check its permissions") from None
    pointer = files.lfs_pointer(data)
    if pointer is not None:
        raise GoldenError(f"{shown}: {pointer}")
    return data


def read_verified(root: Path, rel: str, expected: str) -> bytes:
    """The bytes of the file ``rel`` the manifest names (:func:`read_beneath`), which must match its sha256 ``expected``."""
    path = root / rel
    data = read_beneath(root, rel, FILE_MAX_BYTES, "restore it or re-record the golden set",
                        f"{path}: listed in {MANIFEST} but missing; restore it or re-record the golden set")
    actual = sha256_bytes(data)
    if actual != expected:
        raise GoldenError(
            f"{path}: content changed since recording (sha256 {actual[:12]}… != manifest {expected[:12]}…); "
            "restore the file, or re-record/approve the golden set if the change is intended"
        )
    return data


@dataclass(frozen=True)
class GoldenInput:
    name: str  # the original file name, for people
    file: str  # relative path inside the golden folder
    sha256: str
    label: Label | None = None  # golden/labels.py: a class, or per output (per position)


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
        """Format 1: the approved logits, one row per input (read and checked once per set, with
        :meth:`reference_samples`). Format 2: the first output's references stacked along its batch
        axis (GoldenError when its samples' shapes differ; use :meth:`reference_outputs`)."""
        if self.version != VERSION_1:
            return self.reference_outputs(0, len(self))[self.signature.outputs[0].name]
        return self._reference_v1()

    def reference_samples(self) -> dict[str, list[np.ndarray]]:
        """Every output's approved value per sample, without the batch axis, by output name; read,
        hash-checked and validated once per set (every key present, dtype and shape as the manifest
        says, finite). Format 1: ``{"logits": rows}``."""
        if "samples" not in self._cache:
            if self.version == VERSION_1:
                self._cache["v1"] = self._read_reference_v1()
                self._cache["samples"] = {LOGITS: list(self._cache["v1"])}
            else:
                self._cache["samples"] = self._read_reference_v2()
        samples: dict[str, list[np.ndarray]] = self._cache["samples"]
        return samples

    def _reference_v1(self) -> np.ndarray:
        """Format 1's logits array, read once with :meth:`reference_samples`."""
        self.reference_samples()
        array: np.ndarray = self._cache["v1"]
        return array

    def _read_reference_v1(self) -> np.ndarray:
        data = read_verified(self.root, self.reference_file, self.reference_sha256)
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

    def _read_reference_v2(self) -> dict[str, list[np.ndarray]]:
        path = self.root / self.reference_file
        arrays = load_npz(read_verified(self.root, self.reference_file, self.reference_sha256), path, "reference", ARRAY_MAX_BYTES)
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
        if self.version != VERSION_1 and len(self.signature.inputs) != 1:
            raise ValueError(f"{self.root}: the golden set has inputs {', '.join(self.signature.input_names)}; use load_sample")
        return self.load_sample(item)[INPUT if self.version == VERSION_1 else self.signature.inputs[0].name]

    def load_sample(self, item: GoldenInput) -> dict[str, np.ndarray]:
        """One sample's named inputs, without the batch axis, in the signature's dtypes: its file's bytes
        read once and hash-checked (:func:`read_verified`), then decoded whole (inputs.py)."""
        data = read_verified(self.root, item.file, item.sha256)
        if self.version == VERSION_1:  # format 1: the one float input, an image or .npy tensor
            return {INPUT: decode_input(data, item.file, self.preprocess, self.root / item.file)}
        return decode_sample(data, item.file, self.signature.inputs, self.preprocess, self.root / item.file)

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

    def calibration_batches(self, batch_size: int) -> tuple[dict[str, np.ndarray], ...]:
        """The calibration split (``calibration_indices``) as batches of named inputs, for the statically quantized
        kinds; each sample is read and its hash checked again, decoded a batch at a time (as :meth:`feed_batches`)."""
        return tuple(feeds for _, feeds in self._sample_batches([self.inputs[i] for i in self.calibration_indices()], batch_size))

    def _sample_batches(self, items: Sequence[GoldenInput], batch_size: int) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """``items``' samples, each read, hash-checked and decoded (:meth:`load_sample`) as its batch is stacked
        (:func:`stack_batches`); ``start`` counts in ``items``."""
        return stack_batches((self.load_sample(item) for item in items), self.signature.inputs, batch_size)

    def first_batch(self, batch_size: int) -> tuple[tuple[int, dict[str, np.ndarray]], float, Iterator[tuple[int, dict[str, np.ndarray]]]]:
        """The first of :meth:`feed_batches`, decoded now; the bytes its inputs decode to per sample (what a run
        sizes the whole set by); and the batches after it, decoded as they are read."""
        stream = self.feed_batches(batch_size)
        start, feeds = next(stream)
        per_sample = sum(int(np.asarray(a).nbytes) for a in feeds.values()) / max(length(feeds, self.signature), 1)
        return (start, feeds), per_sample, stream

    def feed_batches(self, batch_size: int) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """Yield ``(start, feeds)``: consecutive samples, decoded a batch at a time, each input stacked
        along its batch axis in its dtype. A batch ends at ``batch_size`` samples or where the next
        sample's input shapes differ. Format 1: ``{"input": batch}``, the batches of :meth:`batches`."""
        if self.version == VERSION_1:
            for start, batch in self.batches(batch_size):
                yield start, {INPUT: batch}
            return
        yield from self._sample_batches(self.inputs, batch_size)

    def labels(self) -> list[int | None]:
        """Each sample's class label of the primary output (the first compared one, when it is logits), or None."""
        return primary_labels([item.label for item in self.inputs], self.signature)

    def labels_of(self, output: str) -> list[int | tuple[int, ...] | None]:
        """Each sample's label of ``output``: a class, or one class per position (negative: none), or None."""
        return labels_of([item.label for item in self.inputs], self.signature, output)


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

