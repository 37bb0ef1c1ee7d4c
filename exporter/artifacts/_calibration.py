"""The calibration split as the static int8 builders take it: batches of named inputs, checked non-empty."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..errors import ArtifactError
from .base import BuildContext


def calibration_batches(ctx: BuildContext, what: str) -> tuple[dict[str, Any], ...]:
    """The golden set's calibration split, batch by batch; an ArtifactError when there is none (a
    statically quantized model calibrated on nothing has no activation ranges to ship)."""
    if not ctx.calibration:
        raise ArtifactError(f"{what} is calibrated on the golden set's calibration split, and this run has none: the golden set "
                            "needs at least 2 samples (one to calibrate on, one to judge); record more samples")
    return ctx.calibration


def calibration_count(batches: tuple[dict[str, Any], ...], ctx: BuildContext) -> int:
    spec = ctx.signature.inputs[0]
    return sum(int(b[spec.name].shape[spec.batch_axis]) for b in batches)


def torch_feeds(batches: tuple[dict[str, Any], ...]) -> Iterator[dict[str, Any]]:
    import numpy as np
    import torch

    for batch in batches:
        yield {name: torch.from_numpy(np.ascontiguousarray(value)) for name, value in batch.items()}
