"""Eager's diagnosis around the replay (``run.observe``): which golden input the eager model fails on, and eager's batch
sizes measured before anything is built. Each replay pass's rows are diagnosed by ``diagnostics.run`` (``RowDiagnosis``).
Measurements only, like the observer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import RunConfig
from ..diagnostics.run import eager_at_sizes
from ..diagnostics.trace import ReplayTrace
from ..errors import ArchitectureError, ArtifactError, describe_exception
from ..feeds import length
from ..golden.batches import GoldenBatches
from ..golden.goldenset import GoldenSet


def eager_failure(config: RunConfig, golden: GoldenSet, start: int, feeds: dict[str, np.ndarray], exc: BaseException,
                  infer: Any) -> ArchitectureError:
    """The run's one-line error when eager raises on the golden batch at ``start`` (``feeds``), or returns
    outputs the golden set does not have: the input file and the exception. The batch's samples are run
    one at a time to name the first that fails alone; when none does, the line names the batch."""
    count = length(feeds, golden.signature)
    items = golden.inputs[start : start + count]
    fix = "check that --arch and the golden set's preprocessing match the model, or re-record the golden set"
    if isinstance(exc, ArtifactError):  # the outputs do not fit the golden set: every input would say so
        return ArchitectureError(f"{config.checkpoint}: {exc} (on the golden input {golden.root / items[0].file}); the golden set holds "
                                 f"outputs {', '.join(golden.signature.output_names)}: check --arch, or re-record the golden set")
    for offset, item in enumerate(items if count > 1 else ()):
        one = {spec.name: np.take(feeds[spec.name], [offset], axis=spec.batch_axis) for spec in golden.signature.inputs}
        try:
            infer(one)
        except Exception as alone:  # any exception of the user's model: its message is the line
            return ArchitectureError(f"{config.checkpoint}: the eager model fails on the golden input {golden.root / item.file} "
                                     f"({describe_exception(alone)}); {fix}")
    shown = golden.root / items[0].file if count == 1 else f"{golden.root / items[0].file} .. {items[-1].file} (a batch of {count})"
    return ArchitectureError(f"{config.checkpoint}: the eager model fails on the golden input {shown} ({describe_exception(exc)}); {fix}")


def eager_sizes_ahead(config: RunConfig, golden: GoldenSet, batches: GoldenBatches, model: Any) -> dict[int, Any] | None:
    """Eager's share of the batch-size check, run before the builds (only for a set held in memory)."""
    probe = batches.head(ReplayTrace.for_run(len(golden), config.batch_size).probe_count)
    return None if probe is None else eager_at_sizes(model, probe, config.batch_size, golden.signature, len(golden), config.diagnostics_budget)
