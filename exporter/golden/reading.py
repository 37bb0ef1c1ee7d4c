"""Bounded reading of a golden set's untrusted files: nothing hangs, nothing unbounded is read.

Every limit a golden set is read under is here, so the docs (docs/explanation/trust-model.md) can list them:

- only regular files are opened, never through a symbolic link below the golden folder
  (:func:`export_check.files.open_beneath`), and opened non-blocking, so a FIFO cannot hang a run;
- a file is read only up to its limit (``MANIFEST_MAX_BYTES``, ``LABELS_MAX_BYTES``,
  ``FILE_MAX_BYTES``), checked on the descriptor before reading;
- JSON is parsed only ``JSON_MAX_DEPTH`` levels deep, with integers of at most
  ``JSON_MAX_INT_DIGITS`` digits (Python's parser would recurse or spend quadratic time);
- a file the manifest names must match the sha256 it gives (:func:`read_verified`: the one call that
  hands a golden file's bytes on); the manifest's paths themselves are checked once, when it is parsed
  (:func:`export_check.golden.manifest.safe_relative`);
- the decoded bounds, each checked beside the parsing it bounds in :mod:`export_check.golden.inputs`:
  an ``.npy`` array's header is read and checked (dtype, shape, the bytes it claims against the bytes
  there are, ``ARRAY_MAX_BYTES``) before numpy allocates anything; ``.npz`` members likewise, each
  decompressed no further than its zip header declares, with the archive's total held to
  ``ARRAY_MAX_BYTES`` (the reference) or ``SAMPLE_MAX_BYTES`` (one sample); every sample of a set
  together declares at most ``GOLDEN_MAX_BYTES`` decoded, summed from the files' headers before any
  is decompressed (``inputs.declared_sample_bytes``, summed by ``manifest.load_golden``).

Every refusal is one :class:`~export_check.errors.GoldenError` line naming the file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from .. import files, parsing
from ..errors import GoldenError

MANIFEST = "manifest.json"
MANIFEST_MAX_BYTES = 64 << 20  # a manifest of 100,000 inputs is about 25 MB
LABELS_MAX_BYTES = 16 << 20
FILE_MAX_BYTES = 1 << 30  # one input file or one reference file
ARRAY_MAX_BYTES = 1 << 30  # one decoded array, or every array of one .npz (the reference of every sample), in memory
# One sample's decoded arrays (an .npz, .safetensors or .npy input): a 4-megapixel float32 RGB image is
# 48 MB. A batch holds batch-size samples, and the model's activations are a multiple of that.
SAMPLE_MAX_BYTES = 64 << 20
# Every sample's decoded arrays in all, as the files' headers declare them (checked before any is
# decompressed): 2,048 float32 RGB images of 224x224 are 1.2 GB.
GOLDEN_MAX_BYTES = 4 << 30
# Samples of one set: a manifest of 100,000 inputs is about 25 MB, so MANIFEST_MAX_BYTES holds about
# 250,000; a bundle's manifest (exporter/bundle_reading.py) is held to this count before it sizes anything.
SAMPLES_MAX = 1 << 20
JSON_MAX_DEPTH = 32  # a manifest nests 6 levels deep
JSON_MAX_INT_DIGITS = parsing.JSON_MAX_INT_DIGITS


def describe(exc: OSError) -> str:
    return exc.strerror or str(exc)


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


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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


def read_user_file(path: Path, limit: int, what: str) -> bytes:
    """A file the user points at (an input to record): a regular file, at most ``limit`` bytes."""
    try:
        return files.read_fd(files.open_regular(path, follow=True), limit, path)
    except FileNotFoundError:
        raise GoldenError(f"{path}: {what} disappeared while recording; run the command again") from None
    except files.UnsafeFile as exc:
        raise GoldenError(f"{path}: {what} {describe(exc)}; refused, replace it with a regular file") from None
    except OSError as exc:
        raise GoldenError(f"{path}: cannot read {what} ({describe(exc)}); check its permissions") from None


# --- JSON --------------------------------------------------------------------------------------


def load_json(text: str, shown: Path, fix: str = "restore it or re-record the golden set") -> Any:
    """Parse untrusted JSON text with bounded depth and integer size, finite numbers only
    (:func:`export_check.parsing.load_json`); one GoldenError line otherwise."""
    return parsing.load_json(text, shown, fix, GoldenError, max_depth=JSON_MAX_DEPTH)


__all__ = [
    "ARRAY_MAX_BYTES",
    "FILE_MAX_BYTES",
    "GOLDEN_MAX_BYTES",
    "SAMPLE_MAX_BYTES",
    "SAMPLES_MAX",
    "JSON_MAX_DEPTH",
    "JSON_MAX_INT_DIGITS",
    "LABELS_MAX_BYTES",
    "MANIFEST",
    "MANIFEST_MAX_BYTES",
    "load_json",
    "read_beneath",
    "read_user_file",
    "read_verified",
    "sha256_bytes",
]
