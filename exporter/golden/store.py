"""Writing a golden set: content-addressed data files, the manifest replaced atomically last.

Data files are content-addressed and never overwritten; ``manifest.json`` is replaced atomically
last, so a writer killed at any point leaves either the old or the new set, both complete. A writer
touches only its own files:

- garbage collection after the commit removes only the files the *previous* manifest named, under
  our own naming (``inputs/...``, ``reference-*.npy|npz``), and only when their bytes still hash to
  what that manifest says: a user's ``inputs/README.txt`` or ``reference-backup.npy`` survives;
- a write that fails (a full disk, say) removes the data files it created and leaves the previous
  set as it was, and says so in one :class:`GoldenError` line;
- no symbolic link inside the golden folder is followed (``inputs`` may not be one; files are read
  through :func:`export_check.files.open_beneath`).

The caller holds the folder's lock (:mod:`export_check.golden.lock`) around the whole read-modify-commit.
``GoldenWriter`` writes one set input by input (``golden record`` streams through it); ``write_golden``
(format 1: one float input, the logits) and ``write_golden_v2`` (a signature, one sample archive per
input entry, the per-sample references in one ``.npz``) write a whole set at once.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from .. import files
from ..errors import GoldenError, one_line
from ..signature import Signature
from .goldenset import MANIFEST, VERSION_1, VERSION_2, GoldenInput, GoldenSet, OutputRecord
from .inputs import Preprocess
from .labels import Label, label_json
from .manifest import FORMAT, INPUTS_DIR, parse_manifest, read_manifest
from .reading import FILE_MAX_BYTES, sha256_bytes

_OUR_REFERENCE = re.compile(r"^reference-[0-9a-f]{12}\.np[yz]$")


def _write_atomic(path: Path, data: bytes) -> None:
    # One module-level writer, so that the fault tests can kill the process between writes.
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_bytes(path, data)


def stored_stem(name: str) -> str:
    """What an input's name becomes in its stored file name ``<stem>.<sha12><suffix>``: two inputs
    with the same stored stem and the same bytes would be one file, so recording refuses them."""
    stem, suffix = os.path.splitext(os.path.basename(name))
    return (re.sub(r"[^A-Za-z0-9_.-]", "_", stem)[:80] or "input") + suffix.lower()


def _content_name(name: str, data: bytes) -> str:
    stem, suffix = os.path.splitext(stored_stem(name))
    return f"{stem}.{sha256_bytes(data)[:12]}{suffix}"


def check_distinct_names(names: Iterable[str], folder: Path) -> None:
    """Refuse, before anything is written, inputs whose names become the same stored name."""
    seen: dict[str, str] = {}
    for name in names:
        stem = stored_stem(name)
        if stem in seen:
            raise GoldenError(f"{folder}: inputs {seen[stem]!r} and {name!r} are both stored as {stem!r} (names keep only letters, "
                              "digits and _.-, the suffix lower-cased); rename one of them")
        seen[stem] = name


@dataclass(frozen=True)
class NewInput:
    name: str
    data: bytes
    label: Label | None = None


def previous_set(root: Path) -> GoldenSet | None:
    """The set ``root`` holds now (its manifest parsed), or None when it holds none we can read."""
    if not (root / MANIFEST).exists() and not (root / MANIFEST).is_symlink():
        return None
    try:
        return read_manifest(root)
    except GoldenError:
        return None


class GoldenWriter:
    """One write of a golden set into ``root``: data files first (content-addressed), the manifest
    last; the caller holds the folder's lock. Use it through :func:`writing`, which removes what a
    failed write created."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.previous = previous_set(root)
        self.entries: list[dict[str, Any]] = []
        self.created: list[Path] = []  # data files this write created, removed if it fails
        self._stems: dict[str, str] = {}

    def _holds(self, rel: str, data: bytes) -> bool:
        """Whether ``rel`` is already a regular file (no link on the way) holding exactly ``data``."""
        try:
            existing = files.read_fd(files.open_beneath(self.root, rel), FILE_MAX_BYTES, self.root / rel)
        except OSError:
            return False
        return existing == data

    def _write(self, rel: str, data: bytes) -> None:
        if self._holds(rel, data):
            return
        target = self.root / rel
        parent = target.parent
        if parent != self.root and (parent.is_symlink() or (parent.exists() and not parent.is_dir())):
            raise GoldenError(f"{parent}: is a symbolic link or not a folder; refused (export-check follows no link inside a golden set), "
                              "remove it and run again")
        existed = os.path.lexists(target)
        try:
            _write_atomic(target, data)
        except OSError as exc:
            raise GoldenError(f"{target}: cannot write ({exc.strerror or exc}); free some space or fix the permissions and run "
                              "again; the golden set is unchanged") from None
        if not existed:
            self.created.append(target)

    def add(self, item: NewInput) -> None:
        """Store one new input (its bytes as given: the ones that were hashed and decoded)."""
        stem = stored_stem(item.name)
        if stem in self._stems:
            raise GoldenError(f"{self.root}: inputs {self._stems[stem]!r} and {item.name!r} are both stored as {stem!r}; rename one of them")
        self._stems[stem] = item.name
        rel = f"{INPUTS_DIR}/{_content_name(item.name, item.data)}"
        self._write(rel, item.data)
        entry: dict[str, Any] = {"name": item.name, "file": rel, "sha256": sha256_bytes(item.data)}
        if item.label is not None:
            entry["label"] = label_json(item.label)
        self.entries.append(entry)

    def keep(self, item: GoldenInput) -> None:
        """Keep an input of the previous set as it is (``approve``): its file and the hash it was verified with."""
        entry: dict[str, Any] = {"name": item.name, "file": item.file, "sha256": item.sha256}
        if item.label is not None:
            entry["label"] = label_json(item.label)
        self.entries.append(entry)

    def _reference(self, data: bytes, suffix: str) -> dict[str, Any]:
        rel = f"reference-{sha256_bytes(data)[:12]}{suffix}"
        self._write(rel, data)
        return {"file": rel, "sha256": sha256_bytes(data)}

    def _header(self, version: int, preprocess: Preprocess | None) -> dict[str, Any]:
        if not self.entries:
            raise GoldenError(f"{self.root}: no inputs to record")
        return {"format": FORMAT, "version": version, "created": datetime.now(UTC).isoformat(timespec="seconds"),
                "preprocess": preprocess.to_json() if preprocess else None}

    def commit_v1(self, preprocess: Preprocess | None, reference: np.ndarray, recording: dict[str, Any], model: dict[str, Any],
                  recorded_with: dict[str, str]) -> GoldenSet:
        """Format 1: the logits, one row per input added or kept."""
        if reference.shape[0] != len(self.entries):
            raise ValueError("one reference row per input")
        manifest = self._header(VERSION_1, preprocess)
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(reference, dtype=np.float32), allow_pickle=False)
        ref = self._reference(buf.getvalue(), ".npy")
        manifest |= {"inputs": self.entries, "reference": ref | {"shape": list(reference.shape), "dtype": "float32"},
                     "recording": recording, "model": model, "recorded_with": recorded_with}
        return self._commit(manifest)

    def commit_v2(self, preprocess: Preprocess | None, signature: Signature, reference: Mapping[str, Sequence[np.ndarray]],
                  recording: dict[str, Any], model: dict[str, Any], recorded_with: dict[str, str]) -> GoldenSet:
        """Format 2: ``reference[output][i]`` is sample ``i``'s approved output without its batch axis."""
        count = len(self.entries)
        if sorted(reference) != sorted(signature.output_names) or any(len(v) != count for v in reference.values()):
            raise ValueError("one reference per output of the signature and sample")
        manifest = self._header(VERSION_2, preprocess)
        arrays = {f"{spec.name}/{i}": value for spec in signature.outputs for i, value in enumerate(reference[spec.name])}
        ref = self._reference(npz_bytes(arrays), ".npz")
        outputs = {}
        for spec in signature.outputs:
            values = reference[spec.name]
            shapes = sorted({tuple(v.shape) for v in values})
            outputs[spec.name] = OutputRecord(dtype=str(values[0].dtype), shapes=tuple(shapes)).to_json()
        manifest |= {"signature": signature.to_json(), "inputs": self.entries,
                     "reference": ref | {"samples": count, "outputs": outputs}, "recording": recording, "model": model,
                     "recorded_with": recorded_with}
        return self._commit(manifest)

    def _commit(self, manifest: dict[str, Any]) -> GoldenSet:
        """Write the manifest (the commit point: until this replace, readers see the previous manifest
        and its files), then remove the previous set's files the new one no longer names."""
        text = json.dumps(manifest, indent=2, allow_nan=False) + "\n"
        golden = parse_manifest(self.root, text)  # what we commit must read back (never a set that verify calls broken)
        self._write(MANIFEST, text.encode("utf-8"))
        self.created = []  # committed: the data files belong to the new set
        _collect_garbage(self.root, self._doomed(golden))
        return golden

    def _doomed(self, new: GoldenSet) -> dict[str, str]:
        """The previous set's files (of our naming) that the new set does not name, with their recorded hashes."""
        if self.previous is None:
            return {}
        named = {item.file for item in new.inputs} | {new.reference_file}
        old = [(item.file, item.sha256) for item in self.previous.inputs]
        old.append((self.previous.reference_file, self.previous.reference_sha256))
        return {rel: sha for rel, sha in old if rel not in named and _ours(rel)}

    def abort(self) -> None:
        """Remove the data files this write created (the previous set never named them)."""
        for path in reversed(self.created):
            with contextlib.suppress(OSError):
                path.unlink()
        self.created = []


