"""The golden set's batches for one run, decoded once: held in memory when they fit, spilled to a file when not.

A run reads the golden batches several times: the first batch is the trace example, the replay reads
them all (a pass per artifact with ``--jobs 2``), the diagnostics read the first few again. Decoding is
most of a small model's replay, so a set whose decoded inputs fit ``memory_budget()`` (``MEMORY_BUDGET``,
or ``EXPORT_CHECK_GOLDEN_MEMORY`` bytes) is decoded once and held; a larger one is decoded once, during
eager's pass, into an unnamed temporary file (golden/spill.py) that every later pass reads back a batch at
a time, so peak memory is bounded by a batch, not by the set, and the numbers are the same to the bit.
Only when that file cannot be written (a full disk) does the set stream, decoded again on every pass.

A batch is its feeds, ``{input name: array}`` (``GoldenSet.feed_batches``: ``{"input": batch}`` for a
format-1 set), and eager's output for it is ``{output name: array}``.

The pipeline decodes (and runs eager over) a held set while the build server is still importing
its libraries on the other core, which takes that work off the critical path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from ..errors import UsageError
from ..feeds import length as samples_in
from .goldenset import GoldenSet
from .spill import SpilledBatches

# Decoded inputs (and eager outputs) held in memory at most; above it the set is spilled to a file.
MEMORY_BUDGET = 256 << 20
ENV = "EXPORT_CHECK_GOLDEN_MEMORY"

Feeds = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]


def _nbytes(arrays: Mapping[str, np.ndarray]) -> int:
    return sum(int(np.asarray(a).nbytes) for a in arrays.values())


def memory_budget() -> int:
    """Bytes of decoded golden inputs (and of eager's outputs) a run holds in memory: ``MEMORY_BUDGET``, or the
    environment's ``EXPORT_CHECK_GOLDEN_MEMORY`` when set."""
    from ..parsing import env_bytes

    return env_bytes(ENV, MEMORY_BUDGET, UsageError, 268435456)


def _chained(first: tuple[int, Feeds], rest: Iterator[tuple[int, Feeds]]) -> Iterator[tuple[int, Feeds]]:
    yield first
    yield from rest


class GoldenBatches:
    """``held``: the decoded batches when they fit the budget; else, with ``spill``, they are written to a file
    during the first full pass (``precompute_eager``) and read back from it after; else every pass decodes."""

    def __init__(self, golden: GoldenSet, batch_size: int, budget: int | None = None, spill: bool = True) -> None:
        self.golden = golden
        self.batch_size = batch_size
        self.budget = memory_budget() if budget is None else budget
        (first_start, self.first), per_sample, stream = golden.first_batch(batch_size)
        self.held: list[tuple[int, Feeds]] | None = None
        self._rest: Iterator[tuple[int, Feeds]] | None = None  # the batches after the first, until the spill reads them
        self._spill: SpilledBatches | None = None  # complete once _rest is consumed
        if per_sample * len(golden) <= self.budget:
            self.held = [(first_start, self.first), *stream]
        elif spill and not any(np.asarray(a).dtype.hasobject for a in self.first.values()):  # an object array has no bytes to spill
            self._rest = _chained((first_start, self.first), stream)
        self._eager: list[tuple[Outputs, float]] | None = None

    @property
    def rereadable(self) -> bool:
        """Whether a pass after the first reads decoded batches (held, or spilled) rather than decoding again."""
        return self.held is not None or self._rest is not None or self._spill is not None

    def close(self) -> None:
        """Frees the spill file (a held or streamed set has none)."""
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def length(self, feeds: Mapping[str, np.ndarray]) -> int:
        """How many samples a batch's feeds hold."""
        return samples_in(feeds, self.golden.signature)

    def _shapes(self, feeds: Mapping[str, np.ndarray]) -> tuple[tuple[int, ...], ...]:
        """The batch's input shapes without the batch axis."""
        return tuple(tuple(d for axis, d in enumerate(feeds[spec.name].shape) if axis != spec.batch_axis)
                     for spec in self.golden.signature.inputs)

    def __iter__(self) -> Iterator[tuple[int, Feeds]]:
        if self.held is not None:
            return iter(self.held)
        if self._spill is not None and self._rest is None:
            return iter(self._spill)
        return self.golden.feed_batches(self.batch_size)

    def _spilling(self) -> Iterator[tuple[int, Feeds]]:
        """The first full pass over a spilled set: each batch decoded, written to the file, and yielded. A file
        that cannot be written (``OSError``: a full disk) is dropped, and the set streams from then on."""
        assert self._rest is not None
        rest, self._rest = self._rest, None
        try:
            spill: SpilledBatches | None = SpilledBatches()
        except OSError:
            spill = None
        for start, feeds in rest:
            if spill is not None:
                try:
                    spill.add(start, feeds)
                except OSError:
                    spill.close()
                    spill = None
            yield start, feeds
        if spill is not None:
            spill.finish()
        self._spill = spill

    def at(self, start: int) -> Feeds:
        for first, feeds in self:
            if first == start:
                return feeds
        raise AssertionError(f"no batch starts at {start}")

    def precompute_eager(self, run: Callable[[Feeds], Outputs], budget: int | None = None,
                         counted: Callable[[int, int], None] | None = None) -> None:
        """Run eager over a held or spilled set now (a spilled one is written to its file on this pass), keeping
        each batch's outputs and seconds when they fit the budget; ``counted`` hears the count of inputs run so far
        and the set's, after each batch (the words of a progress line are the caller's).

        A failure is left for the replay to meet and report, batch by batch, as it would without this.
        """
        if self.held is None and self._rest is None:
            return
        budget = self.budget if budget is None else budget
        outputs: list[tuple[Outputs, float]] | None = []
        size = done = 0
        for _, feeds in (iter(self.held) if self.held is not None else self._spilling()):
            if outputs is None:
                continue  # a spilled set's file is written to its end all the same
            try:
                began = time.perf_counter()
                out = run(feeds)
            except Exception:
                outputs = None
                continue
            outputs.append((out, time.perf_counter() - began))
            if counted is not None:
                done += self.length(feeds)
                counted(min(done, len(self.golden)), len(self.golden))
            size += _nbytes(out)
            if size > budget:
                outputs = None  # outputs too large to hold: the replay computes them batch by batch
        self._eager = outputs if self.rereadable else None

    def head(self, count: int) -> tuple[Feeds, int]:
        """The feeds of the first ``count`` samples that share the first batch's input shapes, concatenated along
        each input's batch axis, and how many samples they are (fewer when that first run of shapes is shorter):
        the probe the replay's trace records (diagnostics/trace.py). A streamed set decodes its first batches again."""
        shapes = self._shapes(self.first)
        parts, have = [], 0
        for _, feeds in self:
            if have >= count or self._shapes(feeds) != shapes:
                break
            parts.append(feeds)
            have += self.length(feeds)
        out = {}
        for spec in self.golden.signature.inputs:
            joined = np.concatenate([p[spec.name] for p in parts], axis=spec.batch_axis)
            out[spec.name] = joined[(slice(None),) * spec.batch_axis + (slice(0, count),)]
        return out, min(have, count)

    def eager_held(self) -> bool:
        """Whether every batch's eager output was computed ahead and is held."""
        return self._eager is not None

    def eager(self, index: int) -> tuple[Outputs, float] | None:
        """The eager outputs of the ``index``-th batch and the seconds they took, if computed ahead."""
        return None if self._eager is None else self._eager[index]
