"""Helpers shared by the artifact modules: atomic file writes, captured warnings, the TorchScript and ONNX runners."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArtifactError, plain_text
from ..files import replacing
from ..pinned import ORT_EXECUTION_MODE, ORT_GRAPH_OPTIMIZATION, ORT_INTER_OP_THREADS, ORT_LEVELS, ORT_LOG_SEVERITY, quiet_onnxruntime
from ..signature import SINGLE, Signature, positional_names
from ._heap import reused_heap
from .base import feeds_to_args, listed_outputs, named_outputs, output_arrays, single_input


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


# Libraries whose loggers print through their own stderr handler and do not propagate to the root
# (torch._logging sets "torch" up so): their WARNING records are captured there, their handlers muted.
OWN_HANDLER_LOGGERS = ("torch", "torchao", "onnxscript")


class _Capture(logging.Handler):
    """The one process-wide capture behind every ``captured_warnings`` block, on any thread.

    The observe stage diagnoses one row on a worker thread while the main thread replays the next
    (exporter/run/observe.py), and both capture warnings. ``warnings.catch_warnings`` and adding and
    muting log handlers per block change process-wide state and restore it on exit: two threads
    entering and leaving in an interleaved order would restore each other's state and leave every
    later warning recorded into a finished block's list, dropped. So the first block to open installs
    one capture (warnings' filters and ``showwarning``, a root log handler, the muted handlers) and the
    last to close removes it; in between, each warning and WARNING log record goes to the innermost
    open block of the thread that raised it. One from a thread with no block of its own (a library's
    worker thread) goes to the block opened last, as it went to the one open block before: never
    dropped (the muted handlers would not show it either).
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.guard = threading.RLock()
        self.opened: list[tuple[int, list[str]]] = []  # every open block (its thread, its notes), in the order they opened
        self.saved: Any = None  # (the catch_warnings block, muted handlers and levels, own loggers)
        self.original_showwarning: Any = warnings.showwarning

    def _sink(self, thread: int | None) -> list[str] | None:
        with self.guard:
            own = next((notes for ident, notes in reversed(self.opened) if ident == thread), None)
            if own is not None or not self.opened:
                return own
            return self.opened[-1][1]  # a thread with no block of its own (a library's worker): the block opened last

    def emit(self, record: logging.LogRecord) -> None:
        sink = self._sink(record.thread)
        if sink is not None:
            sink.append(f"log {record.name}: {plain_text(record.getMessage()).strip()}")

    def _showwarning(self, message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None, line: str | None = None) -> None:
        sink = self._sink(threading.get_ident())
        if sink is None:  # only between the last block's close and showwarning's restore
            self.original_showwarning(message, category, filename, lineno, file, line)
            return
        text = plain_text(str(message)).strip()
        first_line = text.splitlines()[0] if text else ""
        sink.append(f"{category.__name__}: {first_line}")

    def add(self, note: str) -> None:
        """A note made elsewhere (a replay child's warning, already worded), into this thread's block; a warning when none is open."""
        sink = self._sink(threading.get_ident())
        if sink is None:
            warnings.warn(note, UserWarning, stacklevel=3)
        else:
            sink.append(note)

    def push(self, notes: list[str]) -> None:
        with self.guard:
            if not self.opened:
                block = warnings.catch_warnings()
                block.__enter__()
                self.original_showwarning = warnings.showwarning
                warnings.simplefilter("always")
                warnings.showwarning = self._showwarning
                root = logging.getLogger()
                root.addHandler(self)
                own = [logger for name in OWN_HANDLER_LOGGERS if not (logger := logging.getLogger(name)).propagate]
                muted = [(h, h.level) for logger in own for h in logger.handlers]
                for logger in own:
                    logger.addHandler(self)
                for h, _ in muted:
                    h.setLevel(logging.CRITICAL + 1)
                self.saved = (block, muted, own)
            self.opened.append((threading.get_ident(), notes))

    def pop(self, notes: list[str]) -> None:
        with self.guard:
            ident = threading.get_ident()
            for i in range(len(self.opened) - 1, -1, -1):
                if self.opened[i][0] == ident and self.opened[i][1] is notes:
                    del self.opened[i]
                    break
            if not self.opened:
                block, muted, own = self.saved
                logging.getLogger().removeHandler(self)
                for logger in own:
                    logger.removeHandler(self)
                for h, level in muted:
                    h.setLevel(level)
                block.__exit__(None, None, None)  # the filters and showwarning as they were
                self.saved = None


_CAPTURE = _Capture()
# Redirecting a file descriptor (native_warnings, _native.stdout_into_notes) is process-wide: two
# threads doing it at once would restore each other's saved descriptor and leave fd 2 (or 1) pointing
# into a deleted temporary file. One redirect at a time.
FD_REDIRECT = threading.RLock()


@contextlib.contextmanager
def captured_warnings(notes: list[str]) -> Iterator[None]:
    """Collect warnings and WARNING log records from exporters into ``notes`` for the report,
    instead of letting them reach the terminal (or fail a ``-W error`` test run). Thread-safe: what
    a thread raises goes to its own innermost block (``_Capture``)."""
    _CAPTURE.push(notes)
    try:
        yield
    finally:
        _CAPTURE.pop(notes)


def pass_on_notes(notes: Any) -> None:
    """Notes a replay child captured (builder/clean.py), into the block open here, as if raised here."""
    for note in notes:
        _CAPTURE.add(str(note))


class NativeWarning(UserWarning):
    """A warning native code printed to stderr (torch's C++ ``TORCH_WARN``), turned into a Python warning."""


# torch's C++ warning line: "[W1129 18:18:02.751058369 Quantizer.cpp:111] Warning: <text> (function <name>)"
_C10_WARNING = re.compile(r"^\[W\d{4} [\d:.]+ [^\]]*\] Warning: (?P<text>.*?)(?: \(function \S+\))?$")


@contextlib.contextmanager
def captured_fd(fd: int, limit: int) -> Iterator[list[str]]:
    """Point file descriptor ``fd`` (1 or 2) at a temporary file for the block; once it ends (also by
    an exception), the yielded list holds what was written (its first ``limit`` bytes). One redirect
    at a time (``FD_REDIRECT``); a process without that descriptor (a daemon) catches nothing."""
    caught: list[str] = []
    stream = sys.stdout if fd == 1 else sys.stderr
    with FD_REDIRECT:
        stream.flush()
        try:
            saved = os.dup(fd)
        except OSError:
            yield caught
            return
        try:
            with tempfile.TemporaryFile() as sink:
                os.dup2(sink.fileno(), fd)
                try:
                    yield caught
                finally:
                    stream.flush()
                    os.dup2(saved, fd)
                    sink.seek(0)
                    caught.append(sink.read(limit).decode("utf-8", "replace"))
        finally:
            os.close(saved)


@contextlib.contextmanager
def native_warnings() -> Iterator[None]:
    """Catch what native code writes to stderr during the block: torch's C++ warnings (which bypass
    Python's ``warnings``, e.g. when ``torch.jit.load`` rebuilds quantized tensors) become
    :class:`NativeWarning` (so ``captured_warnings`` puts them in the row's notes); anything else
    is passed on to stderr unchanged."""
    with captured_fd(2, 1 << 16) as caught:
        yield
    text = "".join(caught)
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


def laid_out(array: np.ndarray, layout: str) -> Any:
    """``array`` as a tensor laid out in memory as the app feeds it (``layout``: exporter/layouts.py), same values."""
    import torch

    from ..layouts import dim_order

    tensor = torch.from_numpy(np.ascontiguousarray(array))
    order = dim_order(layout, tensor.dim())
    inverse = [order.index(axis) for axis in range(len(order))]
    return tensor if order == tuple(range(tensor.dim())) else tensor.permute(*order).contiguous().permute(*inverse)


class TorchModuleRunner:
    """Runs a torch callable reloaded from disk (``load(path)``): named inputs by position or keyword,
    named outputs. The TorchScript, ``torch.export`` and AOTInductor runners differ in the loader only."""

    def __init__(self, path: Path, signature: Signature = SINGLE) -> None:
        self.path = path
        self.signature = signature
        self.module: Any = None
        self.heap_reused = False  # while open: freed activations stay in the heap (_heap.py), as the baseline's happened to
        self._heap: contextlib.ExitStack | None = None

    def load(self, path: Path) -> Any:
        raise NotImplementedError

    def __enter__(self) -> TorchModuleRunner:
        heap = contextlib.ExitStack()
        self.heap_reused = heap.enter_context(reused_heap())
        try:
            self.module = self.load(self.path)
        except BaseException:
            heap.close()
            self.heap_reused = False
            raise
        self._heap = heap
        return self

    def __exit__(self, *exc: object) -> None:
        self.module = None
        if self._heap is not None:
            self._heap.close()
            self._heap = None

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        assert self.module is not None, "runner used outside its with-block"
        if self.signature is SINGLE:
            with torch.inference_mode():
                return named_outputs(self.module(torch.from_numpy(np.ascontiguousarray(single_input(feeds)))), self.path.name)
        args, kwargs = feeds_to_args(feeds, self.signature)
        layouts = {i.name: i.layout for i in self.signature.inputs}  # the app's (exporter/layouts.py), as every file is fed
        positional = [i.name for i in self.signature.inputs if not i.keyword] or list(self.signature.input_names)
        with torch.inference_mode():
            out = self.module(*(laid_out(a, layouts[n]) for a, n in zip(args, positional, strict=True)),
                              **{k: laid_out(v, layouts[k]) for k, v in kwargs.items()})
        names = self.signature.output_names
        if (type(out) in (tuple, list) and len(names) > 1 and len(out) == len(names) and all(isinstance(v, torch.Tensor) for v in out)
                and names != positional_names(len(names))):
            # a named tuple or a dataclass the file returns as a plain tuple (a TorchScript trace keeps no field names):
            # its fields in their order, as eager's named them
            return output_arrays(listed_outputs(list(out), self.signature), self.path.name)
        return output_arrays(out, self.path.name, self.signature.outputs[0].name if len(self.signature.outputs) == 1 else "output")


class TorchScriptRunner(TorchModuleRunner):
    """Runs a TorchScript file reloaded from disk with ``torch.jit.load``."""

    def load(self, path: Path) -> Any:
        return load_torchscript(path)


# onnxruntime's graph optimisation levels by the short name a kind pins and its rows record.


class OnnxRunner:
    """Runs an ONNX file in an onnxruntime CPU session with pinned threads, fed by input name."""

    def __init__(self, path: Path, threads: int, signature: Signature = SINGLE, graph_optimization: str = ORT_GRAPH_OPTIMIZATION) -> None:
        self.path = path
        self.threads = threads
        self.signature = signature
        self.graph_optimization = graph_optimization  # a key of ORT_LEVELS, pinned per kind
        self.session: Any = None  # an onnxruntime.InferenceSession inside the with-block
        self.input_names: list[str] = []
        self.output_names: list[str] = []

    def __enter__(self) -> OnnxRunner:
        ort = quiet_onnxruntime()

        options = ort.SessionOptions()
        # Pinned, as recorded in the report's settings (config.RunConfig.inference_settings).
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = ORT_INTER_OP_THREADS
        options.execution_mode = {"sequential": ort.ExecutionMode.ORT_SEQUENTIAL}[ORT_EXECUTION_MODE]
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, ORT_LEVELS[self.graph_optimization])
        options.log_severity_level = ORT_LOG_SEVERITY
        self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        inputs = self.session.get_inputs()
        if not inputs:
            raise ArtifactError(f"{self.path.name} has no inputs: the export turned the model's input into a constant")
        names = [i.name for i in inputs]
        if self.signature is SINGLE:
            if len(inputs) != 1:
                raise ArtifactError(f"{self.path.name} has {len(inputs)} inputs; export-check feeds exactly one")
        elif sorted(names) != sorted(self.signature.input_names):
            raise ArtifactError(f"{self.path.name} takes inputs {', '.join(names)}, the golden set has {', '.join(self.signature.input_names)}")
        self.input_names = names
        self.output_names = [o.name for o in self.session.get_outputs()]
        return self

    def __exit__(self, *exc: object) -> None:
        self.session = None

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.session is not None, "runner used outside its with-block"
        if self.signature is SINGLE:
            feed = {self.input_names[0]: single_input(feeds)}
        else:
            missing = [n for n in self.input_names if n not in feeds]
            if missing or len(feeds) != len(self.input_names):
                raise ArtifactError(f"{self.path.name} takes inputs {', '.join(self.input_names)}; got {', '.join(feeds)}")
            feed = {n: np.ascontiguousarray(feeds[n]) for n in self.input_names}
        outputs = self.session.run(None, feed)
        return dict(zip(self.output_names, outputs, strict=True))


