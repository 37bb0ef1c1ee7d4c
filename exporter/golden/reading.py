"""Bounded reading of a golden set's untrusted files: nothing hangs, nothing unbounded is read.

Every limit a golden set is read under is here, so the docs (docs/explanation/trust-model.md) can list them:

- only regular files are opened, never through a symbolic link below the golden folder
  (:func:`export_check.files.open_beneath`), and opened non-blocking, so a FIFO cannot hang a run;
- a file is read only up to its limit (``MANIFEST_MAX_BYTES``, ``LABELS_MAX_BYTES``,
  ``FILE_MAX_BYTES``), checked on the descriptor before reading;
- JSON is parsed only ``JSON_MAX_DEPTH`` levels deep, with integers of at most
  ``JSON_MAX_INT_DIGITS`` digits (Python's parser would recurse or spend quadratic time);
- an ``.npy`` array's header is read and checked (dtype, shape, the bytes it claims against the bytes
  there are, ``ARRAY_MAX_BYTES``) before numpy allocates anything; ``.npz`` members likewise, each
  decompressed no further than its zip header declares, with the archive's total held to
  ``ARRAY_MAX_BYTES`` (the reference) or ``SAMPLE_MAX_BYTES`` (one sample);
- every sample of a set together declares at most ``GOLDEN_MAX_BYTES`` decoded, summed from the
  files' headers before any is decompressed (:func:`declared_bytes`, :func:`sample_declared_bytes`);
- a file the manifest names must match the sha256 it gives (:func:`read_verified`); the manifest's paths
  themselves are checked once, when it is parsed (:func:`export_check.golden.manifest.safe_relative`).

Every refusal is one :class:`~export_check.errors.GoldenError` line naming the file.
"""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

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
_NPY_HEADER_MAX = 10_000  # numpy's own default limit for header text


def describe(exc: OSError) -> str:
    return exc.strerror or str(exc)


# A Git LFS pointer (https://github.com/git-lfs/git-lfs/blob/main/docs/spec.md): under 1024 bytes, its
# first line the spec's URL; a checkout without `git lfs pull` holds these instead of the files.
_LFS_VERSIONS = (b"version https://git-lfs.github.com/spec/", b"version https://hawser.github.com/spec/")
_LFS_POINTER_MAX = 1024


def lfs_pointer(data: bytes) -> str | None:
    r"""What to say about a Git LFS pointer file standing in for a golden file, or None if ``data`` is not one.

    >>> lfs_pointer(b"version https://git-lfs.github.com/spec/v1\noid sha256:ab12cd34ef56ab12\nsize 2048\n")[:65]
    'is a Git LFS pointer, not the file (2,048 bytes, oid ab12cd34ef56'
    """
    if len(data) >= _LFS_POINTER_MAX or not data.startswith(_LFS_VERSIONS):
        return None
    size = re.search(rb"^size (\d{1,20})$", data, re.M)
    oid = re.search(rb"^oid sha256:([0-9a-f]{12})", data, re.M)
    facts = ", ".join(([f"{int(size.group(1)):,} bytes"] if size else []) + ([f"oid {oid.group(1).decode()}…"] if oid else []))
    return (f"is a Git LFS pointer, not the file{f' ({facts})' if facts else ''}: the checkout did not download it; run "
            "`git lfs pull` (in GitHub Actions: actions/checkout with `lfs: true`), then rerun")


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
    pointer = lfs_pointer(data)
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


# --- arrays ------------------------------------------------------------------------------------


