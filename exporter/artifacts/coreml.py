"""coreml: the model as Apple's Core ML ML Program, for iPhone, iPad and Mac apps. ``torch.export``
(non-strict) of one sample (batch 1: how an app calls Core ML, and what every model converts at: with a
symbolic batch coremltools 9 refuses ops such as an adaptive pooling to a size other than 1x1),
``run_decompositions``, then ``coremltools.convert(..., convert_to="mlprogram",
compute_precision=FLOAT32)``: an ``.mlpackage`` (a folder on macOS), shipped here as one zip file with
deterministic bytes (``coreml.zip``; unzip it to get ``coreml.mlpackage``). The runner feeds a batch one
sample at a time. The row's details record the Core ML input and output names and the coremltools version.

Core ML predicts on macOS only ("Model prediction is only supported on macOS"): on another system the
file is built and its spec read back (the inputs and outputs must be the model's), and the row is not
applicable here, with the reason. Judge it on a Mac with the bundle: ``export-check check --bundle
model.bundle`` here, ``export-check replay model.bundle`` there (README, "Replay where it is deployed").
There the runner loads it with ``compute_units=CPU_ONLY`` (the Neural Engine computes in fp16), feeds
each input under its Core ML name and returns the outputs in the model's order.

An optional package: ``pip install coremltools`` (the ``executorch`` extra pulls it too).
"""

from __future__ import annotations

import copy
import platform
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArtifactError
from ..files import zip_entry
from ..signature import SINGLE
from ._common import atomic_path
from .base import BuildContext, NotApplicable, listed_outputs, positional_inputs

ACCOUNTS = {"coreml": "an Apple Core ML ML Program: `torch.export` of one sample (batch 1, as an app calls it; with a symbolic batch coremltools "
                      "9 refuses ops such as an adaptive pooling to other than 1x1), `coremltools.convert(..., convert_to=\"mlprogram\", "
                      "compute_precision=FLOAT32)`, the `.mlpackage` zipped with deterministic bytes (unzip to `coreml.mlpackage`); the Core ML "
                      "input and output names are recorded. Core ML predicts on **macOS only**: elsewhere the file is built, its spec read back "
                      "and checked, and the row is **not applicable** with that reason; judge it on a Mac by replaying the check's bundle there "
                      "(\"Replay where it is deployed\"), where it runs on the CPU (`CPU_ONLY`), a batch fed sample by sample; the "
                      "`[executorch]` extra pulls coremltools too"}

INSTALL = "pip install coremltools"
PACKAGE = "coreml.mlpackage"  # the folder inside the zip


def require_coremltools() -> Any:
    try:
        import coremltools
    except ImportError:
        raise NotApplicable(f"not applicable: coremltools is not installed: {INSTALL}") from None
    return coremltools


def predicts_here() -> str | None:
    """Why Core ML cannot predict on this machine, or None on macOS."""
    if platform.system() == "Darwin":
        return None
    return (f"not applicable on this machine: Core ML predicts only on macOS (this is {platform.system()}); the file is built and its "
            "spec checked: judge it on a Mac with `export-check check --bundle` here and `export-check replay` there")


def _zip_folder(folder: Path, dest: Path) -> None:
    """``folder`` as a zip under ``PACKAGE/``: members sorted, fixed timestamps and modes, deflated."""
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            archive.writestr(zip_entry(f"{PACKAGE}/{path.relative_to(folder).as_posix()}", zipfile.ZIP_DEFLATED), path.read_bytes())


def _unzip(path: Path, into: Path) -> Path:
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if not name.startswith(f"{PACKAGE}/") or ".." in Path(name).parts or name.startswith("/"):
                raise ArtifactError(f"{path.name}: holds {name!r}, outside {PACKAGE}/; not a Core ML package export-check wrote")
        archive.extractall(into)
    return into / PACKAGE


