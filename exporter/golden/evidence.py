"""What an output holds, by evidence beyond its shape (issue 44, item 4): which layer returned it, its values, the labels.

A 2-D float output is class scores by its shape alone, and then gets a top-1 gate; a detector's box offsets ``(batch, 4)``,
its landmarks ``(batch, 10)`` and an LSTM's carried ``h``/``c`` ``(batch, 128)`` got one too, and failed at 92.3 % top-1 on
float noise. The evidence, in the order it is read (``signature.choose_kind`` places it after the output's name):

* the layer that returned it, seen by forward hooks on one batch: a recurrent layer (``nn.LSTM``/``GRU``/``RNN``, their
  cells) returns hidden states, carried or per step: ``values``; ``nn.Softmax``/``LogSoftmax`` returns class probabilities:
  ``logits``; a bounded activation (``nn.Sigmoid``, ``nn.Tanh``, ...) a regression's or a gate's values: ``values``;
* its values: every sample a probability distribution (non-negative, summing to 1) or log-probabilities: ``logits``;
* the golden labels: an output whose last axis cannot hold the largest label is not the labelled classes: ``values``;
* the other outputs: when one of them holds the classes by evidence (name or any of the above), a 2-D output without any
  is a regression beside it (a detector's boxes beside its scores): ``values`` (a per-position output keeps its tags).

Without evidence the shape decides, as before (one unnamed 2-D output is a classifier's). Nothing here raises: a model
the hooks cannot follow gives no evidence, and its outputs keep the shape's default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..signature import KindChoice, flatten_outputs, name_says

RECURRENT = frozenset({"LSTM", "GRU", "RNN"})
CELLS = frozenset({"LSTMCell", "GRUCell", "RNNCell"})
PROBABILITIES = frozenset({"Softmax", "LogSoftmax", "Softmax2d"})
BOUNDED = frozenset({"Sigmoid", "Tanh", "Hardtanh", "Hardsigmoid", "ReLU6", "Softsign"})
DISTRIBUTION_TOLERANCE = 1e-3  # |sum - 1| per sample (float32 softmax over thousands of classes stays within 1e-5)


def producers(model: Any, call: Any) -> dict[str, tuple[str, str, int]]:
    """Each output of ``call()`` (the model run on one batch) with the innermost module that returned it, as it is or
    as a view of it (``h.squeeze(0)``: the same memory, the same count of values):
    ``{output name: (module class, qualified name, its place among the tensors the module returned)}``."""
    seen: dict[int, tuple[str, str, int]] = {}
    memory: dict[tuple[int, int], tuple[str, str, int]] = {}
    keep: list[Any] = []  # every tensor seen stays alive, so no id or address is reused during the call

    def hook(name: str):
        def record(module: Any, args: Any, output: Any) -> None:
            for k, tensor in enumerate(_tensors(output)):
                made = (type(module).__name__, name, k)
                seen.setdefault(id(tensor), made)  # the innermost module completes first
                memory.setdefault((tensor.data_ptr(), tensor.numel()), made)
                keep.append(tensor)

        return record

    handles = [m.register_forward_hook(hook(name)) for name, m in model.named_modules() if name]
    try:
        flat = flatten_outputs(call())
    except Exception:  # no evidence from a model the hooks cannot follow
        return {}
    finally:
        for handle in handles:
            handle.remove()
    found = {}
    for name, leaf in flat.items():
        made = seen.get(id(leaf)) or (memory.get((leaf.data_ptr(), leaf.numel())) if hasattr(leaf, "data_ptr") else None)
        if made is not None:
            found[name or "output"] = made
    return found


def _tensors(value: Any) -> list[Any]:
    """A module's output tensors, flattened as ``flatten_outputs`` flattens the model's (``diagnostics.outputs.tensors``)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [t for item in value for t in _tensors(item)] if isinstance(value, (tuple, list)) else []


