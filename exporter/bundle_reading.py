"""Bounded reading of a bundle (exporter/bundle.py): nothing a bundle holds, sealed or not, makes a replay
read without end, hang, or allocate what the bundle merely claims.

- The bundle is opened as a regular file only: non-blocking, its type checked on the descriptor
  (``files.open_regular``), so a FIFO, a device or a directory is one line at once, never a read of
  ``/dev/zero`` until the kernel ends it nor an open that waits for a writer.
- Each member's size, as the zip's central directory declares it, is checked before anything is
  inflated: against the size the sealed manifest names (``member_bytes``; a bundle written before it
  existed names none) and against the cap of its kind (``ARTIFACT_MAX_BYTES`` for an artifact's file,
  the golden set's ``ARRAY_MAX_BYTES`` for an array). Inflation then streams ``CHUNK`` bytes at a time,
  hashed as it goes, and stops one byte past the declared size (``zipfile`` itself stops at the
  central directory's size): a 3 MB member declaring 1 GiB is refused before one byte is inflated.
- An array member is read by the golden set's ``.npy`` reader (``golden/inputs.py``: the header's
  dtype, shape and claimed bytes checked before numpy allocates); the manifest's counts (samples,
  batches, calibration indices) are checked against each other and the golden set's ``SAMPLES_MAX``
  before anything is sized by them.

Every refusal is one :class:`~export_check.errors.UsageError` line naming the bundle and the fix.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from . import files
from .errors import UsageError
from .golden.reading import ARRAY_MAX_BYTES, SAMPLES_MAX, describe

CHUNK = 1 << 20
# One artifact file of a bundle: the largest single-file export we know of in use (a 7B-parameter
# model in fp16 is 14 GB) fits; anything past it is not an artifact the tool wrote.
ARTIFACT_MAX_BYTES = 32 << 30
_NPY_HEADER_BYTES = 1 << 16  # an .npy header is at most numpy's 10,000 characters, padded


def open_archive(path: Path, fix: str) -> tuple[zipfile.ZipFile, IO[bytes]]:
    """The zip at ``path`` and the file it reads, opened as a regular file only (one line otherwise)."""
    try:
        fd = files.open_regular(path, follow=True)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such bundle; {fix}") from None
    except files.UnsafeFile as exc:
        raise UsageError(f"{path}: {describe(exc)}; a bundle is read from a regular file: {fix}") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the bundle ({describe(exc)}); check its permissions") from None
    fh = os.fdopen(fd, "rb")
    try:
        return zipfile.ZipFile(fh), fh
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        fh.close()
        raise UsageError(f"{path}: not a bundle ({exc}); {fix}") from None


def member_cap(name: str) -> int:
    """The most bytes member ``name`` may inflate to: an array's (the golden set's bound and its header), or an artifact's."""
    return ARRAY_MAX_BYTES + _NPY_HEADER_BYTES if name.endswith(".npy") else ARTIFACT_MAX_BYTES


def stream_member(archive: zipfile.ZipFile, name: str, declared: int | None, sink: Callable[[bytes], object], shown: Path,
                  fix: str) -> str:
    """Member ``name`` inflated into ``sink`` piece by piece, never past the size the sealed manifest
    declares (``declared``) nor its cap; returns its sha256. One UsageError line otherwise."""
    where = f"{shown}: member {name}"
    try:
        info = archive.getinfo(name)
    except KeyError:
        raise UsageError(f"{where} is missing from the zip; {fix}") from None
    cap = member_cap(name)
    if declared is not None and info.file_size != declared:
        raise UsageError(f"{where} declares {info.file_size:,} bytes, the sealed manifest {declared:,}: altered; {fix}")
    limit = min(cap, info.file_size)
    if info.file_size > cap:
        raise UsageError(f"{where} declares {info.file_size:,} bytes, over the {cap:,} bytes a bundle member may hold; {fix}")
    digest, got = hashlib.sha256(), 0
    try:
        with archive.open(info) as fh:
            while piece := fh.read(min(CHUNK, limit - got + 1)):
                got += len(piece)
                if got > limit:
                    raise UsageError(f"{where} inflates past the {limit:,} bytes it declares; {fix}")
                digest.update(piece)
                sink(piece)
    except zipfile.BadZipFile as exc:  # its CRC-32 no longer matches: altered (a forged CRC meets the sha256 after)
        raise UsageError(f"{where} was altered ({exc}); {fix}") from None
    except (OSError, ValueError, EOFError, NotImplementedError, RuntimeError) as exc:  # truncated, an unknown method, encrypted
        raise UsageError(f"{where} cannot be read ({type(exc).__name__}: {' '.join(str(exc).split())[:120]}); {fix}") from None
    return digest.hexdigest()


def _int(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def check_counts(manifest: dict[str, Any], where: str, fix: str) -> None:
    """The manifest's counts consistent and bounded before anything is sized by them: ``samples`` at most
    the golden set's ``SAMPLES_MAX``, the batches covering them in order, each at most the batch size, the
    calibration indices among the samples."""
    samples, settings = manifest.get("samples"), manifest.get("settings")
    if not _int(samples, 1, SAMPLES_MAX):
        raise UsageError(f"{where}: samples is {str(samples)[:40]}, not a count from 1 to {SAMPLES_MAX:,} (the golden set's bound); {fix}")
    size = settings.get("batch_size") if isinstance(settings, dict) else None
    if not _int(size, 1, SAMPLES_MAX):
        raise UsageError(f"{where}: settings.batch_size is {str(size)[:40]}, not a batch size from 1 to {SAMPLES_MAX:,}; {fix}")
    assert isinstance(size, int)
    batches, start = manifest.get("batches"), 0
    if not isinstance(batches, list):
        raise UsageError(f"{where}: no list of batches; {fix}")
    for i, batch in enumerate(batches):
        if not (isinstance(batch, list) and len(batch) == 2 and batch[0] == start and _int(batch[1], 1, size)):
            raise UsageError(f"{where}: batches[{i}] is not [{start}, 1..{size}]; {fix}")
        start += batch[1]
    if start != samples:
        raise UsageError(f"{where}: the batches hold {start:,} samples, the manifest says {samples:,}; {fix}")
    indices = (manifest.get("calibration") or {}).get("indices") if isinstance(manifest.get("calibration"), dict) else None
    if not isinstance(indices, list) or not all(_int(i, 0, samples - 1) for i in indices):
        raise UsageError(f"{where}: calibration.indices are not sample indices below {samples:,}; {fix}")


__all__ = ["ARTIFACT_MAX_BYTES", "CHUNK", "check_counts", "member_cap", "open_archive", "stream_member"]
