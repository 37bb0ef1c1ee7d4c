"""executorch: the model as an on-device ExecuTorch program. ``torch.export`` (non-strict) with the batch
axis dynamic up to an explicit bound, ``executorch.exir.to_edge_transform_and_lower`` with the XNNPACK
partitioner (fp32), ``to_executorch()``, written as one ``.pte``; reloaded from the file with the
ExecuTorch Python runtime (``Runtime.get().load_program(path)``, ``load_method("forward")``,
``execute``). ``executorch-int8`` (:mod:`.executorch_int8`) is the same path after PT2E static int8 with
the XNNPACK quantizer.

Two traps this module guards against:

* The layout. A ``.pte`` records each input's dim order (its memory layout: contiguous ``(0, 1, 2, 3)``
  or channels-last ``(0, 2, 3, 1)``) as it was in the export example, and the runtime does not check
  what it is fed: a channels-last tensor fed to a program exported contiguous (or the reverse) runs
  and returns numbers off by the whole signal (MAE ~2 on the bundled ResNet, no error;
  pytorch/executorch#21837). The runner reads the dim order of every input from the program itself
  and feeds exactly that layout; the row's details record it.
* The batch bound. ExecuTorch plans memory for an upper bound of every dynamic axis, so the batch axis
  is exported as ``Dim("batch", min=1, max=BATCH_MAX)``: 64 (``diagnostics.shapes.PROBE_IMAGES``, the
  largest batch the tool's batch-size check runs) or the example batch if larger. The bound planned in
  the file is read back and recorded; a larger batch is refused by the runtime ("Attempted to resize a
  bounded tensor with a maximum capacity of ... elements"), which is that batch's error, with the
  runtime's own message. Declared dynamic axes other than the batch are not bounded yet: such a model
  is not applicable (future work, as is a per-layer table for ``.pte`` files).

An optional extra: ``pip install "export-check[executorch]"``.
"""

from __future__ import annotations

import copy
import io
import re
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stderr
from pathlib import Path
from typing import Any

import numpy as np

from ..diagnostics.shapes import PROBE_IMAGES
from ..errors import ArtifactError
from ._common import NativeWarning, atomic_path, captured_fd
from ._program import dynamic_axes_of, export_inputs, require_dynamic_program
from .base import BuildContext, NotApplicable, listed_outputs, positional_inputs

INSTALL = 'pip install "export-check[executorch]" (or pip install executorch)'
BATCH_MAX = PROBE_IMAGES  # the batch bound the program is planned for (or the example batch, if larger)
METHOD = "forward"
PARTITIONER = "XnnpackPartitioner (fp32)"
LAYOUT_NAMES = {4: "channels_last", 5: "channels_last_3d"}  # the names torch gives the non-contiguous dim orders it has formats for

# Test-only: feed this dim order instead of the one the program was exported with (tests/integration/test_executorch.py
# proves a layout mismatch is a failing row). None: the program's own, always, outside that test.
_FEED_DIM_ORDER: tuple[int, ...] | None = None
# Test-only: the batch bound to export with instead of BATCH_MAX (a file that refuses a batch the tool runs).
_BATCH_MAX: int | None = None

# What the runtime prints to stderr on loading (the CPU probe of its threadpool): noise, dropped.
_NOISE = re.compile(r"^\[cpuinfo_utils\.cpp:\d+\]")
_RUNTIME_LINE = re.compile(r"^\[(?P<where>[\w.]+:\d+)\] (?P<text>.*)$")


def require_executorch() -> Any:
    """The ``executorch`` package, or NotApplicable naming the extra."""
    try:
        import executorch
        import executorch.runtime  # noqa: F401  (the Python runtime; a build without it cannot reload the file)
    except ImportError:
        raise NotApplicable(f"not applicable: executorch is not installed: {INSTALL}") from None
    return executorch


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("executorch")
    except PackageNotFoundError:
        return "?"


def dim_order_name(order: tuple[int, ...]) -> str:
    """``contiguous``, ``channels_last`` (4-D ``(0, 2, 3, 1)``), or the order itself."""
    if order == tuple(range(len(order))):
        return "contiguous"
    if len(order) in LAYOUT_NAMES and order == (0, *range(2, len(order)), 1):
        return LAYOUT_NAMES[len(order)]
    return "dim order " + ",".join(map(str, order))


def with_dim_order(tensor: Any, order: tuple[int, ...]) -> Any:
    """``tensor`` with the same values laid out in memory in ``order`` (outermost axis first)."""
    if order == tuple(range(tensor.dim())):
        return tensor.contiguous()
    inverse = [order.index(axis) for axis in range(len(order))]
    return tensor.permute(*order).contiguous().permute(*inverse)