def _names(spec: Any) -> tuple[list[str], list[str]]:
    return [i.name for i in spec.description.input], [o.name for o in spec.description.output]


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    ct = require_coremltools()
    import torch

    from ._program import export_inputs

    model = copy.deepcopy(ctx.model).eval()
    args, kwargs, _ = export_inputs(ctx, model)
    axis = {i.name: i.batch_axis for i in ctx.signature.inputs}
    positional = [i.name for i in ctx.signature.inputs if not i.keyword]
    args = tuple(a.narrow(axis[n], 0, 1) for a, n in zip(args, positional, strict=True))
    kwargs = {k: v.narrow(axis[k], 0, 1) for k, v in kwargs.items()}
    try:
        program = torch.export.export(model, args, kwargs or None, strict=False)
    except Exception as exc:
        raise ArtifactError(f"torch.export failed: {type(exc).__name__}: {' '.join(str(exc).split())[:600]}") from None
    try:
        model = ct.convert(program.run_decompositions({}), convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                           minimum_deployment_target=ct.target.macOS13)
    except Exception as exc:
        raise ArtifactError(f"coremltools.convert failed: {type(exc).__name__}: {' '.join(str(exc).split())[:600]}") from None
    inputs, outputs = _names(model.get_spec())
    expected = len(ctx.signature.inputs)
    if len(inputs) != expected:
        raise ArtifactError(f"the Core ML model takes {len(inputs)} inputs ({', '.join(inputs)}); the model has {expected}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / PACKAGE
        model.save(str(folder))
        with atomic_path(path) as partial:
            _zip_folder(folder, partial)
    return {"coreml_inputs": ",".join(inputs), "coreml_outputs": ",".join(outputs), "batch": "1 (a batch is fed one sample at a time)",
            "compute_precision": "FLOAT32", "format": "mlprogram (macOS 13+), zipped", "coremltools": ct.__version__}


def read_spec(path: Path) -> tuple[list[str], list[str]]:
    """The Core ML input and output names of a zipped package, read without predicting (any system)."""
    ct = require_coremltools()
    with tempfile.TemporaryDirectory() as tmp:
        package = _unzip(path, Path(tmp))
        spec = ct.utils.load_spec(str(package))
    return _names(spec)


class CoreMLRunner:
    """The zipped ``.mlpackage`` unpacked and loaded by Core ML on the CPU (macOS only)."""

    def __init__(self, path: Path, ctx: BuildContext) -> None:
        self.path, self.ctx = path, ctx
        self.model: Any = None
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> CoreMLRunner:
        ct = require_coremltools()
        self.inputs, self.outputs = read_spec(self.path)  # the file is checked on every system
        why = predicts_here()
        if why is not None:
            raise NotApplicable(why)
        self._tmp = tempfile.TemporaryDirectory()
        package = _unzip(self.path, Path(self._tmp.name))
        self.model = ct.models.MLModel(str(package), compute_units=ct.ComputeUnit.CPU_ONLY)
        return self

    def __exit__(self, *exc: object) -> None:
        self.model = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.model is not None, "runner used outside its with-block"
        signature = self.ctx.signature
        arrays = positional_inputs(feeds, signature)
        if len(arrays) != len(self.inputs):
            raise ArtifactError(f"{self.path.name} takes {len(self.inputs)} inputs; got {len(arrays)}")
        axes = [i.batch_axis for i in signature.inputs if not i.keyword] + [i.batch_axis for i in signature.inputs if i.keyword]
        count = arrays[0].shape[axes[0]] if arrays else 0
        per_sample = []
        for index in range(count):  # the program takes one sample: a batch is fed sample by sample
            one = {name: np.ascontiguousarray(np.take(a, [index], axis=ax)) for name, a, ax in zip(self.inputs, arrays, axes, strict=True)}
            out = self.model.predict(one)
            per_sample.append([np.asarray(out[name], dtype=np.float32) for name in self.outputs])
        out_axes = [0] * len(self.outputs) if signature is SINGLE else [o.batch_axis for o in signature.outputs]
        values = [np.concatenate([s[i] for s in per_sample], axis=out_axes[i] if i < len(out_axes) else 0) for i in range(len(self.outputs))]
        return listed_outputs(values, self.ctx.signature)


def open_runner(path: Path, ctx: BuildContext) -> CoreMLRunner:
    return CoreMLRunner(path, ctx)


__all__ = ["build", "open_runner", "predicts_here", "read_spec"]
