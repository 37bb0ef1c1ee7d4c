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


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    converter = require_converter()
    model = copy.deepcopy(ctx.model).eval()
    args, kwargs = ctx.example_args()
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
    interpreter = require_interpreter()(model_path=str(path))
    signature = interpreter.get_signature_list().get(SIGNATURE)
    if signature is None:
        raise ArtifactError(f"{path.name} has no {SIGNATURE} signature")
    batch = [int(d["shape"][0]) if len(d["shape"]) else 0 for d in interpreter.get_input_details()]
    return {"litert_inputs": ",".join(signature["inputs"]), "litert_outputs": ",".join(signature["outputs"]),
            "batch_in_file": ",".join(map(str, batch)) + " (resized to each batch fed)",
            "litert_torch": _version("litert-torch"), "ai_edge_litert": _version("ai-edge-litert")}


class LiteRTRunner:
    """The ``.tflite`` loaded by the LiteRT interpreter, run through its signature."""

    def __init__(self, path: Path, ctx: BuildContext) -> None:
        self.path, self.ctx = path, ctx
        self.runner: Any = None
        self.inputs: list[str] = []
        self.outputs: list[str] = []

    def __enter__(self) -> LiteRTRunner:
        interpreter = require_interpreter()(model_path=str(self.path), num_threads=self.ctx.threads)
        signature = interpreter.get_signature_list().get(SIGNATURE)
        if signature is None:
            raise ArtifactError(f"{self.path.name} has no {SIGNATURE} signature")
        self.inputs, self.outputs = list(signature["inputs"]), list(signature["outputs"])
        self.runner = interpreter.get_signature_runner(SIGNATURE)
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
        try:
            out = self.runner(**{name: np.ascontiguousarray(a) for name, a in zip(order, arrays, strict=True)})
        except (RuntimeError, ValueError) as exc:
            raise ArtifactError(f"litert: {' '.join(str(exc).split())[:300]}") from None
        keys = sorted(out, key=lambda name: int(name.rpartition("_")[2]) if name.rpartition("_")[2].isdigit() else 0)
        values = [np.array(out[k]) for k in keys]
        return listed_outputs(values, self.ctx.signature)


def open_runner(path: Path, ctx: BuildContext) -> LiteRTRunner:
    return LiteRTRunner(path, ctx)