def program_inputs(path: Path) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(dim order, planned sizes: the upper bound of every dynamic axis) of each input of ``forward``, read
    from the file (the runtime's ``MethodMeta`` says the sizes but not the dim order)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    pte = deserialize_pte_binary(path.read_bytes())
    program = getattr(pte, "program", pte)
    plan = next((p for p in program.execution_plan if p.name == METHOD), None)
    if plan is None:
        raise ArtifactError(f"{path.name} has no method {METHOD!r}")
    found: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for index in plan.inputs:
        value = plan.values[index].val
        if not hasattr(value, "dim_order"):
            raise ArtifactError(f"{path.name}: input {len(found)} of {METHOD} is a {type(value).__name__}, not a tensor")
        found.append((tuple(int(d) for d in value.dim_order), tuple(int(s) for s in value.sizes)))
    return found


def _delegates(path: Path) -> str:
    from executorch.exir._serialize._program import deserialize_pte_binary

    pte = deserialize_pte_binary(path.read_bytes())
    program = getattr(pte, "program", pte)
    ids = [d.id for plan in program.execution_plan for d in plan.delegates]
    return ", ".join(f"{name} x{ids.count(name)}" for name in dict.fromkeys(ids)) or "none (every op on the portable kernels)"


@contextmanager
def runtime_stderr(lines: list[str]) -> Iterator[None]:
    """What the runtime logs during the block, into ``lines`` (its location prefix ``[file.cpp:N]``
    dropped), less the CPU probe's noise. The Python runtime logs through Python's ``sys.stderr`` (its
    C++ log writes there), its native parts to file descriptor 2: both are caught, one redirect at a time.
    Both redirects are process-wide: anything else written meanwhile (another thread's progress line) is
    not the runtime's log line and is passed on to stderr unchanged."""
    caught: list[str] = []
    said = io.StringIO()
    others: list[str] = []
    try:
        with captured_fd(2, 1 << 16) as caught, redirect_stderr(said):
            yield
    finally:  # also when the block raised: what the runtime printed is why
        for line in (said.getvalue() + "".join(caught)).splitlines():
            match = _RUNTIME_LINE.match(line)
            if match is None:
                others.append(line)
            elif not _NOISE.match(line):
                lines.append(match["text"].strip().rstrip("."))
        if others:
            sys.stderr.write("".join(f"{line}\n" for line in others))
            sys.stderr.flush()


def bounded_inputs(ctx: BuildContext, model: Any) -> tuple[tuple[Any, ...], dict[str, Any], dict[str, Any], int]:
    """``export_inputs`` with the batch axis bounded: (args, kwargs, dynamic_shapes, bound)."""
    from torch.export import Dim

    args, kwargs, shapes = export_inputs(ctx, model)
    declared = {i.name: [a for a, _ in i.dynamic_axes] for i in ctx.signature.inputs if i.dynamic_axes}
    if declared:
        named = "; ".join(f"{name}: axis {', '.join(map(str, axes))}" for name, axes in declared.items())
        raise NotApplicable(f"not applicable: the model declares dynamic axes besides the batch ({named}); an ExecuTorch program "
                            "plans memory for an upper bound of every dynamic axis, and export-check bounds only the batch axis")
    positional = [i.name for i in ctx.signature.inputs if not i.keyword]
    by_name = {**dict(zip(positional, args, strict=True)), **kwargs}
    batch_axis = {i.name: i.batch_axis for i in ctx.signature.inputs}
    example_batch = max(int(t.shape[batch_axis[name]]) for name, t in by_name.items())
    bound = _BATCH_MAX if _BATCH_MAX is not None else max(BATCH_MAX, example_batch)
    if example_batch > bound:  # only the test-only bound can be below the example
        args = tuple(a.narrow(batch_axis[n], 0, bound) for a, n in zip(args, positional, strict=True))
        kwargs = {k: v.narrow(batch_axis[k], 0, bound) for k, v in kwargs.items()}
    batch = Dim("batch", min=1, max=bound)
    params = list(shapes)  # forward's parameter names, positional inputs first (export_inputs' order)
    names = positional + list(kwargs)
    for param, name in zip(params, names, strict=True):
        shapes[param] = {axis: batch for axis in dynamic_axes_of(ctx)[name]}
    return args, kwargs, shapes, bound


def export_bounded(ctx: BuildContext, model: Any) -> tuple[Any, int]:
    """``torch.export.export`` (strict=False) with the bounded batch axis: (program, bound)."""
    import torch

    args, kwargs, shapes, bound = bounded_inputs(ctx, model)
    try:
        program = torch.export.export(model, args, kwargs or None, dynamic_shapes=shapes, strict=False)
    except Exception as exc:
        raise ArtifactError(f"torch.export failed: {type(exc).__name__}: {' '.join(str(exc).split())[:600]}") from None
    require_dynamic_program(program, ctx)
    return program, bound


def lower_and_save(program: Any, path: Path, bound: int, extra: dict[str, str]) -> dict[str, str]:
    """XNNPACK lowering, ``to_executorch``, the ``.pte`` written atomically; the details read back from the file."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    try:
        lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
        buffer = lowered.to_executorch().buffer
    except Exception as exc:
        raise ArtifactError(f"ExecuTorch lowering failed: {type(exc).__name__}: {' '.join(str(exc).split())[:600]}") from None
    with atomic_path(path) as tmp:
        tmp.write_bytes(buffer)
    inputs = program_inputs(path)
    orders = {dim_order_name(order) for order, _ in inputs}
    planned = ", ".join(str(sizes[0]) if sizes else "-" for _, sizes in inputs)
    return {"dim_order": ", ".join(sorted(orders)), "input_dim_orders": "; ".join(",".join(map(str, o)) for o, _ in inputs),
            "batch_bound": f"exported with Dim('batch', min=1, max={bound}); planned in the .pte for {planned}",
            "delegates": _delegates(path), **extra, "executorch": version()}


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    require_executorch()
    program, bound = export_bounded(ctx, copy.deepcopy(ctx.model).eval())
    return lower_and_save(program, path, bound, {"partitioner": PARTITIONER})


def exported_program(ctx: BuildContext) -> tuple[Any, int]:
    """The program ``build`` lowers, with its batch bound: what ``diagnostics.etdump`` rebuilds (with an
    ETRecord) to explain a ``.pte`` of this kind."""
    require_executorch()
    return export_bounded(ctx, copy.deepcopy(ctx.model).eval())


def _pin_threads(threads: int) -> None:
    """XNNPACK's threadpool (process-wide; all cores by default) at the run's ``threads``, as every runtime is pinned."""
    from executorch.extension.pybindings import portable_lib

    reset = getattr(portable_lib, "_unsafe_reset_threadpool", None)
    count = getattr(portable_lib, "_threadpool_get_thread_count", None)
    if reset is not None and (count is None or count() != threads):
        reset(threads)


class PteRunner:
    """The ``.pte`` loaded by the ExecuTorch Python runtime, fed in the dim order it was exported with."""

    def __init__(self, path: Path, ctx: BuildContext) -> None:
        self.path, self.ctx = path, ctx
        self.method: Any = None
        self.orders: list[tuple[int, ...]] = []

    def __enter__(self) -> PteRunner:
        require_executorch()
        noise: list[str] = []
        with runtime_stderr(noise):
            from executorch.runtime import Runtime

            self.orders = [order for order, _ in program_inputs(self.path)]
            runtime = Runtime.get()
            _pin_threads(self.ctx.threads)
            program = runtime.load_program(self.path)
            method = program.load_method(METHOD)
        if method is None:
            raise ArtifactError(f"{self.path.name} has no method {METHOD!r}" + (f": {'; '.join(noise)}" if noise else ""))
        for line in noise:
            warnings.warn(f"executorch: {line}", NativeWarning, stacklevel=2)
        if _FEED_DIM_ORDER is not None:
            self.orders = [_FEED_DIM_ORDER] * len(self.orders)
        self.method = method
        return self

    def __exit__(self, *exc: object) -> None:
        self.method = None

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        assert self.method is not None, "runner used outside its with-block"
        signature = self.ctx.signature
        arrays = positional_inputs(feeds, signature)
        if len(arrays) != len(self.orders):
            raise ArtifactError(f"{self.path.name} takes {len(self.orders)} inputs; got {len(arrays)}")
        inputs = [with_dim_order(torch.from_numpy(np.ascontiguousarray(a)), order) for a, order in zip(arrays, self.orders, strict=True)]
        said: list[str] = []
        try:
            with runtime_stderr(said):
                outputs = self.method.execute(inputs)
        except Exception as exc:  # the runtime's own words (stderr) say why, its exception only the error code
            text = " ".join(str(exc).split())[:300]
            raise ArtifactError(f"executorch: {'; '.join(said) + ' (' if said else ''}{text}{')' if said else ''}") from None
        for line in said:
            warnings.warn(f"executorch: {line}", NativeWarning, stacklevel=2)
        values = [np.ascontiguousarray(o.detach().numpy()) if hasattr(o, "detach") else np.asarray(o) for o in outputs]
        return listed_outputs(values, signature)


def open_runner(path: Path, ctx: BuildContext) -> PteRunner:
    return PteRunner(path, ctx)
