"""Determinism: the same batch through the same loaded artifact must give the same logits."""

from __future__ import annotations

import math

import numpy as np


def max_abs_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Largest element difference; NaN in the same place counts as equal, shape changes as infinite."""
    if a.shape != b.shape:
        return math.inf
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    same = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
    with np.errstate(invalid="ignore"):  # inf - inf where both runs hold the same infinity: masked by ``same``
        diff = np.where(same, 0.0, np.abs(a64 - b64))
    diff = np.where(np.isnan(diff), np.inf, diff)
    return float(diff.max()) if diff.size else 0.0