def _ours(rel: str) -> bool:
    """Whether ``rel`` is a name export-check gives its data files (nothing else is ever removed)."""
    parts = rel.split("/")
    return (len(parts) == 2 and parts[0] == INPUTS_DIR and not parts[1].startswith(".")) or (
        len(parts) == 1 and bool(_OUR_REFERENCE.match(rel)))


@contextlib.contextmanager
def writing(root: Path) -> Iterator[GoldenWriter]:
    """A :class:`GoldenWriter` for ``root``; if the block fails before the commit, the data files it
    created are removed and the previous set is left as it was."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GoldenError(f"{one_line(str(root))}: cannot create the golden folder ({exc.strerror or exc}); pass --golden a writable "
                          "folder") from None
    writer = GoldenWriter(root)
    try:
        yield writer
    except BaseException:
        writer.abort()
        raise


def _collect_garbage(root: Path, doomed: Mapping[str, str]) -> None:
    """Remove the previous set's files in ``doomed`` (relative path -> the sha256 its manifest
    recorded), each only if it is still a regular file holding exactly those bytes."""
    for rel, sha in doomed.items():
        try:
            data = files.read_fd(files.open_beneath(root, rel), FILE_MAX_BYTES, root / rel)
        except OSError:
            continue  # gone, a link, a FIFO, too big: not ours to remove
        if sha256_bytes(data) == sha:
            with contextlib.suppress(OSError):
                os.unlink(root / rel)


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """An ``.npz`` archive of ``arrays`` whose bytes depend on the arrays alone (``numpy.savez``
    stamps each member with the current time, which would change the content address)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key, array in arrays.items():
            member = io.BytesIO()
            np.save(member, np.asarray(array, order="C"), allow_pickle=False)  # (ascontiguousarray makes a 0-d value 1-D)
            archive.writestr(zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0)), member.getvalue())
    return buf.getvalue()


