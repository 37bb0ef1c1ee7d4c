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
since static int8) ``recording.calibration``, the set's calibration split
(:class:`~export_check.golden.calibration.CalibrationSplit`). Both formats offer the same reading API
(:class:`~export_check.golden.goldenset.GoldenSet`): ``signature``, ``feed_batches`` (named inputs,
batched along each input's batch axis, a batch ending where the input shapes change),
``reference_outputs``, ``labels``.

Everything read from here is untrusted: paths must stay inside the folder, hashes must match. This
module parses and validates the manifest of both formats (every check of a field beside the
reading of that field, where a reviewer can see both), reads it from the folder, loads a set with
every file's hash checked (and, for a check, with the run's settings applied and checked: ``checked_golden``),
and collects every problem for ``golden verify``; the set it returns,
and reading its files, is :mod:`export_check.golden.goldenset`. Writing a set (content-addressed,
manifest replaced last) is :mod:`export_check.golden.store`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from .. import files, parsing
from ..errors import GoldenError, UsageError
from ..signature import SINGLE, Signature, SignatureSettings, ctc_problem, signature_from_json
from .calibration import CALIBRATION_RULES, CalibrationSplit
from .goldenset import VERSION_1, VERSION_2, GoldenInput, GoldenSet, OutputRecord, read_beneath, read_verified, stack_batches
from .inputs import IMAGE_SUFFIXES, SAMPLE_DTYPES, TENSOR_SUFFIX, declared_sample_bytes, is_sample_archive
from .labels import check_label
from .preprocess import Preprocess
from .reading import (
    FILE_MAX_BYTES,
    GOLDEN_MAX_BYTES,
    JSON_MAX_DEPTH,
    MANIFEST,
    MANIFEST_MAX_BYTES,
    sha256_bytes,
)

FORMAT = "export-check-golden"
VERSION = VERSION_2  # the newest version this export-check reads
VERSIONS = (VERSION_1, VERSION_2)
INPUTS_DIR = "inputs"
MODES = ("eval", "train")
REFERENCE_GLOBS = ("reference-*.npy", "reference-*.npz")  # the reference files of our own naming
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


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


def _require(cond: bool, manifest: Path, what: str) -> None:
    if not cond:
        raise GoldenError(f"{manifest}: {what}; re-record the golden set with `export-check golden record`")


def safe_relative(root: Path, rel: Any, field: str) -> Path:
    """Resolve a manifest path, refusing anything that could leave the golden folder (checked once, here:
    every later read opens it beneath the folder without following a link, ``goldenset.read_beneath``)."""
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


def parse_manifest(root: Path, text: str) -> GoldenSet:
    """Parse and validate manifest text (no file contents are read)."""
    manifest = root / MANIFEST
    data = parsing.load_json(text, manifest, "restore it or re-record the golden set", GoldenError, max_depth=JSON_MAX_DEPTH)
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
        safe_relative(root, rel, f"inputs[{i}].file")
        _require(rel not in seen, manifest, f"inputs[{i}].file {rel!r} is listed twice")
        seen.add(rel)
        sha = entry.get("sha256")
        _require(isinstance(sha, str) and bool(_HEX64.match(sha)), manifest, f"inputs[{i}].sha256 must be 64 hex digits")
        try:
            label = check_label(entry.get("label"), f"inputs[{i}].label")
        except ValueError as exc:
            _require(False, manifest, str(exc))
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
    safe_relative(root, ref.get("file"), "reference.file")
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
    kinds = recording.get("kinds", {})  # the evidence of each default output kind (golden.evidence), said by `golden record`
    _require(isinstance(kinds, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in kinds.items()), manifest,
             "recording.kinds must map output names to text")
    return {"batch_size": recording["batch_size"], "mode": recording["mode"], **({"kinds": dict(kinds)} if kinds else {})}


def _manifest_text(root: Path) -> str:
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
    return text


def read_manifest(root: Path) -> GoldenSet:
    """The folder's manifest, read, parsed and validated (:func:`parse_manifest`); no other file is read."""
    text = _manifest_text(root)
    return parse_manifest(root, text)


def load_golden(root: Path) -> GoldenSet:
    """Read the manifest and verify every file's hash before any expensive work starts."""
    golden = read_manifest(root)
    total = 0
    for item in golden.inputs:  # each file read and hash-checked (goldenset.py), its declared size read from its headers (inputs.py)
        total += declared_sample_bytes(read_verified(root, item.file, item.sha256), item.file, root / item.file)
        if total > GOLDEN_MAX_BYTES:
            raise _over_total(total, root / item.file)
    golden.reference_samples()  # read once and kept: every key present, as the manifest says, finite
    return golden


def checked_golden(root: Path, settings: SignatureSettings) -> GoldenSet:
    """The golden set as a check compares it, checked whole before any export: read with every file's hash and
    the approved outputs checked (:func:`load_golden`), then the settings applied to its signature, and the outputs
    they name, the CTC blanks they declare and the compared outputs that hold no values refused."""
    golden = load_golden(root)
    unknown = [n for n in settings.outputs if n not in golden.signature.output_names]
    if unknown:
        raise UsageError(f"{root}: settings name outputs {', '.join(unknown)}, the golden set has "
                         f"{', '.join(golden.signature.output_names)}; fix [tool.export-check.outputs.NAME]")
    checked = settings.at_check(golden.signature)
    if checked != golden.signature:  # a setting changes an output's kind or leaves it out of the comparison
        golden = replace(golden, signature=checked)  # (the references read stay with it: the cache is shared)
    for spec in golden.signature.compared_outputs():  # a declared CTC blank must be one of the recorded classes
        record = golden.reference_records.get(spec.name)
        for shape in record.shapes if record is not None else (golden.reference_shape[1:],):
            if (problem := ctc_problem(spec, tuple(shape))) is not None:
                raise UsageError(f"{root / MANIFEST}: {problem}; fix ctc-blank in [tool.export-check.outputs.{spec.name}]")
    empty = golden.empty_outputs()  # "top-1 100 %" over zero values is no verdict
    if empty:
        name, shape = empty[0]
        raise GoldenError(f"{root / MANIFEST}: output {name} holds no values (shape {shape} per sample): a comparison over nothing "
                          f"would pass; re-record the golden set from a model whose output has values, or set compare = false in "
                          f"[tool.export-check.outputs.{name}]")
    return golden


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
    return "changed" if files.lfs_pointer(data) is None else "lfs-pointer"  # a pointer: never downloaded (`git lfs pull`), not changed


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
            size = declared_sample_bytes(read_verified(root, item.file, item.sha256), item.file, root / item.file)
            total += size
            if total - size <= GOLDEN_MAX_BYTES < total:  # said once, of the sample that crosses it
                raise _over_total(total, root / item.file)
            golden.load_sample(item)
        except GoldenError as exc:
            problems.append(Problem(item.file, str(exc), _classify(root, item.file, item.sha256), item.name))
    try:
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


# GoldenSet and its pieces are defined in goldenset.py; they are named here too, where modules and users
# have imported them from (observe.py, pipeline.py, diagnostics/run.py; CalibrationSplit in the README).
__all__ = [
    "MANIFEST",
    "VERSION_1",
    "VERSION_2",
    "GoldenInput",
    "GoldenSet",
    "OutputRecord",
    "stack_batches",
    "Problem",
    "load_golden",
    "checked_golden",
    "parse_manifest",
    "read_manifest",
    "verify_golden",
    "unreferenced_files",
    "CalibrationSplit",
]