def npy_header(data: bytes, shown: Path, what: str = "array", fix: str = "replace it or re-record") -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, data offset)`` of an ``.npy`` file's bytes, checked before anything is allocated:
    a readable header, no object dtype, and exactly as many data bytes as the header claims, at most
    ``ARRAY_MAX_BYTES``. ``fix`` ends each refusal (a bundle's member says its own)."""
    fmt = np.lib.format
    buf = io.BytesIO(data)
    try:
        version = fmt.read_magic(buf)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(buf, max_header_size=_NPY_HEADER_MAX)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = fmt.read_array_header_2_0(buf, max_header_size=_NPY_HEADER_MAX)
        else:
            raise ValueError(f"unknown .npy version {version}")
    except Exception as exc:  # a crafted header can raise ValueError, SyntaxError, TypeError, ...
        reason = " ".join(str(exc).split())[:120]
        raise GoldenError(f"{shown}: not a readable .npy {what} ({type(exc).__name__}: {reason}); {fix}") from None
    if dtype.hasobject:
        raise GoldenError(f"{shown}: holds pickled data or object arrays, which export-check never loads; save plain numeric arrays")
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise GoldenError(f"{shown}: .npy header has shape {shape!r}; {fix}")
    count = 1
    for d in shape:
        count *= d
    claimed = count * dtype.itemsize
    if claimed > ARRAY_MAX_BYTES:
        raise GoldenError(f"{shown}: .npy header claims {dtype} {tuple(shape)}, {claimed:,} bytes, over the {ARRAY_MAX_BYTES:,}-byte "
                          f"memory budget; {fix}")
    offset = buf.tell()
    if len(data) - offset != claimed:
        raise GoldenError(f"{shown}: .npy header claims {dtype} {tuple(shape)} ({claimed:,} bytes) but the file holds "
                          f"{len(data) - offset:,} bytes of data; {fix}")
    return tuple(shape), dtype, offset


def load_npy(data: bytes, shown: Path, what: str = "array", fix: str = "replace it or re-record") -> np.ndarray:
    """An ``.npy`` file's array, its header checked first (:func:`npy_header`), no pickles."""
    npy_header(data, shown, what, fix)
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:  # the header was checked; a damaged body can still fail
        reason = " ".join(str(exc).split())[:120]
        raise GoldenError(f"{shown}: not a readable .npy {what} ({type(exc).__name__}: {reason}); {fix}") from None
    if not isinstance(array, np.ndarray):
        raise GoldenError(f"{shown}: not a .npy {what}; {fix}")
    return array


def declared_bytes(data: bytes, name: str, shown: Path) -> int:
    """The decoded size a sample file's own headers declare, read without decompressing anything: an
    ``.npz``'s members' uncompressed sizes, an ``.npy``'s array, a ``.safetensors`` file's bytes; 0 for an
    image (bounded by its pixel count when decoded). A file that cannot be read so declares 0 here
    and is refused, naming it, when it is decoded."""
    lower = name.lower()
    if lower.endswith(".npz"):
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                return sum(info.file_size for info in archive.infolist())
        except Exception:  # not a zip: its decoding says so
            return 0
    if lower.endswith(".npy"):
        try:
            shape, dtype, _ = npy_header(data, shown)
        except GoldenError:
            return 0
        return int(np.prod(shape, dtype=object)) * dtype.itemsize
    return len(data) if lower.endswith(".safetensors") else 0


def check_sample_size(size: int, shown: Path, declared: str = "declares") -> None:
    """One sample's decoded size within ``SAMPLE_MAX_BYTES``, or one GoldenError line naming it."""
    if size > SAMPLE_MAX_BYTES:
        raise GoldenError(f"{shown}: {declared} {size:,} bytes of arrays once decompressed, over the {SAMPLE_MAX_BYTES:,} bytes one "
                          "sample may hold; replace it or re-record")


def sample_declared_bytes(root: Path, rel: str, expected: str) -> int:
    """The decoded bytes the sample file ``rel`` declares (:func:`declared_bytes`), the file read and
    hash-checked; one GoldenError naming it when that is over ``SAMPLE_MAX_BYTES``."""
    shown = root / rel
    size = declared_bytes(read_verified(root, rel, expected), rel, shown)
    check_sample_size(size, shown)
    return size


def load_npz(data: bytes, shown: Path, what: str = "sample", budget: int = ARRAY_MAX_BYTES) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` archive's bytes, by key (member name less ``.npy``), each member's
    declared size and header checked before it is decompressed or allocated, its decompressed size
    held to the declared one; the total held to ``budget`` (``SAMPLE_MAX_BYTES`` for a sample)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except Exception:
        if data[:1] == b"\x80":  # a pickle's protocol opcode: numpy would have to unpickle it
            raise GoldenError(f"{shown}: holds pickled data or object arrays, which export-check never loads; save plain numeric arrays "
                              "with numpy.savez(name=array, ...)") from None
        if data[:6] == b"\x93NUMPY":
            raise GoldenError(f"{shown}: not an .npz archive (holds one bare array); save the {what} with numpy.savez(name=array, ...)") \
                from None
        raise GoldenError(f"{shown}: not a readable .npz archive of arrays (not a zip file); replace it or re-record") from None
    arrays: dict[str, np.ndarray] = {}
    left = budget
    with archive:
        declared = sum(info.file_size for info in archive.infolist())
        if declared > budget:  # before anything is decompressed
            raise GoldenError(f"{shown}: declares {declared:,} bytes of arrays once decompressed, over the {budget:,} bytes one {what} "
                              "may hold; replace it or re-record")
        for info in archive.infolist():
            member = f"{shown}: member {info.filename!r}"
            if not info.filename.endswith(".npy"):
                raise GoldenError(f"{member} is not an array (an .npz holds .npy members only); replace it or re-record")
            if info.file_size > left:
                raise GoldenError(f"{member} is {info.file_size:,} bytes uncompressed, over the {budget:,}-byte memory budget "
                                  "of one archive; replace it or re-record")
            try:
                with archive.open(info) as fh:
                    raw = fh.read(info.file_size + 1)
            except Exception as exc:  # bad CRC, unsupported compression, truncated data
                raise GoldenError(f"{member} cannot be extracted ({type(exc).__name__}: {' '.join(str(exc).split())[:120]}); "
                                  "replace it or re-record") from None
            if len(raw) > info.file_size:
                raise GoldenError(f"{member} holds more than the size its zip header says; replace it or re-record")
            left -= len(raw)
            arrays[info.filename[: -len(".npy")]] = load_npy(raw, shown, f"array ({info.filename})")
    return arrays


__all__ = [
    "ARRAY_MAX_BYTES",
    "FILE_MAX_BYTES",
    "GOLDEN_MAX_BYTES",
    "SAMPLE_MAX_BYTES",
    "SAMPLES_MAX",
    "check_sample_size",
    "declared_bytes",
    "JSON_MAX_DEPTH",
    "JSON_MAX_INT_DIGITS",
    "LABELS_MAX_BYTES",
    "MANIFEST",
    "MANIFEST_MAX_BYTES",
    "load_json",
    "load_npy",
    "load_npz",
    "npy_header",
    "read_beneath",
    "read_user_file",
    "read_verified",
    "sample_declared_bytes",
    "sha256_bytes",
]