def _fill(writer: GoldenWriter, inputs: Sequence[NewInput | GoldenInput]) -> None:
    check_distinct_names((item.name for item in inputs if isinstance(item, NewInput)), writer.root)
    for item in inputs:
        if isinstance(item, NewInput):
            writer.add(item)
        else:
            writer.keep(item)


def write_golden(
    root: Path, inputs: Sequence[NewInput | GoldenInput], preprocess: Preprocess | None, reference: np.ndarray, model: dict[str, Any],
    recorded_with: dict[str, str], recording: dict[str, Any] | None = None,
) -> GoldenSet:
    """Write a format-1 set into ``root`` (the caller holds its lock) so that a crash at any point
    leaves the previous one intact. ``inputs``: new ones (bytes) or kept ones of the previous set."""
    if len(inputs) == 0:
        raise GoldenError(f"{root}: no inputs to record")
    with writing(root) as writer:
        _fill(writer, inputs)
        return writer.commit_v1(preprocess, reference, recording or {}, model, recorded_with)


def write_golden_v2(
    root: Path, inputs: Sequence[NewInput | GoldenInput], preprocess: Preprocess | None, signature: Signature,
    reference: Mapping[str, Sequence[np.ndarray]], recording: dict[str, Any], model: dict[str, Any], recorded_with: dict[str, str],
) -> GoldenSet:
    """Write a format-2 set into ``root`` (the caller holds its lock; a crash at any point leaves the previous one intact).

    ``inputs`` are the samples' files as given (sample archives, or images/.npy for one input), or kept
    inputs of the previous set; ``reference[output][i]`` is sample ``i``'s approved output without its batch axis.
    """
    if len(inputs) == 0:
        raise GoldenError(f"{root}: no inputs to record")
    with writing(root) as writer:
        _fill(writer, inputs)
        return writer.commit_v2(preprocess, signature, reference, recording, model, recorded_with)


__all__ = ["GoldenWriter", "NewInput", "check_distinct_names", "npz_bytes", "previous_set", "stored_stem", "write_golden",
           "write_golden_v2", "writing"]
