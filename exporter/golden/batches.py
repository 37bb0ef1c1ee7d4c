"""The golden set's batches for one run, decoded once when they fit in memory, streamed when not.

A run reads the golden batches several times: the first batch is the trace example, the replay reads
them all, the diagnostics read the first few again. Decoding is most of a small model's replay, so a
set whose decoded inputs (and eager outputs) fit in ``MEMORY_BUDGET`` is decoded once and held; a
larger one streams one batch at a time as before, so peak memory stays flat as the set grows.

The pipeline decodes (and runs eager over) a held set while the build server is still importing
its libraries on the other core, which takes that work off the critical path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np

from .manifest import GoldenSet

# Decoded inputs (and eager outputs) held in memory at most; above it the set streams.
MEMORY_BUDGET = 256 << 20


class GoldenBatches:
    def __init__(self, golden: GoldenSet, batch_size: int, budget: int = MEMORY_BUDGET) -> None:
        self.golden = golden
        self.batch_size = batch_size
        stream = golden.batches(batch_size)
        first_start, self.first = next(stream)
        per_image = self.first.nbytes / max(len(self.first), 1)
        self.held: list[tuple[int, np.ndarray]] | None = None
        if per_image * len(golden) <= budget:
            self.held = [(first_start, self.first), *stream]
        self._eager: list[tuple[np.ndarray, float]] | None = None

    def __iter__(self) -> Iterator[tuple[int, np.ndarray]]:
        if self.held is not None:
            return iter(self.held)
        return self.golden.batches(self.batch_size)

    def at(self, start: int) -> np.ndarray:
        for first, batch in self:
            if first == start:
                return batch
        raise AssertionError(f"no batch starts at {start}")

    def precompute_eager(self, run: Callable[[np.ndarray], np.ndarray], budget: int = MEMORY_BUDGET) -> None:
        """Run eager over a held set now, keeping each batch's output and seconds when they fit the budget.

        A failure is left for the replay to meet and report, batch by batch, as it would without this.
        """
        if self.held is None:
            return
        outputs, size = [], 0
        try:
            for _, batch in self.held:
                began = time.perf_counter()
                out = run(batch)
                outputs.append((out, time.perf_counter() - began))
                size += out.nbytes
                if size > budget:
                    return  # outputs too large to hold: the replay computes them batch by batch
        except Exception:
            return
        self._eager = outputs

    def head(self, count: int) -> np.ndarray | None:
        """The first ``count`` images of a held set (``None`` when it streams)."""
        if self.held is None:
            return None
        parts, have = [], 0
        for _, batch in self.held:
            if have >= count:
                break
            parts.append(batch)
            have += len(batch)
        return np.concatenate(parts)[:count]

    def eager_held(self) -> bool:
        """Whether every batch's eager output was computed ahead and is held."""
        return self._eager is not None

    def eager(self, index: int) -> tuple[np.ndarray, float] | None:
        """The eager output of the ``index``-th batch and the seconds it took, if computed ahead."""
        return None if self._eager is None else self._eager[index]
