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

from . import shapes


@dataclass
class ReplayTrace:
    main: int  # the replay's batch size
    probe_count: int  # the first images the batch-size check and the cost use
    _images: list[np.ndarray] = field(default_factory=list)
    _outputs: dict[str, list[np.ndarray]] = field(default_factory=dict)
    _seconds: dict[str, list[float]] = field(default_factory=dict)

    @classmethod
    def for_run(cls, golden_size: int, batch_size: int) -> ReplayTrace:
        return cls(main=batch_size, probe_count=min(golden_size, max(batch_size, shapes.PROBE_IMAGES)))

    def wants(self, start: int) -> bool:
        """Whether the batch starting at ``start`` holds probe images."""
        return start < self.probe_count

    def add_batch(self, start: int, batch: np.ndarray) -> None:
        if self.wants(start):
            self._images.append(batch)

    def add_output(self, name: str, start: int, batch: np.ndarray, out: np.ndarray, seconds: float) -> None:
        """One row's output for one replayed batch and the seconds its ``infer`` took."""
        if self.wants(start):
            self._outputs.setdefault(name, []).append(np.asarray(out))
        if len(batch) == self.main:  # only full batches time the main batch size
            self._seconds.setdefault(name, []).append(seconds)

    def probe(self) -> np.ndarray:
        return np.concatenate(self._images)[: self.probe_count]

    def first_batch(self) -> np.ndarray:
        return self._images[0]

    def first_output(self, name: str) -> np.ndarray | None:
        outs = self._outputs.get(name)
        return outs[0] if outs else None

    def probe_outputs(self, name: str) -> np.ndarray | None:
        """``name``'s outputs for the probe images at the main batch size, as the replay computed them."""
        outs = self._outputs.get(name)
        if not outs or sum(len(o) for o in outs) < self.probe_count:
            return None
        try:
            return np.concatenate(outs)[: self.probe_count]
        except ValueError:  # outputs of different shapes: let the check run and say so
            return None

    def timed_seconds(self, name: str) -> list[float]:
        """Seconds per full batch after the first (the first is the warm-up, as in ``latency.measure``)."""
        return list(self._seconds.get(name, ())[1:])
