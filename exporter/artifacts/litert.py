"""litert: the model as a LiteRT (formerly TensorFlow Lite) flatbuffer, Google's runtime for Android,
embedded Linux and microcontrollers. ``litert_torch.convert(model, example)`` (``litert-torch``, formerly
``ai-edge-torch``: ``torch.export`` lowered through StableHLO to the LiteRT converter), ``export`` to one
``.tflite``; reloaded from the file by the LiteRT interpreter (``ai_edge_litert.interpreter``) with
``num_threads`` pinned to ``--threads`` and run through its signature (``serving_default``: inputs
``args_0``..., outputs ``output_0``...). The batch is static in the file (the example's); the signature
runner resizes the inputs to each batch it is fed, and a model that cannot take another batch size fails
that size in the batch-size check, with the interpreter's words.

The runtime packages pull jax and transformers, and ``xdsl`` pins typing-extensions below 4.13, which
the ``coremltools`` of the ExecuTorch stack refuses: LiteRT cannot share an environment with the
``executorch`` and ``coreml`` kinds. It has a tox environment of its own (``tox -e litert``, run by
``./dev test``; pins in ``constraints-litert.txt``). Install: ``pip install litert-torch ai-edge-litert``.
"""

from __future__ import annotations

import copy
import io
import warnings
from collections.abc import Mapping
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArtifactError
from ._common import atomic_path
from ._recurrent import recurrent_types
from .base import BuildContext, NotApplicable, listed_outputs, positional_inputs

INSTALL = ("pip install litert-torch ai-edge-litert, in an environment without coremltools (xdsl, which litert-torch pulls, pins "
           "typing-extensions below 4.13; coremltools' cattrs needs 4.14): tox -e litert")
SIGNATURE = "serving_default"


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def require_converter() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import litert_torch
    except ImportError:
        raise NotApplicable(f"not applicable: litert-torch is not installed: {INSTALL}") from None
    return litert_torch


def require_interpreter() -> Any:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        raise NotApplicable(f"not applicable: ai-edge-litert (the LiteRT interpreter) is not installed: {INSTALL}") from None
    return Interpreter


def _convert(converter: Any, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], path: Path) -> None:
    said = io.StringIO()
    try:
        with redirect_stdout(said), redirect_stderr(said):  # its progress lines: kept out of the terminal
            edge = converter.convert(model, tuple(args), sample_kwargs=kwargs or None)
            with atomic_path(path) as partial:
                edge.export(str(partial))
    except NotApplicable:
        raise
    except Exception as exc:
        raise ArtifactError(f"litert_torch.convert failed: {type(exc).__name__}: {' '.join(str(exc).split())[:600]}") from None


def _refusal(path: Path, feeds: list[Any]) -> str | None:
    """The interpreter's words when the file, resized to these inputs (the signature's order), cannot run them; None: it runs."""
    runner = require_interpreter()(model_path=str(path), num_threads=1).get_signature_runner(SIGNATURE)
    names = sorted(runner.get_input_details(), key=lambda n: int(n.rpartition("_")[2]) if n.rpartition("_")[2].isdigit() else 0)
    try:
        runner(**{name: np.ascontiguousarray(f.numpy()) for name, f in zip(names, feeds, strict=True)})
    except (RuntimeError, ValueError) as exc:
        return " ".join(str(exc).split())[:300]
    return None


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    """The file at the example's batch; when the interpreter cannot resize that file to one sample (a shape baked into
    the graph: litert-torch 0.10 cannot lower a flatten over a symbolic batch), it is converted again from one sample
    and the runner feeds it sample by sample. A declared dynamic axis the file cannot take is said at build."""
    converter = require_converter()
    model = copy.deepcopy(ctx.model).eval()
    args, kwargs = ctx.example_args()
    specs = [i for i in ctx.signature.inputs if not i.keyword] + [i for i in ctx.signature.inputs if i.keyword]
    example = [*args, *kwargs.values()]
    batch_axes = [s.batch_axis for s in specs] if len(specs) == len(example) else [0] * len(example)
    _convert(converter, model, args, kwargs, path)
    example_batch = int(example[0].shape[batch_axes[0]])
    one = [t.narrow(axis, 0, 1) for t, axis in zip(example, batch_axes, strict=True)]
    refused = _refusal(path, one) if example_batch > 1 else None
    batch_note = f"{example_batch} (resized to each batch fed)"
    if refused is not None:
        args = tuple(one[:len(args)])
        kwargs = dict(zip(kwargs, one[len(args):], strict=True))
        _convert(converter, model, args, kwargs, path)
        example = one
        batch_note = (f"1 (fed sample by sample: the batch-{example_batch} file refused to resize to one sample: {refused})")
    for spec, tensor in zip(specs, example, strict=False):
        for axis, _ in spec.dynamic_axes:
            if axis == spec.batch_axis:
                continue
            wider = [torch_cat_twice(t, axis) if t is tensor else t for t in example]
            said = _refusal(path, wider)
            if said is not None:
                size, other = int(tensor.shape[axis]), 2 * int(tensor.shape[axis])
                why = f"the .tflite keeps the example's {spec.name} axis {axis} at {size}, and the interpreter refuses {other}: {said}"
                recurrent = recurrent_types(model)
                if recurrent:
                    raise NotApplicable(f"not applicable: {why} (litert-torch lowers through torch.export, which unrolls the "
                                        f"{'/'.join(sorted(recurrent))} over the example's time steps, pytorch/pytorch#115092)")
                raise ArtifactError(f"{why}; the declared dynamic axis is not dynamic in the file")
    interpreter = require_interpreter()(model_path=str(path))
    signature = interpreter.get_signature_list().get(SIGNATURE)
    if signature is None:
        raise ArtifactError(f"{path.name} has no {SIGNATURE} signature")
    batch = [int(d["shape"][0]) if len(d["shape"]) else 0 for d in interpreter.get_input_details()]
    return {"litert_inputs": ",".join(signature["inputs"]), "litert_outputs": ",".join(signature["outputs"]),
            "batch_in_file": ",".join(map(str, batch)) + " " + batch_note.partition(" ")[2],
            "litert_torch": _version("litert-torch"), "ai_edge_litert": _version("ai-edge-litert")}


