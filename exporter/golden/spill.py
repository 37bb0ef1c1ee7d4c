"""A golden set too large to hold, decoded once into an unnamed temporary file and read back a batch at a time.

A run reads the golden batches once per replay pass (eager's, then one per artifact with ``--jobs 2``), and
decoding (read, hash, decode, preprocess) is most of a small model's replay. A set whose decoded inputs fit
``batches.memory_budget()`` is held in memory; a larger one is written here as it is decoded the first time,
and every later pass reads it back with ``os.preadv`` into fresh arrays: the same bytes, dtypes and shapes,
so every number is the same to the bit, and the run's memory is a batch, not the set. The pages read go
through the page cache (reclaimable, in no process's PSS), not a mapping that would grow with the set.

The file is made by ``tempfile.TemporaryFile`` (``O_TMPFILE`` where the kernel has it: no name, nothing left
behind by a killed run; ``TMPDIR`` chooses its folder) and is as large as the decoded set: 8,192 inputs of
3x224x224 float32 are 4.9 GB. Measured (benchmarks/check_memory.py): BENCHMARKS.md, "Golden sets of any size".
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping

import numpy as np

# One array of a batch: its input name, dtype, shape, and where its bytes start in the file.
Entry = tuple[str, np.dtype, tuple[int, ...], int]


class SpilledBatches:
    """Batches written with ``add`` (in order), re-read by iteration as ``(start, {name: array})``; ``close`` frees the file.
    Plain numbers only: an object array has no bytes to write (``GoldenBatches`` streams such a set instead)."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="export-check-golden-")  # noqa: SIM115  (open until close(): the run reads it pass after pass)
        self._batches: list[tuple[int, tuple[Entry, ...]]] = []
        self._end = 0

    def add(self, start: int, feeds: Mapping[str, np.ndarray]) -> None:
        entries = []
        for name, value in feeds.items():
            array = np.asarray(value)
            array = array if array.flags.c_contiguous else array.copy(order="C")  # (ascontiguousarray makes a 0-d array 1-d)
            entries.append((name, array.dtype, tuple(array.shape), self._end))
            self._file.write(array.reshape(-1).view(np.uint8).data)
            self._end += array.nbytes
        self._batches.append((start, tuple(entries)))

    def finish(self) -> None:
        self._file.flush()

    def __len__(self) -> int:
        return len(self._batches)

    def __iter__(self) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        fd = self._file.fileno()
        for start, entries in self._batches:
            yield start, {name: _read(fd, dtype, shape, offset) for name, dtype, shape, offset in entries}

    def close(self) -> None:
        self._file.close()


def _read(fd: int, dtype: np.dtype, shape: tuple[int, ...], offset: int) -> np.ndarray:
    array = np.empty(shape, dtype)
    view = array.reshape(-1).view(np.uint8)  # the array's own bytes (reshape of a fresh array is a view)
    done = 0
    while done < len(view):  # a read may return less than asked (and at most ~2 GiB)
        got = os.preadv(fd, [view[done:].data], offset + done)
        if got <= 0:
            raise OSError(f"the golden set's spill file ended at byte {offset + done} of {offset + len(view)}")
        done += got
    return array
