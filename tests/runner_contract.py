"""The runner contract every artifact kind is held to (tests/integration/test_artifact_contract.py), as one
helper, so a kind whose test module already builds it on a real model holds its file to the contract there
instead of being built again on TinyNet for the contract module alone.

The contract: the file is complete (no partial left beside it) and of its kind's suffix; the runner reloads
it from disk and, at every batch size asked, maps named inputs to the named outputs eager gives, float32,
of eager's shapes, the same on every call, within the family's error of eager; it refuses a feed of an
input it does not take; used after its with-block it raises. Off macOS a Core ML file is held to what can
be held there: its spec (one input, one output) and the runner's NotApplicable on entering.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from export_check.artifacts.base import OUTPUT, NotApplicable
from export_check.errors import ArtifactError

Feeds = dict[str, np.ndarray]

# The family's mean absolute error to eager that a runner may not exceed. Absolute on TinyNet-sized logits (``scale``
# None: what the contract module has always held every kind to); on a real model's logits (``scale``: the mean |eager
# output| of the batch) the tool's own gates: float stays absolute, fp16 and int8 are relative to the signal.
ABSOLUTE = {"float": 1e-5, "fp16": 1e-2}
ABSOLUTE_OTHER = 0.1
RELATIVE = {"fp16": 1e-2}
RELATIVE_OTHER = 0.05


def error_limit(family: str, scale: float | None) -> float:
    if scale is None:
        return ABSOLUTE.get(family, ABSOLUTE_OTHER)
    if family == "float":
        return ABSOLUTE["float"]
    return RELATIVE.get(family, RELATIVE_OTHER) * scale


def holds_the_runner_contract(
    name: str,
    runner: Any,
    family: str,
    reference: Callable[[Feeds], Feeds],
    batch: Callable[[int], Feeds],
    *,
    path: Path | None = None,
    suffix: str | None = None,
    sizes: Iterable[int] = (1, 3, 4, 9),
    relative: bool = False,
    refusal: str = "feeds exactly one",
    after_exit: bool = True,
) -> None:
    """Hold ``runner`` (opened on ``path``, a kind's file of ``suffix``; or the eager runner, no path) to the contract.

    ``reference`` is eager computed by hand (torch on the model, not the tool's runner): named outputs for named
    inputs. ``batch(size)`` makes a batch of ``size`` samples the file is meant to take (a calibrated kind: samples
    outside its calibration split; a file planned for a batch bound: sizes within it). ``relative``: the model's
    logits are not TinyNet-sized, so fp16 and int8 are judged relative to the mean |eager output| (``error_limit``).
    ``refusal``: what the runner's error says when fed an input it does not take (one of each input, plus "extra").
    """
    if path is not None:
        assert path.is_file() and path.stat().st_size > 0, path
        assert suffix is None or path.suffix == suffix, (path, suffix)
        assert not list(path.parent.glob(".*partial*")), list(path.parent.iterdir())
    if name == "coreml":
        from export_check.artifacts.coreml import predicts_here, read_spec

        if predicts_here() is not None:  # Core ML predicts on macOS only: here its file's spec is what the contract can hold
            assert path is not None
            assert [len(names) for names in read_spec(path)] == [1, 1]
            with pytest.raises(NotApplicable, match="Core ML predicts only on macOS"):
                runner.__enter__()
            return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.load warns of its deprecation; the pipeline records it
        runner.__enter__()
    try:
        feeds: Feeds = {}
        for size in sizes:
            feeds = batch(size)
            outputs = runner.infer(feeds)
            expected = reference(feeds)
            assert isinstance(outputs, dict) and list(outputs) == list(expected), (name, outputs.keys(), expected.keys())
            again = runner.infer(feeds)
            for key, out in outputs.items():
                want = expected[key]
                assert isinstance(out, np.ndarray) and out.dtype == np.float32, (name, key, type(out), getattr(out, "dtype", None))
                assert out.shape == want.shape and out.shape[0] == size, (name, key, out.shape, want.shape)
                assert np.array_equal(out, again[key]), f"{name}: same input, same output ({key})"
                scale = float(np.abs(want.astype(np.float64)).mean()) if relative else None
                mae = float(np.abs(out.astype(np.float64) - want.astype(np.float64)).mean())
                assert mae <= error_limit(family, scale), (name, key, size, mae, error_limit(family, scale))
        with pytest.raises(ArtifactError, match=refusal):
            runner.infer({**feeds, "extra": next(iter(feeds.values()))})
    finally:
        runner.__exit__(None, None, None)
    if after_exit:
        with pytest.raises(AssertionError):
            runner.infer(batch(1))  # used after its with-block


def eager_by_hand(model: Any) -> Callable[[Feeds], Feeds]:
    """A ``reference`` for a model of one input: torch on the model, by hand, its outputs named as runners name them
    (one tensor: ``logits``; a tuple: ``output_0``, ``output_1``, ...; a dict: its own keys)."""
    import torch

    def run(feeds: Feeds) -> Feeds:
        (array,) = feeds.values()
        with torch.inference_mode():
            out = model(torch.from_numpy(array))
        if isinstance(out, dict):
            return {key: value.numpy() for key, value in out.items()}
        if isinstance(out, tuple):
            return {f"output_{i}": value.numpy() for i, value in enumerate(out)}
        return {OUTPUT: out.numpy()}

    return run