def torch_cat_twice(tensor: Any, axis: int) -> Any:
    import torch

    return torch.cat([tensor, tensor], dim=axis)


class LiteRTRunner:
    """The ``.tflite`` loaded by the LiteRT interpreter, run through its signature."""

    def __init__(self, path: Path, ctx: BuildContext) -> None:
        self.path, self.ctx = path, ctx
        self.runner: Any = None
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.one_sample = False  # the file holds one sample and is fed sample by sample

    def __enter__(self) -> LiteRTRunner:
        interpreter = require_interpreter()(model_path=str(self.path), num_threads=self.ctx.threads)
        signature = interpreter.get_signature_list().get(SIGNATURE)
        if signature is None:
            raise ArtifactError(f"{self.path.name} has no {SIGNATURE} signature")
        self.inputs, self.outputs = list(signature["inputs"]), list(signature["outputs"])
        self.runner = interpreter.get_signature_runner(SIGNATURE)
        self.one_sample = bool(interpreter.get_input_details()) and all(
            len(d["shape"]) and int(d["shape"][0]) == 1 for d in interpreter.get_input_details())
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner = None

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.runner is not None, "runner used outside its with-block"
        arrays = positional_inputs(feeds, self.ctx.signature)
        if len(arrays) != len(self.inputs):
            raise ArtifactError(f"{self.path.name} takes {len(self.inputs)} inputs; got {len(arrays)}")
        # args_0, args_1, ...: the model's positional order (sorted by their index, not by the name's text)
        order = sorted(self.inputs, key=lambda name: int(name.rpartition("_")[2]) if name.rpartition("_")[2].isdigit() else 0)
        specs = [i for i in self.ctx.signature.inputs if not i.keyword] + [i for i in self.ctx.signature.inputs if i.keyword]
        axes = [s.batch_axis for s in specs] if len(specs) == len(arrays) else [0] * len(arrays)
        count = int(arrays[0].shape[axes[0]]) if arrays[0].ndim > axes[0] else 1
        if self.one_sample and count > 1:  # a file of one sample (build: the interpreter could not resize it), fed sample by sample
            parts = [self._run(order, [np.take(a, [i], axis=axis) for a, axis in zip(arrays, axes, strict=True)]) for i in range(count)]
            outs = [o.batch_axis for o in self.ctx.signature.outputs]
            outs = outs if len(outs) == len(parts[0]) else [0] * len(parts[0])
            return listed_outputs([np.concatenate([p[k] for p in parts], axis=outs[k]) for k in range(len(parts[0]))], self.ctx.signature)
        return listed_outputs(self._run(order, arrays), self.ctx.signature)

    def _run(self, order: list[str], arrays: list[np.ndarray]) -> list[np.ndarray]:
        try:
            out = self.runner(**{name: np.ascontiguousarray(a) for name, a in zip(order, arrays, strict=True)})
        except (RuntimeError, ValueError) as exc:
            raise ArtifactError(f"litert: {' '.join(str(exc).split())[:300]}") from None
        keys = sorted(out, key=lambda name: int(name.rpartition("_")[2]) if name.rpartition("_")[2].isdigit() else 0)
        return [np.array(out[k]) for k in keys]


def open_runner(path: Path, ctx: BuildContext) -> LiteRTRunner:
    return LiteRTRunner(path, ctx)
