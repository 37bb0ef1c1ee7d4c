"""Agreements counted in samples, in words: what a top-1 or decoded-text agreement counts, and how many changed samples
an agreement bound tolerates at a golden set's size (a reason's, a chart's, a pytest failure's, a small set's note).

>>> tolerated_flips(0.98, 64), samples_for_one_flip(0.98)
(1, 50)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..compare import Metrics

PER_SAMPLE = ("top-1", "decoded")  # the agreements counted in samples (per position: a count of positions)


def agreement_name(metrics: Metrics) -> str:
    """What ``metrics.top1_agreement`` counts, in words (a reason's, a chart's, a pytest failure's)."""
    return {"top-1": "top-1 agreement", "decoded": "decoded exact-match rate"}.get(metrics.agreement, "per-position agreement")


def changed_name(metrics: Metrics) -> str:
    """What ``metrics.top1_changed`` lists, in words: the samples whose top-1, decoded text or some position's argmax moved."""
    return {"top-1": "top-1 changed", "decoded": "decoded text changed"}.get(metrics.agreement, "an argmax changed")


def tolerated_flips(bound: float, samples: int) -> int:
    """How many of ``samples`` may change while an agreement of at least ``bound`` holds.

    >>> tolerated_flips(0.98, 24), tolerated_flips(0.98, 64), tolerated_flips(0.99, 64), tolerated_flips(0.99, 100)
    (0, 1, 0, 1)
    """
    return max(0, math.floor((1.0 - bound) * samples + 1e-9))


def samples_for_one_flip(bound: float) -> int | None:
    """The fewest samples on which an agreement bound of ``bound`` lets one changed sample pass (None: never, bound 1)."""
    return None if bound >= 1.0 else math.ceil(1.0 / (1.0 - bound) - 1e-9)


def flips_text(changed: int, samples: int, bound: float) -> str:
    """How a sample-level agreement gate reads at this set's size: what changed and what it tolerates.

    >>> flips_text(1, 24, 0.98)
    '1 of 24 samples changed; at 24 samples the gate tolerates no changed sample (50 would let one pass)'
    >>> flips_text(3, 64, 0.98)
    '3 of 64 samples changed; at 64 samples the gate tolerates 1'
    """
    tolerated = tolerated_flips(bound, samples)
    text = f"{changed} of {samples} samples changed; at {samples} samples the gate tolerates {tolerated or 'no changed sample'}"
    need = samples_for_one_flip(bound)
    return text + (f" ({need} would let one pass)" if not tolerated and need is not None else "")


def per_sample_agreement(signature: Any) -> bool:
    """Whether any compared output of ``signature`` is judged by an agreement counted in samples (``compare.Layout.agreement``):
    a ``logits`` output's top-1, a CTC output's decoded texts."""
    from ..compare import Layout

    return any(o.compared and Layout(o.kind, o.class_axis, o.ctc_blank).agreement in PER_SAMPLE for o in signature.outputs)
