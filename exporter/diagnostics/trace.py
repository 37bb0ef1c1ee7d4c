"""What the replay already computed, kept for the diagnostics so they need not compute it again.

The replay runs every artifact over the whole golden set at the main batch size through runners it
has open. The diagnostics need, per row: the outputs of the probe images at the main batch size
(the reference of the batch-size check), the first batch's output (the first run of the determinism
check) and timed runs of a full batch (the cost). A :class:`ReplayTrace` records exactly those while
the replay runs, so the diagnostics only run what is new: the other batch sizes, one rerun, and
timed repeats when the replay had too few full batches.

Memory: the probe's images and each row's probe outputs (64 images by default: 64 x classes floats
per row) and one float per batch; flat in the size of the golden set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..artifacts.base import PROBE_IMAGES
from ..feeds import Feeds, length, take
from ..signature import SINGLE, Signature

EAGER = "eager"  # the trace's name for the eager model's outputs (and the eager row's)


@dataclass
class ReplayTrace:
    """The probe is the first ``probe_count`` samples, or fewer when the set's first samples change
    shape sooner (a batch-size check stacks samples, so it runs on the first group of one shape).
    Outputs are each row's compared outputs side by side, one row per sample (``run.side_by_side``)."""

    main: int  # the replay's batch size
    probe_count: int  # the first samples the batch-size check and the cost use
    signature: Signature = SINGLE
    _images: list[dict[str, np.ndarray]] = field(default_factory=list)
    _starts: list[int] = field(default_factory=list)
    _closed: bool = False  # the first group of one shape has ended
    _outputs: dict[str, list[np.ndarray]] = field(default_factory=dict)
    _seconds: dict[str, list[float]] = field(default_factory=dict)

    @classmethod
    def for_run(cls, golden_size: int, batch_size: int, signature: Signature = SINGLE) -> ReplayTrace:
        return cls(main=batch_size, probe_count=min(golden_size, max(batch_size, PROBE_IMAGES)), signature=signature)

    def wants(self, start: int) -> bool:
        """Whether the batch starting at ``start`` holds probe samples."""
        return start < self.probe_count and (not self._starts or start in self._starts or not self._closed)

    def add_batch(self, start: int, batch: Feeds) -> None:
        if start >= self.probe_count or self._closed or start in self._starts:
            return
        if self._images and _shapes(batch, self.signature) != _shapes(self._images[0], self.signature):
            self._closed = True  # another shape: the probe is the group before it
            return
        self._images.append(dict(batch))
        self._starts.append(start)

    def add_eager(self, start: int, batch: Feeds, samples: int, out: np.ndarray, seconds: float) -> None:
        """Eager's replayed batch of ``samples`` samples: the batch itself (``add_batch``) and eager's output for it (``add_output``)."""
        self.add_batch(start, batch)
        self.add_output(EAGER, start, samples, out, seconds)

    def add_output(self, name: str, start: int, samples: int, out: np.ndarray, seconds: float) -> None:
        """One row's output for one replayed batch of ``samples`` samples and the seconds its ``infer`` took."""
        if start in self._starts and self._starts.index(start) == len(self._outputs.get(name, ())):
            self._outputs.setdefault(name, []).append(np.asarray(out))
        if samples == self.main:  # only full batches time the main batch size
            self._seconds.setdefault(name, []).append(seconds)

    def probe_size(self) -> int:
        return min(self.probe_count, sum(length(b, self.signature) for b in self._images))

    def first_batch(self) -> dict[str, np.ndarray]:
        return self._images[0]

    def probe_head(self, count: int) -> dict[str, np.ndarray]:
        """The first ``count`` probe samples (the bounded determinism rerun runs image 0 at batch size 1)."""
        return take(self._images[0], self.signature, 0, count)

    def first_output(self, name: str) -> np.ndarray | None:
        outs = self._outputs.get(name)
        return outs[0] if outs else None

    def probe_outputs(self, name: str) -> np.ndarray | None:
        """``name``'s outputs for the probe samples at the main batch size, as the replay computed them."""
        outs = self._outputs.get(name)
        size = self.probe_size()
        if not outs or sum(len(o) for o in outs) < size:
            return None
        try:
            return np.concatenate(outs)[:size]
        except ValueError:  # outputs of different shapes: let the check run and say so
            return None

    def timed_seconds(self, name: str, warmup: bool = False) -> list[float]:
        """Seconds per full batch after the first (the first is the warm-up; included with ``warmup``)."""
        return list(self._seconds.get(name, ())[0 if warmup else 1 :])


def _shapes(feeds: Feeds, signature: Signature) -> tuple[tuple[int, ...], ...]:
    """Each input's shape without its batch axis: a short last batch is still the same group."""
    axes = {spec.name: spec.batch_axis for spec in signature.inputs}
    return tuple(tuple(d for i, d in enumerate(a.shape) if i != axes.get(name, 0) % max(a.ndim, 1)) for name, a in feeds.items())
