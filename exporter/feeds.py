"""Batches of named inputs (``feeds``: ``{input name: array}``), sliced and joined along each
input's own batch axis, as the signature says; and a batch's named outputs with their samples first
(``samples_first``), the error naming those a model or file did not return (``outputs_mismatch``). Pure numpy.

>>> from export_check.signature import SINGLE
>>> f = {"input": np.arange(10).reshape(5, 2)}
>>> length(take(f, SINGLE, 1, 3), SINGLE)
2
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .errors import ArtifactError
from .signature import Signature, positional_names

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


def samples_first(outputs: Mapping[str, np.ndarray], signature: Signature, names: Sequence[str] | None = None,
                  what: str = "") -> dict[str, np.ndarray]:
    """The outputs ``names`` (default: every one of ``outputs``), each with its samples on axis 0 (a view where the
    batch axis is elsewhere); one of ``names`` missing is ``outputs_mismatch`` (``what`` returned ``outputs``)."""
    moved = {}
    for name in outputs if names is None else names:
        if name not in outputs:
            raise outputs_mismatch(what, outputs, signature)
        array = outputs[name]
        spec = next((o for o in signature.outputs if o.name == name), None)
        axis = spec.batch_axis if spec is not None else 0
        moved[name] = array if axis == 0 else np.moveaxis(array, axis, 0)
    return moved


def outputs_mismatch(what: str, returned: Any, signature: Signature) -> ArtifactError:
    """The error for a model or file that returned outputs other than the golden set's (``returned``: their names):
    which are missing and, for a set recorded with positional names before named tuples and dataclasses were named by
    their fields, how to fix it."""
    returned, names = list(returned), signature.output_names
    missing = [n for n in names if n not in returned]
    positional = len(names) == len(returned) and names == positional_names(len(names))
    hint = ("; a named tuple's or a dataclass's outputs are named by their fields since issue 25, and this set was recorded "
            "before: re-record it (golden record --force)" if positional and set(returned) != set(names) else "")
    return ArtifactError(f"{what} returned outputs {', '.join(returned) or 'none'}; the golden set has {', '.join(names)} "
                         f"(missing: {', '.join(missing)}){hint}")
