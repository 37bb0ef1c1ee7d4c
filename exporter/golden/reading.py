"""The bounds a golden set's untrusted files are read under: nothing hangs, nothing unbounded is read.

Every limit a golden set is read under is here, so the docs (docs/explanation/trust-model.md) can list them
(a set's own files are read by :mod:`export_check.golden.goldenset`, beside the set they make; a file the user
points at to record, and JSON, here):

- only regular files are opened, never through a symbolic link below the golden folder
  (:func:`export_check.files.open_beneath`, by :func:`export_check.golden.goldenset.read_beneath`), and opened
  non-blocking, so a FIFO cannot hang a run;
- a file is read only up to its limit (``MANIFEST_MAX_BYTES``, ``LABELS_MAX_BYTES``,
  ``FILE_MAX_BYTES``), checked on the descriptor before reading;
- JSON is parsed only ``JSON_MAX_DEPTH`` levels deep, with integers of at most
  ``JSON_MAX_INT_DIGITS`` digits (Python's parser would recurse or spend quadratic time);
- a file the manifest names must match the sha256 it gives (:func:`export_check.golden.goldenset.read_verified`:
  the one call that hands a golden file's bytes on); the manifest's paths themselves are checked once, when it is parsed
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


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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
    "read_user_file",
    "sha256_bytes",
]
