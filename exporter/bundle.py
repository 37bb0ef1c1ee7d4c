"""Bundles: what a check built, packed with the golden data it was judged on, to be judged again on the
machine where it is deployed (``export-check check --bundle PATH``, then ``export-check replay PATH``).

A bundle is one zip file whose bytes are the same for the same inputs: members in a fixed order, each
with a fixed timestamp and mode, stored uncompressed. It holds

* ``bundle.json``: what the replay needs and where it came from: the gates, the signature (input and
  output names, batch axes, output kinds), the batches (start, size) at the check's batch size, the
  calibration split, each artifact (kind, family, file, sha256, the row's details and the build
  machine's verdict and figures), the provenance (checkpoint and golden manifest sha256, tool and library
  versions, the build machine's CPU flags) and the sha256 of every other member;
* ``artifacts/<kind><suffix>``: each judged artifact's file, as the check reloaded it, and the files beside it
  that belong to it (artifacts/parts.py: an ONNX graph's external weights, ``artifacts/<kind>.onnx.data``),
  named in its ``parts``;
* ``inputs/<start>/<name>.npy``: the golden inputs, preprocessed, batch by batch (arrays: no pickles);
* ``eager/<start>/<output>.npy``: the outputs each artifact is compared with: the eager model's on the
  build machine, batch by batch.

``bundle.json`` is sealed as the JSON reports are (``report/seal.py``: HMAC-SHA256 under the cache key,
its own domain), and names every other member's sha256: a bundle altered by one byte, or sealed under
another key, is refused with one line before anything in it is used. A device lab shares the key as CI
shards do (``EXPORT_CHECK_CACHE_KEY_FILE``).

Reading needs numpy only (no torch): :func:`open_bundle`.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from . import __version__
from .errors import UsageError
from .files import zip_entry
from .golden.labels import label_json
from .report.seal import sealed_with, verified, writer_key

SCHEMA = "export-check-bundle"
VERSION = 1
MANIFEST = "bundle.json"
DOMAIN = b"export-check bundle\0"
MAX_MANIFEST_BYTES = 64 << 20
FIX = "pass a bundle written by `export-check check --bundle`, unedited"


def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, np.ascontiguousarray(array), allow_pickle=False)
    return out.getvalue()


def _write_atomic(path: Path, data: bytes, out_dir: Path | None = None) -> None:
    """``data`` at ``path``, whole or not at all (files.replacing); inside ``out_dir`` (the check's ``--out``)
    following no link there (``nofollow.write_inside``: a planted one is refused in one line)."""
    from .files import replacing
    from .nofollow import Refused, within, write_inside

    found = within(path, out_dir)
    if found is not None:
        try:
            write_inside(*found, data)
        except Refused as exc:
            raise UsageError(f"--bundle {exc}") from None
        return
    with replacing(path) as tmp:
        tmp.write_bytes(data)


@dataclass(frozen=True)
class BundledArtifact:
    """One artifact of a bundle: its kind's row name, its file in the bundle, and how the build machine judged it."""

    name: str
    family: str
    file: str
    sha256: str
    size_bytes: int
    details: tuple[tuple[str, str], ...]
    build_status: str
    build_metrics: dict[str, Any] | None
    parts: tuple[tuple[str, str], ...] = ()  # the members beside ``file`` that belong to it (its ONNX .data), with their sha256

    def to_json(self) -> dict[str, Any]:
        shown = {"name": self.name, "family": self.family, "file": self.file, "sha256": self.sha256, "size_bytes": self.size_bytes,
                 "details": dict(self.details), "build": {"status": self.build_status, "metrics": self.build_metrics}}
        return {**shown, "parts": [member for member, _ in self.parts]} if self.parts else shown


def write_bundle(path: Path, manifest: dict[str, Any], artifacts: list[tuple[BundledArtifact, Path]],
                 batches: Iterator[tuple[int, dict[str, np.ndarray], dict[str, np.ndarray]]], cache_root: Path | None = None,
                 signer: Any = None, out_dir: Path | None = None) -> int:
    """Write the bundle to ``path`` atomically: ``manifest`` (the facts of ``bundle.json`` but the members
    and artifacts), the artifact files (checked against their sha256 as they are copied) and, per batch,
    ``(start, inputs, eager outputs)``. Returns its size in bytes. Signed with ``signer`` (report/signing.Signer,
    ``--sign-key``), else sealed with the cache key; refuses (one line) without a key to seal it."""
    key, note = writer_key(cache_root) if signer is None else (None, None)
    if key is None and signer is None:
        raise UsageError((note or "no cache key").replace("the JSON report is not sealed", "the bundle cannot be sealed")
                         .replace("`export-check merge` will refuse it", "a replay could not trust it"))
    members: dict[str, bytes] = {}
    for artifact, source in artifacts:
        data = source.read_bytes()
        if hashlib.sha256(data).hexdigest() != artifact.sha256:
            raise UsageError(f"{source}: changed since the check judged it (its sha256 differs); run the check again before bundling")
        members[artifact.file] = data
        for member, sha in artifact.parts:  # read whole, as the file is: a bundle of a model past 2 GiB needs that much memory
            part = source.with_name(Path(member).name).read_bytes()
            if hashlib.sha256(part).hexdigest() != sha:
                raise UsageError(f"{source.with_name(Path(member).name)}: changed since the check judged it (its sha256 differs); "
                                 "run the check again before bundling")
            members[member] = part
    spans = []
    for start, inputs, eager in batches:
        spans.append([start, int(next(iter(inputs.values())).shape[0]) if inputs else 0])
        for name, array in sorted(inputs.items()):
            members[f"inputs/{start:08d}/{name}.npy"] = _npy(array)
        for name, array in sorted(eager.items()):
            members[f"eager/{start:08d}/{name}.npy"] = _npy(array)
    body = {**manifest, "schema": SCHEMA, "bundle_version": VERSION, "tool_version": __version__, "batches": spans,
            "artifacts": [a.to_json() for a, _ in artifacts],
            "members": {name: hashlib.sha256(data).hexdigest() for name, data in members.items()},
            "member_bytes": {name: len(data) for name, data in members.items()}}  # checked before a replay inflates one
    text = json.dumps(body, indent=1, sort_keys=True, allow_nan=False) + "\n"
    text = signer.sign(text, DOMAIN) if key is None else sealed_with(text, key, DOMAIN)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(zip_entry(MANIFEST, zipfile.ZIP_STORED), text.encode("utf-8"))
        for name, data in members.items():
            archive.writestr(zip_entry(name, zipfile.ZIP_STORED), data)
    _write_atomic(path, out.getvalue(), out_dir)
    return out.tell()


def bundle_check(config: Any, report: Any, path: Path, progress: Callable[[str], None] = lambda _: None,
                 signer: Any = None) -> tuple[int, int]:
    """Write the bundle of the check ``config`` whose report is ``report`` (``check --bundle PATH``):
    every artifact the check judged (a pass or a fail), or built and could not judge here (a kind whose
    runtime does not run on this system: Core ML off macOS; not an error, nor a kind without a file), the
    golden inputs batch by batch at the check's batch size, and eager's outputs on them, computed here
    again (the model is deterministic on one machine: the check's self-check said so). Returns
    (artifacts bundled, bytes)."""
    import dataclasses

    from .artifacts import KINDS_BY_NAME
    from .golden.manifest import load_golden
    from .model import EagerRunner, load_model, pinned_threads
    from .results import FAIL, NOT_APPLICABLE, PASS
    from .signature import SINGLE
    from .versions import cpu_flags

    golden = load_golden(config.golden)
    checked = config.signature_settings.at_check(golden.signature)
    if checked != golden.signature:
        golden = dataclasses.replace(golden, signature=checked)
    signature = golden.signature
    compared = tuple(o.name for o in signature.compared_outputs())
    artifacts = []
    for row in report.rows:
        # judged here, or built and not judgeable here (Core ML off macOS): the target judges it
        if row.name not in KINDS_BY_NAME or row.artifact is None or row.status not in (PASS, FAIL, NOT_APPLICABLE):
            continue
        headline = row.metrics
        figures = None if headline is None else {k: headline.to_json()[k] for k in ("mae", "max_abs", "relative_mae", "top1_agreement")}
        artifacts.append((BundledArtifact(name=row.name, family=row.family, file=f"artifacts/{row.name}{KINDS_BY_NAME[row.name].suffix}",
                                          sha256=row.artifact.sha256, size_bytes=row.artifact.size_bytes, details=row.details,
                                          build_status=row.status, build_metrics=figures,
                                          parts=tuple((f"artifacts/{n}", sha) for n, _, sha in row.artifact.parts)), Path(row.artifact.path)))
    if not artifacts:
        raise UsageError(f"--bundle {path}: the check judged no artifact (every row an error or not applicable); nothing to bundle")
    progress(f"bundle: eager over the golden set again, for the {len(artifacts)} artifacts' references")
    model = load_model(config.checkpoint, config.arch, config.arch_kwargs, config.arch_root, [])
    runner = EagerRunner(model, signature)

    def batches() -> Iterator[tuple[int, dict[str, np.ndarray], dict[str, np.ndarray]]]:
        with pinned_threads(config.threads):
            for start, feeds in golden.feed_batches(config.batch_size):
                out = runner.infer(feeds)
                yield start, feeds, {name: np.asarray(out[name]) for name in compared}

    manifest = {
        "provenance": {"checkpoint": report.checkpoint.to_json(), "golden": {k: v for k, v in report.golden.to_json().items()
                                                                             if k != "eager_label_accuracy"},
                       "versions": dict(report.versions), "cpu_flags": cpu_flags() or "unknown"},
        "thresholds": config.thresholds.to_json(),
        "settings": {"batch_size": config.batch_size, "threads": config.threads, "fp16_optimization": config.fp16_optimization},
        "signature": None if signature is SINGLE else signature.to_json(),
        "samples": len(golden),
        "calibration": {"indices": list(golden.calibration_indices()), "split": golden.calibration.describe()},
        "labels": [label_json(item.label) for item in golden.inputs],  # the task accuracy of each row, at the target too
    }
    size = write_bundle(path, manifest, artifacts, batches(), config.cache_dir, signer, out_dir=config.out_dir)
    return len(artifacts), size


class Bundle:
    """A bundle opened and authenticated: ``manifest`` (``bundle.json``, its seal checked), members read
    on demand, bounded (exporter/bundle_reading.py) and checked against the sha256 the manifest names."""

    def __init__(self, path: Path, archive: zipfile.ZipFile, manifest: dict[str, Any], source: IO[bytes] | None = None) -> None:
        self.path, self._archive, self.manifest, self._source = path, archive, manifest, source
        self._members: dict[str, str] = manifest["members"]
        self._sizes: dict[str, int] = manifest.get("member_bytes") or {}  # absent from a bundle written before it was recorded

    def _stream(self, name: str, sink: Callable[[bytes], object]) -> None:
        from .bundle_reading import stream_member

        expected = self._members.get(name)
        if expected is None:
            raise UsageError(f"{self.path}: names no member {name}; {FIX}")
        if stream_member(self._archive, name, self._sizes.get(name), sink, self.path, FIX) != expected:
            raise UsageError(f"{self.path}: member {name} was altered (its sha256 differs from the sealed manifest's); {FIX}")

    def read(self, name: str) -> bytes:
        out = bytearray()
        self._stream(name, out.extend)
        return bytes(out)

    def array(self, name: str) -> np.ndarray:
        from .errors import GoldenError
        from .golden.inputs import load_npy

        try:  # the golden set's reader: its header checked before numpy allocates anything
            return load_npy(self.read(name), Path(f"{self.path}: member {name}"), "array", FIX)
        except GoldenError as exc:
            raise UsageError(str(exc)) from None

    def batches(self, outputs: tuple[str, ...], inputs: tuple[str, ...]) -> Iterator[tuple[int, dict[str, np.ndarray], dict[str, np.ndarray]]]:
        """``(start, inputs, eager outputs)`` for each batch, read one batch at a time."""
        for start, _ in self.manifest["batches"]:
            yield (start, {n: self.array(f"inputs/{start:08d}/{n}.npy") for n in inputs},
                   {n: self.array(f"eager/{start:08d}/{n}.npy") for n in outputs})

    def extract(self, name: str, dest: Path) -> Path:
        """The member streamed to ``dest`` (atomically, never held whole in memory), for a runtime that loads a path."""
        from .files import replacing

        with replacing(dest) as tmp, open(tmp, "wb") as fh:
            self._stream(name, fh.write)
        return dest

    def close(self) -> None:
        self._archive.close()
        if self._source is not None:
            self._source.close()


def bundle_key() -> Any:
    """The key a replay checks a bundle's seal with: the existing key file (a new one could prove nothing)."""
    from .cache.secret import KEY_ENV, key_file_path, load_key
    from .config import default_cache_dir

    where = key_file_path()
    if not where.exists():
        raise UsageError(f"no cache key at {where}; replay where the key the bundle was sealed with is: set {KEY_ENV} to the "
                         "device lab's key file (docs/how-to/replay-on-device.md)")
    return load_key(default_cache_dir())


def open_bundle(path: Path, key: Callable[[], Any] = bundle_key, public: Any = None) -> Bundle:
    """The bundle at ``path`` (a regular file: exporter/bundle_reading.py), its manifest's seal checked under
    this machine's key, or its Ed25519 signature under ``public`` (report/signing.PublicKeys, ``--verify-key``),
    or one UsageError line."""
    from .bundle_reading import check_counts, open_archive

    archive, source = open_archive(path, FIX)
    try:
        manifest = _manifest(path, archive, key, public)
        check_counts(manifest, f"{path}: {MANIFEST}", FIX)
    except BaseException:
        archive.close()
        source.close()
        raise
    return Bundle(path, archive, manifest, source)


def _manifest(path: Path, archive: zipfile.ZipFile, key: Callable[[], Any], public: Any) -> dict[str, Any]:
    from .bundle_reading import stream_member
    from .parsing import load_json

    raw = bytearray()
    try:
        info = archive.getinfo(MANIFEST)
    except KeyError:
        raise UsageError(f"{path}: holds no {MANIFEST}; {FIX}") from None
    if info.file_size > MAX_MANIFEST_BYTES:
        raise UsageError(f"{path}: its {MANIFEST} is {info.file_size} bytes, over {MAX_MANIFEST_BYTES}; {FIX}")
    stream_member(archive, MANIFEST, None, raw.extend, path, FIX)
    body = verified(path, bytes(raw), key, domain=DOMAIN, wrote=FIX, public=public, signed_only=public is not None)
    manifest = load_json(body.decode("utf-8"), path, FIX)
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA or manifest.get("bundle_version") != VERSION:
        raise UsageError(f"{path}: not an export-check bundle of version {VERSION}; {FIX}")
    members, sizes = manifest.get("members"), manifest.get("member_bytes", {})
    if not isinstance(members, dict) or not isinstance(sizes, dict) or not all(isinstance(v, int) for v in sizes.values()):
        raise UsageError(f"{path}: {MANIFEST} names no members and their sizes; {FIX}")
    extra = sorted(set(archive.namelist()) - set(members) - {MANIFEST})
    if extra:
        raise UsageError(f"{path}: holds {extra[0]}, which its sealed manifest does not name; {FIX}")
    return manifest


__all__ = ["BundledArtifact", "Bundle", "open_bundle", "write_bundle"]