def onnx_batch_dims(path: Path, signature: Signature = SINGLE) -> list[tuple[str, str, int, str | int | None]]:
    """(side, name, batch axis, its dimension) for every graph input and output: a symbol name when
    dynamic, an int when fixed, ``None`` when unknown. Axes come from the signature (default 0)."""
    from ._external import graph_io

    graph_inputs, graph_outputs = graph_io(path)  # without the weights: this runs after every ONNX build
    axes = {i.name: i.batch_axis for i in signature.inputs} | {o.name: o.batch_axis for o in signature.outputs}

    def dim(value: Any, axis: int) -> str | int | None:
        dims = value.type.tensor_type.shape.dim
        if len(dims) <= axis:
            return None
        if dims[axis].HasField("dim_param"):
            return str(dims[axis].dim_param)
        return int(dims[axis].dim_value) if dims[axis].HasField("dim_value") else None

    found: list[tuple[str, str, int, str | int | None]] = []
    for side, values in (("input", graph_inputs), ("output", graph_outputs)):
        for value in values:
            axis = axes.get(value.name, 0)
            found.append((side, value.name, axis, dim(value, axis)))
    return found


def require_dynamic_batch(path: Path, what: str, signature: Signature = SINGLE) -> None:
    """Raise when the batch axis of an input or output of the file is not symbolic."""
    dims = onnx_batch_dims(path, signature)
    if not any(side == "input" for side, *_ in dims):
        raise ArtifactError(f"{what}: the ONNX graph has no inputs: the export turned the model's input into a constant")
    for side, name, axis, size in dims:
        if not isinstance(size, str) or not size:
            where = side if signature is SINGLE else f"{side} {name!r} (axis {axis})"
            raise ArtifactError(f"{what}: the {where} batch axis is fixed to {size!r}, not dynamic; the file only accepts that batch size")
