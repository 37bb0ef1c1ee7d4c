"""CTC outputs read as text: greedy decoding and the edit distance between two decoded sequences.

A CTC output holds, per sample, one score per class at each frame; a declared class is the blank
(``[outputs.NAME] ctc-blank = 0``). Its text is the greedy path: the best class of every frame,
repeats collapsed, blanks dropped. Pure numpy and Python, no model, no verdict (``compare`` streams
these; ``judge`` decides).

>>> greedy_decode(np.array([[0.1, 0.9, 0.0], [0.2, 0.7, 0.1], [0.9, 0.0, 0.1], [0.0, 0.9, 0.1]]), blank=0)
(1, 1)
>>> edit_distance((1, 2, 3), (1, 3, 4))
2
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def collapse(path: Sequence[int], blank: int) -> tuple[int, ...]:
    """The labels of a frame-by-frame path: repeats collapsed, then blanks dropped (``1 1 0 1`` -> ``1 1``).

    >>> collapse([0, 3, 3, 0, 0, 3, 5, 5], blank=0)
    (3, 3, 5)
    """
    out: list[int] = []
    previous = None
    for label in path:
        label = int(label)
        if label != previous and label != blank:
            out.append(label)
        previous = label
    return tuple(out)


def greedy_paths(scores: np.ndarray, class_axis: int) -> np.ndarray:
    """The best class at every frame of every sample: ``scores`` has its samples on axis 0, its classes
    on ``class_axis`` and one frame axis besides; the result is ``(samples, frames)``. A non-finite
    score never wins (a NaN candidate frame takes the best finite class, or class 0 when none is)."""
    if scores.ndim != 3:
        raise ValueError(f"a CTC output needs one frame axis and one class axis per sample, got per-sample shape {tuple(scores.shape[1:])}")
    axis = class_axis if class_axis >= 0 else scores.ndim + class_axis
    if not 0 < axis < 3:
        raise ValueError(f"the class axis {class_axis} of a CTC output must be one of its per-sample axes (1 or 2 once samples are first)")
    finite = np.where(np.isfinite(scores), scores, -np.inf)
    return np.argmax(finite, axis=axis)


def greedy_decode(scores: np.ndarray, blank: int, class_axis: int = -1) -> tuple[int, ...]:
    """One sample's text: ``scores`` is ``(frames, classes)`` (``class_axis`` -1 or 1) or ``(classes, frames)`` (0)."""
    return decode_batch(scores[None], blank, class_axis if class_axis < 0 else class_axis + 1)[0]


def decode_batch(scores: np.ndarray, blank: int, class_axis: int = -1) -> list[tuple[int, ...]]:
    """The text of every sample of a sample-first batch (see :func:`greedy_paths`)."""
    return [collapse(path, blank) for path in greedy_paths(scores, class_axis).tolist()]


def edit_distance(reference: Sequence[int], candidate: Sequence[int]) -> int:
    """The Levenshtein distance: the fewest insertions, deletions and substitutions that turn one into the other.

    Two rows of the dynamic-programming table (lengths here are a text line's: tens of labels).

    >>> edit_distance((), (1, 2)), edit_distance((1, 2, 3), (1, 2, 3)), edit_distance((1, 2), (2, 1))
    (2, 0, 2)
    """
    if len(reference) < len(candidate):
        reference, candidate = candidate, reference
    previous = list(range(len(candidate) + 1))
    for i, r in enumerate(reference, 1):
        current = [i]
        for j, c in enumerate(candidate, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != c)))
        previous = current
    return previous[-1]
