"""The streams the gate metrics measure that compare does not measure for itself (cosine, SNR, CTC character error
rate): each is the ``stream`` of its ``GATE_METRICS`` entry (gates/metrics.py), made when a replay makes its accumulators
(``compare.ErrorAccumulator``, given ``gates.STREAMS``), so importing the gates costs no numpy. A stream takes one batch
of reference and candidate values (float64, samples on axis 0, the mask of the candidate's finite values) at a time
(``compare.Stream``).
"""

from __future__ import annotations

import math

import numpy as np

from ..compare import DecodedExactMatch, Layout
from ..ctc import edit_distance


class LeastCosine:
    """The least cosine similarity of any sample's output with its reference (flattened): 1 for the same
    direction, whatever the scale; a sample with a non-finite value scores -1, and an all-zero output
    1 beside an all-zero reference, else 0.

    >>> s = LeastCosine(); s.add(np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([[2.0, 0.0], [1.0, -1.0]]), np.ones((2, 2), bool))
    >>> s.value()
    0.0
    """

    def __init__(self) -> None:
        self._least = 1.0

    def add(self, reference: np.ndarray, candidate: np.ndarray, finite: np.ndarray) -> None:
        if not reference.size:
            return
        reference, candidate, finite = (a.reshape(len(a), -1) for a in (reference, candidate, finite))
        cand = np.where(finite, candidate, 0.0)
        dot = np.einsum("ij,ij->i", reference, cand)
        norms = np.sqrt(np.einsum("ij,ij->i", reference, reference) * np.einsum("ij,ij->i", cand, cand))
        both_zero = (norms == 0) & ~np.any(reference, axis=1) & ~np.any(cand, axis=1)
        cosine = np.where(norms > 0, dot / np.where(norms > 0, norms, 1.0), np.where(both_zero, 1.0, 0.0))
        cosine = np.where(finite.all(axis=1), np.clip(cosine, -1.0, 1.0), -1.0)
        self._least = min(self._least, float(cosine.min()))

    def value(self) -> float:
        return self._least


class SignalToNoise:
    """The output's signal-to-noise ratio in dB over the whole set: 10 log10(sum reference^2 / sum error^2);
    inf when there is no error, -inf when a value is not finite or the reference is all zeros.

    >>> s = SignalToNoise(); s.add(np.array([[10.0, 0.0]]), np.array([[10.0, 1.0]]), np.ones((1, 2), bool))
    >>> s.value()
    20.0
    """

    def __init__(self) -> None:
        self._signal = self._noise = 0.0
        self._nonfinite = False

    def add(self, reference: np.ndarray, candidate: np.ndarray, finite: np.ndarray) -> None:
        self._nonfinite |= not bool(finite.all())
        self._signal += float(np.square(reference).sum())
        self._noise += float(np.square(np.where(finite, candidate - reference, 0.0)).sum())

    def value(self) -> float:
        if self._nonfinite:
            return -math.inf
        if self._noise == 0:
            return math.inf
        return 10 * math.log10(self._signal / self._noise) if self._signal > 0 else -math.inf


class CharacterErrorRate(DecodedExactMatch):
    """The character error rate of the greedy CTC texts: the sum over samples of the edit distance
    (``ctc.edit_distance``) from the reference's text, over the sum of the reference texts' lengths; 0
    with no edit, inf when every reference text is empty and some candidate's is not.

    >>> s = CharacterErrorRate(Layout("sequence-logits", -1, 0))
    >>> s.add(np.array([[[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]]), np.array([[[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]]]), np.ones((1, 3, 2), bool))
    >>> s.value()  # (1, 1) read as (1,): one deletion in two labels
    0.5
    """

    def __init__(self, layout: Layout) -> None:
        super().__init__(layout)
        self._edits = self._length = 0

    def add(self, reference: np.ndarray, candidate: np.ndarray, finite: np.ndarray) -> None:
        for ref, cand in self.texts(reference, candidate, finite):
            self._edits += edit_distance(ref, cand)
            self._length += len(ref)

    def value(self) -> float:
        if not self._edits:
            return 0.0
        return self._edits / self._length if self._length else math.inf