def from_layer(module: tuple[str, str, int]) -> KindChoice | None:
    """The evidence of the layer that returned an output.

    >>> from_layer(("LSTM", "rnn", 1)).why
    'evidence: the carried state (h/c) of nn.LSTM rnn: judged by its error'
    >>> from_layer(("Softmax", "head.2", 0)).kind, from_layer(("Linear", "fc", 0))
    ('logits', None)
    """
    cls, name, place = module
    if cls in RECURRENT:
        what = "the per-step outputs" if place == 0 else "the carried state (h/c)"
        return KindChoice("values", f"evidence: {what} of nn.{cls} {name}: judged by its error")
    if cls in CELLS:
        return KindChoice("values", f"evidence: the carried state of nn.{cls} {name}: judged by its error")
    if cls in PROBABILITIES:
        return KindChoice("logits", f"evidence: returned by nn.{cls} {name}, class probabilities")
    if cls in BOUNDED:
        return KindChoice("values", f"evidence: returned by nn.{cls} {name}, bounded values (a regression or a gate), not class "
                                    "scores: judged by its error")
    return None


def from_values(arrays: Sequence[np.ndarray]) -> KindChoice | None:
    """Every sample a probability distribution over the last axis, or log-probabilities: class scores.

    >>> from_values([np.array([[0.2, 0.8], [0.5, 0.5]], np.float32)]).why
    'evidence: every sample sums to 1 over its last axis, class probabilities'
    >>> from_values([np.array([[0.2, 0.9]], np.float32)]) is None
    True
    """
    floats = [np.asarray(a, dtype=np.float64) for a in arrays if a.dtype.kind == "f" and a.ndim >= 1 and a.shape[-1] >= 2]
    if not floats or not all(np.all(np.isfinite(a)) for a in floats):
        return None
    if all(a.min() >= 0 and np.allclose(a.sum(axis=-1), 1.0, rtol=0, atol=DISTRIBUTION_TOLERANCE) for a in floats):
        return KindChoice("logits", "evidence: every sample sums to 1 over its last axis, class probabilities")
    if all(a.max() <= 0 and np.allclose(np.log(np.exp(a).sum(axis=-1)), 0.0, rtol=0, atol=DISTRIBUTION_TOLERANCE) for a in floats):
        return KindChoice("logits", "evidence: every sample's exponentials sum to 1, log-probabilities")
    return None


def from_labels(width: int, labels: Sequence[int]) -> KindChoice | None:
    """An output whose last axis cannot hold the largest golden label is not the labelled classes.

    >>> from_labels(4, [0, 9, 3]).why
    'evidence: its 4 columns cannot hold golden label 9: not the labelled classes; judged by its error'
    >>> from_labels(10, [0, 9]) is None
    True
    """
    if not labels or width > max(labels):
        return None
    return KindChoice("values", f"evidence: its {width} columns cannot hold golden label {max(labels)}: not the labelled classes; "
                                "judged by its error")


def gather(names: Sequence[str], firsts: Mapping[str, np.ndarray], arrays: Mapping[str, Sequence[np.ndarray]],
           made_by: Mapping[str, tuple[str, str, int]], labels: Sequence[int]) -> dict[str, KindChoice]:
    """The evidence for each float output of 2 or 3 axes that has any (see the module's docstring); ``firsts``: each
    output's first batch, ``arrays``: all its batches, ``made_by``: :func:`producers`."""
    found: dict[str, KindChoice] = {}
    candidates = [n for n in names if firsts[n].dtype.kind == "f" and firsts[n].ndim in (2, 3) and firsts[n].shape[-1] >= 2]
    for name in candidates:
        choice = (from_layer(made_by[name]) if name in made_by else None) or from_values(arrays[name])
        if choice is None and labels:
            choice = from_labels(int(firsts[name].shape[-1]), labels)
        if choice is not None:
            found[name] = choice
    holding = [n for n in candidates if name_says(n) == "logits" or (n in found and found[n].kind == "logits")]
    for name in (n for n in candidates if firsts[n].ndim == 2):  # a per-position output (3 axes) is tags, not a regression beside
        if name not in found and name_says(name) is None and holding and name not in holding:
            found[name] = KindChoice("values", f"evidence: another output, {holding[0]}, holds the classes; this one beside it is a "
                                               "regression (boxes, landmarks, offsets): judged by its error")
    return found
