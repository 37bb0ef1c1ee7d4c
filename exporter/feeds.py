"""Batches of named inputs (``feeds``: ``{input name: array}``), sliced and joined along each
input's own batch axis, as the signature says. Pure numpy.

>>> from export_check.signature import SINGLE
>>> f = {"input": np.arange(10).reshape(5, 2)}
>>> length(take(f, SINGLE, 1, 3), SINGLE)
2
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .signature import Signature

Feeds = Mapping[str, np.ndarray]


def _axis(signature: Signature, name: str) -> int:
    for spec in signature.inputs:
        if spec.name == name:
            return spec.batch_axis
    return 0


def length(feeds: Feeds, signature: Signature) -> int:
    """How many samples the batch holds (its first input's size on its batch axis)."""
    name, array = next(iter(feeds.items()))
    return int(array.shape[_axis(signature, name)])


def take(feeds: Feeds, signature: Signature, start: int, stop: int) -> dict[str, np.ndarray]:
    """Samples ``start .. stop-1`` of every input."""
    out = {}
    for name, array in feeds.items():
        index = [slice(None)] * array.ndim
        index[_axis(signature, name)] = slice(start, stop)
        out[name] = array[tuple(index)]
    return out


def concat(batches: Sequence[Feeds], signature: Signature) -> dict[str, np.ndarray]:
    """Batches joined into one (they must share every non-batch dimension)."""
    names = list(batches[0])
    return {name: np.concatenate([b[name] for b in batches], axis=_axis(signature, name)) for name in names}


def samples_first(outputs: Mapping[str, np.ndarray], signature: Signature) -> dict[str, np.ndarray]:
    """Every output with its samples on axis 0 (a view where the batch axis is elsewhere)."""
    moved = {}
    for name, array in outputs.items():
        spec = next((o for o in signature.outputs if o.name == name), None)
        axis = spec.batch_axis if spec is not None else 0
        moved[name] = array if axis == 0 else np.moveaxis(array, axis, 0)
    return moved
