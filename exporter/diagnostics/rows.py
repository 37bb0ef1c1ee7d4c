"""The rows the diagnostics compare: every compared output of a batch, samples first, one row per sample, the outputs'
values side by side in float32 (``rows_of``, ``side_by_side``): what the batch-size and determinism checks run on, so
each covers every output (``shapes.columns_of`` says where each output sits in them).

>>> from export_check.signature import SINGLE
>>> rows_of({"logits": np.ones((2, 3, 4))}, SINGLE, "eager").shape
(2, 12)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..feeds import samples_first
from ..signature import Signature


def rows_of(outputs: Mapping[str, np.ndarray], signature: Signature, what: str, first_only: bool = False) -> np.ndarray:
    """Every compared output of ``outputs`` (``what``'s), one row per sample, side by side (``side_by_side``); with
    ``first_only``, the first compared output's rows alone (what the eager self-check compares: it is about the model)."""
    specs = (signature.compared_outputs() or signature.outputs[:1])[: 1 if first_only else None]
    return side_by_side(samples_first(outputs, signature, [s.name for s in specs], what))


def side_by_side(outputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """Every compared output (samples first), one row per sample, the outputs' values side by side in
    float32: what the batch-size and determinism checks run on, so each covers every output."""
    arrays = [np.asarray(a) for a in outputs.values()]
    n = len(arrays[0])
    rows = [a.reshape(n, -1).astype(np.float32, copy=False) for a in arrays]
    return rows[0] if len(rows) == 1 else np.concatenate(rows, axis=1)
