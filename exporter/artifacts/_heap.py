"""Keep freed memory in the process heap while a torch artifact runs, so a batch reuses the last one's pages.

A torch module reloaded from its file allocates every activation afresh on each call. glibc serves an
allocation above its mmap threshold (at most 32 MB) with a new ``mmap`` and returns it to the system
on free, so a ResNet-50 at batch size 16 (activations of 25-51 MB) takes about 25,000 minor page
faults per image, each a kernel-zeroed page: 790,000 faults and 9.8 s of CPU for 32 images against
5.5 s without them (measured 2026-12-01, benchmarks/large.py, 2 shared cores). The straight-line
baseline (benchmarks/baseline_large.py) never paid this: its in-process ``torch.onnx.export`` leaves a
large free block in the heap that later activations are carved from, 0 faults. export-check builds
in another process (exporter/builder/isolation.py), so its replay had no such block.

``reused_heap`` makes the reuse deliberate instead of an accident of what ran before: while a torch
runner is open, glibc takes every allocation from the heap (``M_MMAP_MAX`` 0) and does not trim it
(``M_TRIM_THRESHOLD`` 1 GB), so from the second batch on the pages are reused (0 faults, the
baseline's speed). The artifact file and how it is loaded and called are unchanged; outputs are
bit-identical (allocation placement changes no arithmetic). When the last runner closes, glibc's
defaults are restored (its dynamic mmap threshold stays off, as after any ``mallopt``) and
``malloc_trim`` hands the free memory back. Other C libraries (musl, macOS): nothing changes.
"""

from __future__ import annotations

import ctypes
import platform
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)
HELD = ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 1 << 30))
DEFAULTS = ((M_MMAP_MAX, 65536), (M_TRIM_THRESHOLD, 128 * 1024))  # glibc's own defaults


def _glibc() -> Any | None:
    """The running glibc (``mallopt``, ``malloc_trim``), or ``None`` under another C library."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


class _HeapHold:
    """How many runners hold the heap now (several can be open at once: the single-pass replay)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        self.libc: Any | None = None
        self.looked_up = False

    def _lib(self) -> Any | None:
        if not self.looked_up:
            self.libc, self.looked_up = _glibc(), True
        return self.libc

    def acquire(self) -> bool:
        """Hold the heap; ``True`` when glibc's settings were changed for it."""
        with self.lock:
            libc = self._lib()
            if libc is None:
                return False
            if self.holders == 0:
                for param, value in HELD:
                    libc.mallopt(param, value)
            self.holders += 1
            return True

    def release(self) -> None:
        with self.lock:
            libc = self._lib()
            if libc is None or self.holders == 0:
                return
            self.holders -= 1
            if self.holders == 0:
                for param, value in DEFAULTS:
                    libc.mallopt(param, value)
                libc.malloc_trim(0)


_HOLD = _HeapHold()


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)


@contextmanager
def mapped_large_blocks(threshold: int = 4 << 20) -> Iterator[bool]:
    """Inside the block, every allocation of ``threshold`` bytes or more is its own ``mmap``, returned to
    the system when freed (glibc only); afterwards the heap's free pages are handed back. Yields whether
    glibc's setting was changed.

    ``golden record`` (exporter/golden/lifecycle.py) runs in this: glibc's dynamic mmap threshold rises
    to 32 MB after the first large block is freed, so each batch's decoded images (600 KB each), the
    stacked batch and the mid-sized activations were carved from the heap between the small blocks that
    outlive a batch, and the heap grew with the number of inputs: 2,048 images of 224x224 peaked at
    979 MB against 496 MB for 32. A fixed threshold keeps those blocks out of the heap: 513 MB against
    480 MB (benchmarks/record_memory.py; ``reused_heap``, the replay's way, was flat too, +21 MB, but
    from a higher floor, 621 MB for 32 images). The fixed threshold stays after the block (glibc turns
    its dynamic threshold off for good on any ``mallopt``), as after ``reused_heap``.
    """
    libc = _HOLD._lib()
    if libc is not None:
        libc.mallopt(M_MMAP_THRESHOLD, threshold)
    try:
        yield libc is not None
    finally:
        if libc is not None:
            libc.malloc_trim(0)


@contextmanager
def reused_heap() -> Iterator[bool]:
    """Inside the block, freed memory stays in the heap for the next allocation (glibc only); yields
    whether it does."""
    held = _HOLD.acquire()
    try:
        yield held
    finally:
        if held:
            _HOLD.release()
