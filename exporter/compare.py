"""Pure metrics: numpy arrays in, frozen results out. Nothing here runs a model or judges (``judge`` does).

Outputs are compared batch by batch (:class:`ErrorAccumulator`) so a golden set of any size costs
memory for one batch plus one float per image.

>>> acc = ErrorAccumulator()
>>> acc.add(np.array([[1.0, 0.0]]), np.array([[1.0, 0.5]]))
>>> acc.result().mae
0.25
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


class ShapeMismatch(ValueError):
    pass


@dataclass(frozen=True)
class Metrics:
    """How far candidate logits are from reference logits over a whole set."""

    images: int
    mae: float
    max_abs: float
    median_abs: float  # median of the per-image MAE
    top1_agreement: float  # fraction of images whose argmax matches
    top1_changed: tuple[int, ...]  # indices of images whose argmax differs
    nonfinite: int  # NaN or Inf values in the candidate
    per_image_mae: tuple[float, ...] = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "images": self.images,
            "mae": self.mae,
            "max_abs": self.max_abs,
            "median_image_mae": self.median_abs,
            "top1_agreement": self.top1_agreement,
            "top1_changed": list(self.top1_changed),
            "nonfinite": self.nonfinite,
            "per_image_mae": list(self.per_image_mae),
        }


class ErrorAccumulator:
    """Streams batches of (reference, candidate) logits into :class:`Metrics`."""

    def __init__(self) -> None:
        self._abs_sum = 0.0
        self._values = 0
        self._max_abs = 0.0
        self._nonfinite = 0
        self._top1_changed: list[int] = []
        self._per_image: list[np.ndarray] = []
        self._images = 0

    def add(self, reference: np.ndarray, candidate: np.ndarray) -> None:
        if reference.shape != candidate.shape:
            raise ShapeMismatch(f"output shape {tuple(candidate.shape)} != reference {tuple(reference.shape)}")
        ref = reference.astype(np.float64, copy=False).reshape(reference.shape[0], -1)
        cand = candidate.astype(np.float64, copy=False).reshape(candidate.shape[0], -1)
        finite = np.isfinite(cand)
        self._nonfinite += int(cand.size - np.count_nonzero(finite))
        # Non-finite values count as infinitely wrong: they can never hide inside an average.
        diff = np.where(finite, np.abs(cand - ref), np.inf)
        self._abs_sum += float(diff.sum())
        self._values += diff.size
        if diff.size:
            self._max_abs = max(self._max_abs, float(diff.max()))
        self._per_image.append(diff.mean(axis=1) if diff.shape[1] else np.zeros(diff.shape[0]))
        changed = np.flatnonzero(np.argmax(np.where(finite, cand, -np.inf), axis=1) != np.argmax(ref, axis=1))
        if cand.shape[1]:
            self._top1_changed.extend(int(i) + self._images for i in changed)
        self._images += ref.shape[0]

    def result(self) -> Metrics:
        per_image = np.concatenate(self._per_image) if self._per_image else np.zeros(0)
        mae = self._abs_sum / self._values if self._values else 0.0
        return Metrics(
            images=self._images,
            mae=float(mae),
            max_abs=float(self._max_abs),
            median_abs=float(np.median(per_image)) if per_image.size else 0.0,
            top1_agreement=1.0 - len(self._top1_changed) / self._images if self._images else 1.0,
            top1_changed=tuple(self._top1_changed),
            nonfinite=self._nonfinite,
            per_image_mae=tuple(float(v) for v in per_image),
        )


def compare(reference: np.ndarray, candidate: np.ndarray) -> Metrics:
    """Metrics of a whole candidate array against a whole reference array."""
    acc = ErrorAccumulator()
    acc.add(reference, candidate)
    return acc.result()
