"""Eager first: before anything is built, run the eager model on the first golden batch; its second
call on that batch is the eager pass over the golden set when that pass is held in memory (the
pipeline), else a call of its own.

A model that does not reproduce itself cannot be the reference of anything: its artifacts would be
judged against noise. This names why: forward drew random numbers (dropout left on, ``randn_like``:
torch's generator state moved during the call, and a fixed seed makes two calls agree), or forward
changed the model's own state (a Python-side counter, a buffer updated in place: the attribute is
named). The record goes to the eager row's diagnostics; ``judge`` decides what it means.

When eager raises on a golden batch instead (or returns outputs the golden set does not have), ``eager_failure``
is the run's one-line error, naming the input it fails on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..compare import ErrorAccumulator
from ..config import RunConfig
from ..errors import ArchitectureError, ArtifactError, describe_exception
from ..feeds import length
from ..golden.goldenset import GoldenSet
from ..records import EagerSelfCheck

SEED = 20260101


def _plain(value: Any) -> Any:
    """A comparable snapshot of a plain Python attribute (numbers, strings, small containers)."""
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    if isinstance(value, (list, tuple)) and len(value) <= 64:
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict) and len(value) <= 64:
        return tuple(sorted((str(k), _plain(v)) for k, v in value.items()))
    return None  # not tracked


def _state(model: Any) -> dict[str, Any]:
    """Every module's plain attributes and buffer checksums, by qualified name."""
    import torch

    state: dict[str, Any] = {}
    for prefix, module in model.named_modules():
        for key, value in vars(module).items():
            if key.startswith("_") or key == "training":
                continue
            snap = _plain(value)
            if snap is not None:
                state[f"{prefix}.{key}" if prefix else key] = snap
        for key, buffer in module.named_buffers(recurse=False):
            if isinstance(buffer, torch.Tensor) and buffer.numel() and not buffer.is_quantized:
                state[f"{prefix}.{key}" if prefix else key] = ("buffer", float(buffer.double().sum()), float(buffer.double().abs().sum()))
    return state


def _changes(before: dict[str, Any], after: dict[str, Any]) -> tuple[str, ...]:
    out = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if isinstance(old, tuple) and old[:1] == ("buffer",):
            out.append(f"buffer {key} changed")
        else:
            out.append(f"{key}: {str(old)[:40]} -> {str(new)[:40]}")
    return tuple(out[:8])


@dataclass
class FirstCall:
    """The self-check's first call, made before anything is built; :meth:`finish` takes the second."""

    first: np.ndarray
    random: bool
    changes: tuple[str, ...]
    nonfinite: tuple[str, ...] = ()  # the model's tensors holding NaN/Inf (``nonfinite_weights``)

    def finish(self, second: np.ndarray, infer: Callable[[Any], np.ndarray], feeds: Any, kind: str = "logits",
               class_axis: int = -1) -> EagerSelfCheck:
        """Judge-ready record from the second call's output (``second``) on the same ``feeds``; if the
        two differ, ``infer`` runs twice more under the same seed, to tell random numbers from state."""
        import torch

        acc = ErrorAccumulator(kind, class_axis)
        first = self.first
        if first.shape == second.shape and first.dtype.kind == second.dtype.kind == "f":
            # NaN/Inf at the same places in both calls is one output given twice, not two that differ (NaN != NaN): zeroed
            same = ~np.isfinite(first) & (np.isnan(first) & np.isnan(second) | (first == second))
            if same.any():
                first, second = np.where(same, 0, first), np.where(same, 0, second)
        acc.add(first, second)
        m = acc.result()
        reproduces = None
        if m.max_abs > 0:
            saved = torch.get_rng_state()
            try:
                torch.manual_seed(SEED)
                a = infer(feeds)
                torch.manual_seed(SEED)
                b = infer(feeds)
                reproduces = bool(a.shape == b.shape and np.array_equal(a, b))
            finally:
                torch.set_rng_state(saved)
        return EagerSelfCheck(runs=2, images=m.images, max_abs=m.max_abs, mae=m.mae,
                              agreement=None if m.agreement == "none" else m.top1_agreement,
                              random=self.random, state_changes=self.changes, reproduces_under_seed=reproduces,
                              reference_mean_abs=m.reference_mean_abs, nonfinite_weights=self.nonfinite)


def first_call(infer: Callable[[Any], np.ndarray], model: Any, feeds: Any) -> FirstCall:
    """The first of the two calls: torch's generator and the model's state watched around it."""
    import torch

    rng = torch.get_rng_state()
    before = _state(model)
    first = infer(feeds)
    after_first = _state(model)
    return FirstCall(first=first, random=not torch.equal(rng, torch.get_rng_state()), changes=_changes(before, after_first),
                     nonfinite=nonfinite_weights(model))


def nonfinite_weights(model: Any, limit: int = 8) -> tuple[str, ...]:
    """The model's float parameters and buffers that hold NaN/Inf, as ``"fc.weight: 1 of 320"`` (at most ``limit``)."""
    import torch

    found = []
    state = model.state_dict() if hasattr(model, "state_dict") else {}
    for name, tensor in state.items():
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
            bad = int((~torch.isfinite(tensor.detach())).sum())
            if bad:
                found.append(f"{name}: {bad} of {tensor.numel()}")
    return tuple(found[:limit])


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
