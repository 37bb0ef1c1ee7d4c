"""The golden set's batches for one run, decoded once when they fit in memory, streamed when not.

A run reads the golden batches several times: the first batch is the trace example, the replay reads
them all, the diagnostics read the first few again. Decoding is most of a small model's replay, so a
set whose decoded inputs (and eager outputs) fit in ``MEMORY_BUDGET`` is decoded once and held; a
larger one streams one batch at a time as before, so peak memory stays flat as the set grows.

A batch is its feeds, ``{input name: array}`` (``GoldenSet.feed_batches``: ``{"input": batch}`` for a
format-1 set), and eager's output for it is ``{output name: array}``.

The pipeline decodes (and runs eager over) a held set while the build server is still importing
its libraries on the other core, which takes that work off the critical path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from .goldenset import GoldenSet, feeds_length

# Decoded inputs (and eager outputs) held in memory at most; above it the set streams.
MEMORY_BUDGET = 256 << 20

Feeds = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]


def _nbytes(arrays: Mapping[str, np.ndarray]) -> int:
    return sum(int(np.asarray(a).nbytes) for a in arrays.values())


class GoldenBatches:
    def __init__(self, golden: GoldenSet, batch_size: int, budget: int = MEMORY_BUDGET) -> None:
        self.golden = golden
        self.batch_size = batch_size
        stream = golden.feed_batches(batch_size)
        first_start, self.first = next(stream)
        per_sample = _nbytes(self.first) / max(self.length(self.first), 1)
        self.held: list[tuple[int, Feeds]] | None = None
        if per_sample * len(golden) <= budget:
            self.held = [(first_start, self.first), *stream]
        self._eager: list[tuple[Outputs, float]] | None = None

    def length(self, feeds: Mapping[str, np.ndarray]) -> int:
        """How many samples a batch's feeds hold."""
        return feeds_length(feeds, self.golden.signature)

    def _shapes(self, feeds: Mapping[str, np.ndarray]) -> tuple[tuple[int, ...], ...]:
        """The batch's input shapes without the batch axis."""
        return tuple(tuple(d for axis, d in enumerate(feeds[spec.name].shape) if axis != spec.batch_axis)
                     for spec in self.golden.signature.inputs)

    def __iter__(self) -> Iterator[tuple[int, Feeds]]:
        if self.held is not None:
            return iter(self.held)
        return self.golden.feed_batches(self.batch_size)

    def at(self, start: int) -> Feeds:
        for first, feeds in self:
            if first == start:
                return feeds
        raise AssertionError(f"no batch starts at {start}")

    def precompute_eager(self, run: Callable[[Feeds], Outputs], budget: int = MEMORY_BUDGET) -> None:
        """Run eager over a held set now, keeping each batch's outputs and seconds when they fit the budget.

        A failure is left for the replay to meet and report, batch by batch, as it would without this.
        """
        if self.held is None:
            return
        outputs, size = [], 0
        try:
            for _, feeds in self.held:
                began = time.perf_counter()
                out = run(feeds)
                outputs.append((out, time.perf_counter() - began))
                size += _nbytes(out)
                if size > budget:
                    return  # outputs too large to hold: the replay computes them batch by batch
        except Exception:
            return
        self._eager = outputs

    def head(self, count: int) -> Feeds | None:
        """The feeds of the first ``count`` samples of a held set that share the first batch's input
        shapes, concatenated along each input's batch axis (fewer when that first run of shapes is
        shorter); ``None`` when the set streams."""
        if self.held is None:
            return None
        shapes = self._shapes(self.first)
        parts, have = [], 0
        for _, feeds in self.held:
            if have >= count or self._shapes(feeds) != shapes:
                break
            parts.append(feeds)
            have += self.length(feeds)
        out = {}
        for spec in self.golden.signature.inputs:
            joined = np.concatenate([p[spec.name] for p in parts], axis=spec.batch_axis)
            out[spec.name] = joined[(slice(None),) * spec.batch_axis + (slice(0, count),)]
        return out

    def eager_held(self) -> bool:
        """Whether every batch's eager output was computed ahead and is held."""
        return self._eager is not None

    def eager(self, index: int) -> tuple[Outputs, float] | None:
        """The eager outputs of the ``index``-th batch and the seconds they took, if computed ahead."""
        return None if self._eager is None else self._eager[index]
