"""Helpers shared by the artifact modules: atomic file writes, captured warnings, the TorchScript and ONNX runners."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..config import ORT_EXECUTION_MODE, ORT_GRAPH_OPTIMIZATION, ORT_INTER_OP_THREADS
from ..errors import ArtifactError
from ..files import replacing
from .base import named_outputs, single_input


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary sibling path to write to; on success it replaces ``path`` atomically.

    A reader never sees a half-written artifact: the file at ``path`` is either the previous one,
    or absent, or complete. The temporary name carries the pid, so that the build server can
    remove what a crashed child left behind.
    """
    tmp = path.with_name(f".{path.stem}.partial-{os.getpid()}{path.suffix}")
    with replacing(path, tmp):
        yield tmp
        if not tmp.is_file() or tmp.stat().st_size == 0:
            raise ArtifactError(f"exporter wrote nothing to {tmp.name}")


class _ListHandler(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(f"log {record.name}: {record.getMessage().strip()}")


@contextlib.contextmanager
def captured_warnings(notes: list[str]) -> Iterator[None]:
    """Collect warnings and WARNING log records from exporters into ``notes`` for the report,
    instead of letting them reach the terminal (or fail a ``-W error`` test run)."""
    handler = _ListHandler(notes)
    root = logging.getLogger()
    root.addHandler(handler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            root.removeHandler(handler)
            for w in caught:
                first_line = str(w.message).strip().splitlines()[0] if str(w.message).strip() else ""
                notes.append(f"{w.category.__name__}: {first_line}")


class NativeWarning(UserWarning):
    """A warning native code printed to stderr (torch's C++ ``TORCH_WARN``), turned into a Python warning."""


# torch's C++ warning line: "[W1129 18:18:02.751058369 Quantizer.cpp:111] Warning: <text> (function <name>)"
_C10_WARNING = re.compile(r"^\[W\d{4} [\d:.]+ [^\]]*\] Warning: (?P<text>.*?)(?: \(function \S+\))?$")


@contextlib.contextmanager
def native_warnings() -> Iterator[None]:
    """Catch what native code writes to stderr during the block: torch's C++ warnings (which bypass
    Python's ``warnings``, e.g. when ``torch.jit.load`` rebuilds quantized tensors) become
    :class:`NativeWarning` (so ``captured_warnings`` puts them in the row's notes); anything else
    is passed on to stderr unchanged."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all (a daemon): nothing to catch
        yield
        return
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
                sink.seek(0)
                text = sink.read(1 << 16).decode("utf-8", "replace")
    finally:
        os.close(saved)
    for line in text.splitlines():
        match = _C10_WARNING.match(line)
        if match:
            warnings.warn(match["text"], NativeWarning, stacklevel=3)
        elif line.strip():
            sys.stderr.write(line + "\n")
    sys.stderr.flush()


def dedupe(notes: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(notes))


def load_torchscript(path: Path) -> Any:
    """``torch.jit.load`` on the CPU, in eval mode; torch's C++ warnings (loading a quantized module
    prints a deprecation) become :class:`NativeWarning`."""
    import torch

    with native_warnings():
        module = torch.jit.load(str(path), map_location="cpu")
    module.eval()
    return module


class TorchScriptRunner:
    """Runs a TorchScript file reloaded from disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.module = None

    def __enter__(self) -> TorchScriptRunner:
        self.module = load_torchscript(self.path)
        return self

    def __exit__(self, *exc: object) -> None:
        self.module = None

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        assert self.module is not None, "runner used outside its with-block"
        with torch.inference_mode():
            out = self.module(torch.from_numpy(single_input(feeds)))
        return named_outputs(out, self.path.name)


class OnnxRunner:
    """Runs an ONNX file in an onnxruntime CPU session with pinned threads."""

    def __init__(self, path: Path, threads: int) -> None:
        self.path = path
        self.threads = threads
        self.session: Any = None  # an onnxruntime.InferenceSession inside the with-block
        self.input_name = ""
        self.output_names: list[str] = []

    def __enter__(self) -> OnnxRunner:
        import onnxruntime as ort

        options = ort.SessionOptions()
        # Pinned, as recorded in the report's settings (config.RunConfig.inference_settings).
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = ORT_INTER_OP_THREADS
        options.execution_mode = {"sequential": ort.ExecutionMode.ORT_SEQUENTIAL}[ORT_EXECUTION_MODE]
        options.graph_optimization_level = {"all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[ORT_GRAPH_OPTIMIZATION]
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        inputs = self.session.get_inputs()
        if len(inputs) != 1:
            raise ArtifactError(f"{self.path.name} has {len(inputs)} inputs; export-check feeds exactly one")
        self.input_name = inputs[0].name
        self.output_names = [o.name for o in self.session.get_outputs()]
        return self

    def __exit__(self, *exc: object) -> None:
        self.session = None

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.session is not None, "runner used outside its with-block"
        outputs = self.session.run(None, {self.input_name: single_input(feeds)})
        return dict(zip(self.output_names, outputs, strict=True))


def onnx_batch_dims(path: Path) -> tuple[str | int | None, str | int | None]:
    """The first dimension of the ONNX file's first input and first output: a symbol name when
    dynamic, an int when fixed, ``None`` when unknown."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)

    def first_dim(value) -> str | int | None:
        dims = value.type.tensor_type.shape.dim
        if not dims:
            return None
        if dims[0].HasField("dim_param"):
            return dims[0].dim_param
        return dims[0].dim_value if dims[0].HasField("dim_value") else None

    return first_dim(model.graph.input[0]), first_dim(model.graph.output[0])


def require_dynamic_batch(path: Path, what: str) -> None:
    """Raise when the file's batch axis is not symbolic on both its input and its output."""
    for side, dim in zip(("input", "output"), onnx_batch_dims(path), strict=True):
        if not isinstance(dim, str) or not dim:
            raise ArtifactError(
                f"{what}: the {side} batch axis is fixed to {dim!r}, not dynamic; the file only accepts that batch size"
            )
