"""executorch: the model as an on-device ExecuTorch program. ``torch.export`` (non-strict) with the batch axis dynamic up to an explicit bound,
``executorch.exir.to_edge_transform_and_lower`` with the XNNPACK partitioner (fp32), ``to_executorch()``, written as one ``.pte``; reloaded from
the file with the ExecuTorch Python runtime (``Runtime.get().load_program(path)``, ``load_method("forward")``, ``execute``). ``executorch-int8``
(:mod:`.executorch_int8`) is the same path after PT2E static int8 with the XNNPACK quantizer.

Two traps this module guards against:

* The layout. A ``.pte`` records each input's dim order (its memory layout: contiguous ``(0, 1, 2, 3)`` or channels-last ``(0, 2, 3, 1)``) as it
  was in the export example, and the runtime does not check what it is fed: a channels-last tensor fed to a program exported contiguous (or the
  reverse) runs and returns numbers off by the whole signal (MAE ~2 on the bundled ResNet, no error; pytorch/executorch#21837). The layout the app
  feeds is part of the signature (exporter/layouts.py; default contiguous, as eager is fed): the program is exported from an example in that
  layout, the runner feeds that layout, never the one it reads from the file, and the row's details record both; a file that records another layout
  and fails its gate fails with that cause (``layout_mismatch``).
* The batch bound. ExecuTorch plans memory for an upper bound of every dynamic axis, so the batch axis is exported as
  ``Dim("batch", min=1, max=BATCH_MAX)``: 64 (``artifacts.base.PROBE_IMAGES``, the largest batch the tool's batch-size check runs) or the example
  batch if larger. The bound planned in the file is read back and recorded; a larger batch is refused by the runtime
  ("Attempted to resize a bounded tensor with a maximum capacity of ... elements"), which is that batch's error, with the runtime's own message,
  which the runner completes with the bound passed. A declared dynamic axis besides the batch is exported as
  ``Dim.AUTO(max=AXIS_FACTOR x its longest size in the golden set)``; a model with an ``nn.LSTM`` and such an axis is exported with the LSTM as a
  ``scan`` loop and its batch static at one sample (:func:`bounded_inputs`), fed sample by sample.
An optional extra: ``pip install "export-check[executorch]"``."""

from __future__ import annotations

import copy
import io
import re
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArtifactError
from ..layouts import dim_order, fed_layouts, layout_details
from ._common import NativeWarning, atomic_path, captured_fd
from ._program import dynamic_axes_of, export_inputs, require_dynamic_program
from ._recurrent import RECURRENCE, recurrent_types, with_scan_lstm
from .base import PROBE_IMAGES, BuildContext, NotApplicable, beyond_bound, listed_outputs, positional_inputs

ACCOUNTS = {"executorch": "an on-device ExecuTorch program: `torch.export` with the batch axis bounded (`Dim(\"batch\", min=1, max=64)`: the "
                          "largest batch the batch-size check runs, or the example batch if larger; the bound planned in the file is recorded in "
                          "the row's details), `executorch.exir.to_edge_transform_and_lower` with the XNNPACK partitioner (fp32), "
                          "`to_executorch()`; loaded with the ExecuTorch Python runtime (`Runtime.get().load_program`, XNNPACK's threadpool "
                          "pinned to `--threads`) and fed in the layout (dim order) the app feeds, the signature's (contiguous unless set), which"
                          " the program is exported in; the dim order the file records is read back and recorded beside it: the runtime does not "
                          "check the layout it is fed, and the wrong one gives wrong numbers without an error (pytorch/executorch#21837), so a "
                          "file that records another layout and fails its gate says so (`layout_mismatch`). A batch above the bound is refused by"
                          " the runtime, that batch size's error. A declared dynamic axis besides the batch is bounded too (\"Dynamic axes on the "
                          "device\", below). **Not applicable** without executorch; a failing row's per-layer table comes from ExecuTorch's "
                          "developer tools (\"Per-layer tables of ExecuTorch programs\", below)"}

INSTALL = 'pip install "export-check[executorch]" (or pip install executorch)'
BATCH_MAX = PROBE_IMAGES  # the batch bound the program is planned for (or the example batch, if larger)
AXIS_FACTOR = 4  # a declared dynamic axis is bounded at this many times its longest size in the golden set
METHOD = "forward"
PARTITIONER = "XnnpackPartitioner (fp32)"
LAYOUT_NAMES = {4: "channels_last", 5: "channels_last_3d"}  # the names torch gives the non-contiguous dim orders it has formats for

# Test-only: feed this dim order instead of the app's layout (tests/integration/test_executorch.py proves a layout
# mismatch is a failing row). None: the app's (the signature's), always, outside that test.
_FEED_DIM_ORDER: tuple[int, ...] | None = None
# Test-only: export from an example in this layout instead of the app's, as an export script that forgot the app's
# layout does (tests/integration/test_input_layout.py). None: the app's, always, outside that test.
_EXPORT_LAYOUT: str | None = None
# Test-only: the batch bound to export with instead of BATCH_MAX (a file that refuses a batch the tool runs).
_BATCH_MAX: int | None = None
# Test-only: the bound of every declared dynamic axis instead of AXIS_FACTOR x its longest golden size.
_AXIS_MAX: int | None = None

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


@dataclass(frozen=True)
class Bounds:
    """The upper bounds a program was exported with. ``batch`` is None when the batch is static at one sample
    (a recurrence's loop: :func:`bounded_inputs`); ``axes``: (input, axis, bound, why) per declared dynamic axis."""

    batch: int | None
    axes: tuple[tuple[str, int, int, str], ...] = ()
    recurrence: str = ""
    inputs: tuple[str, ...] = ()  # the input names in the program's order (positional, then keyword)
    layouts: tuple[str, ...] = ()  # the layout the app feeds each of them (the signature's)


def fed_orders(signature: Any, ndims: list[int]) -> list[tuple[int, ...]]:
    """The dim order fed to each input (of ``ndims`` dimensions): the app's layout, or the test-only knob's order."""
    if _FEED_DIM_ORDER is not None:
        return [_FEED_DIM_ORDER] * len(ndims)
    layouts = fed_layouts(signature)
    layouts = layouts if len(layouts) == len(ndims) else ["contiguous"] * len(ndims)
    try:
        return [dim_order(layout, ndim) for layout, ndim in zip(layouts, ndims, strict=True)]
    except ValueError as exc:
        raise ArtifactError(f"{exc}: fix layout in [tool.export-check.model-inputs]") from None


def axis_bound(ctx: BuildContext, name: str, axis: int, example_size: int) -> tuple[int, str]:
    """(bound, why) of a declared dynamic axis: ``AXIS_FACTOR`` times the longest size of that axis in the golden set."""
    if _AXIS_MAX is not None:
        return _AXIS_MAX, "the test-only bound"
    longest = dict(((n, a), size) for n, a, size in ctx.axis_extents).get((name, axis))
    where = "the longest in the golden set"
    if longest is None:
        longest, where = example_size, "the example's size"
    return AXIS_FACTOR * longest, f"{AXIS_FACTOR} x {longest}, {where}"


def bounded_inputs(ctx: BuildContext, model: Any, recurrence: str = "") -> tuple[Any, tuple[Any, ...], dict[str, Any], dict[str, Any], Bounds]:
    """``export_inputs`` with every dynamic axis bounded: (model, args, kwargs, dynamic_shapes, bounds). The batch axis is
    ``Dim("batch", min=1, max=BATCH_MAX)``; each declared dynamic axis ``Dim.AUTO(max=bound)`` (:func:`axis_bound`; torch
    may raise its minimum, which the details record). A model with an ``nn.LSTM`` and declared axes is exported with each
    LSTM as a ``scan`` loop (:mod:`._recurrent`) and its batch static at one sample: ExecuTorch 1.5's loop copies its
    carried state with ``aten::copy_``, which does not resize, so a loop runs only at its planned batch (the runner feeds
    such a program sample by sample). ``recurrence``: the model already holds its loops (executorch-int8 rewrites and
    quantizes before this), said as such in the details; exported with its batch static at one sample."""
    from torch.export import Dim

    declared = {i.name: [a for a, _ in i.dynamic_axes if a != i.batch_axis] for i in ctx.signature.inputs}
    if not recurrence and any(declared.values()) and recurrent_types(model):
        model, count = with_scan_lstm(model)
        recurrence = f"{RECURRENCE}; {count} layer{'s' if count > 1 else ''}, run by the portable kernels, batch static at 1"
    args, kwargs, shapes = export_inputs(ctx, model)
    positional = [i.name for i in ctx.signature.inputs if not i.keyword]
    batch_axis = {i.name: i.batch_axis for i in ctx.signature.inputs}
    by_name = {**dict(zip(positional, args, strict=True)), **kwargs}
    example_batch = max(int(t.shape[batch_axis[name]]) for name, t in by_name.items())
    bound = 1 if recurrence else _BATCH_MAX if _BATCH_MAX is not None else max(BATCH_MAX, example_batch)
    if example_batch > bound:  # one sample for a loop; otherwise only the test-only bound can be below the example
        args = tuple(a.narrow(batch_axis[n], 0, bound) for a, n in zip(args, positional, strict=True))
        kwargs = {k: v.narrow(batch_axis[k], 0, bound) for k, v in kwargs.items()}
        by_name = {**dict(zip(positional, args, strict=True)), **kwargs}
    batch = None if recurrence else Dim("batch", min=1, max=bound)
    axes: list[tuple[str, int, int, str]] = []
    params = list(shapes)  # forward's parameter names, positional inputs first (export_inputs' order)
    for param, name in zip(params, positional + list(kwargs), strict=True):
        spec: dict[int, Any] = {} if batch is None else {batch_axis[name]: batch}
        for axis in declared[name]:
            limit, why = axis_bound(ctx, name, axis, int(by_name[name].shape[axis]))
            if by_name[name].shape[axis] > limit:  # only the test-only bound can be below the example
                by_name[name] = by_name[name].narrow(axis, 0, limit)
            spec[axis] = Dim.AUTO(max=limit)
            axes.append((name, axis, limit, why))
        shapes[param] = spec
    names = (*positional, *kwargs)
    exported = [_EXPORT_LAYOUT] * len(names) if _EXPORT_LAYOUT is not None else fed_layouts(ctx.signature)
    if len(exported) == len(names):  # an example in the layout the app feeds: the file records that dim order
        try:
            by_name = {n: with_dim_order(by_name[n], dim_order(layout, by_name[n].dim())) for n, layout in zip(names, exported, strict=True)}
        except ValueError as exc:
            raise ArtifactError(f"{exc}: fix layout in [tool.export-check.model-inputs]") from None
    args = tuple(by_name[n] for n in positional)
    kwargs = {k: by_name[k] for k in kwargs}
    return model, args, kwargs, shapes, Bounds(batch=None if recurrence else bound, axes=tuple(axes), recurrence=recurrence,
                                                inputs=names, layouts=tuple(fed_layouts(ctx.signature)))


def export_bounded(ctx: BuildContext, model: Any, recurrence: str = "") -> tuple[Any, Bounds]:
    """``torch.export.export`` (strict=False) with every dynamic axis bounded: (program, bounds); ``recurrence``: as
    :func:`bounded_inputs`."""
    import torch

    model, args, kwargs, shapes, bounds = bounded_inputs(ctx, model, recurrence)
    try:
        program = torch.export.export(model, args, kwargs or None, dynamic_shapes=shapes, strict=False)
    except Exception as exc:
        raise ArtifactError(f"torch.export failed: {type(exc).__name__}: {' '.join(str(exc).split())[:600]}") from None
    axes = dynamic_axes_of(ctx)
    if bounds.batch is None:  # the batch is static at one sample: only the declared axes must stay symbolic
        batch_axis = {i.name: i.batch_axis for i in ctx.signature.inputs}
        axes = {name: [a for a in found if a != batch_axis[name]] for name, found in axes.items()}
    require_dynamic_program(program, ctx, axes)
    return program, bounds


def _axis_ranges(program: Any) -> dict[tuple[int, int], tuple[int, int]]:
    """(user input index, axis) -> (min, max) torch.export kept for that axis's symbol."""
    import torch

    ranges = {str(sym): (int(r.lower), int(r.upper)) for sym, r in program.range_constraints.items()}
    users = [spec.arg.name for spec in program.graph_signature.input_specs if spec.kind.name == "USER_INPUT"]
    values = {n.name: n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder"}
    found: dict[tuple[int, int], tuple[int, int]] = {}
    for index, name in enumerate(users):
        value = values.get(name)
        for axis, size in enumerate(() if value is None else value.shape):
            if isinstance(size, torch.SymInt) and str(size) in ranges:
                found[(index, axis)] = ranges[str(size)]
    return found


def lower_and_save(program: Any, path: Path, bounds: Bounds, extra: dict[str, str]) -> dict[str, str]:
    """XNNPACK lowering, ``to_executorch``, the ``.pte`` written atomically; the details read back from the file."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    ranges = _axis_ranges(program)
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
    details = {"dim_order": ", ".join(sorted(orders)), "input_dim_orders": "; ".join(",".join(map(str, o)) for o, _ in inputs)}
    if bounds.batch is None:
        details["batch_bound"] = f"static at 1 (fed sample by sample); planned in the .pte for {planned}"
    else:
        details["batch_bound"] = f"exported with Dim('batch', min=1, max={bounds.batch}); planned in the .pte for {planned}"
    if bounds.axes:
        index = {name: i for i, name in enumerate(bounds.inputs)}
        parts = []
        for name, axis, limit, why in bounds.axes:
            low, high = ranges.get((index[name], axis), (None, None))
            kept = f", kept as [{low}, {high}]" if low is not None else ""
            sizes = inputs[index[name]][1] if index[name] < len(inputs) else ()
            at = sizes[axis] if axis < len(sizes) else "?"
            parts.append(f"{name} axis {axis}: exported with Dim.AUTO(max={limit}) ({why}){kept}; planned in the .pte for {at}")
        details["axis_bounds"] = "; ".join(parts)
    if bounds.recurrence:
        details["recurrence"] = bounds.recurrence
    details.update(layout_details(path.name, bounds.inputs, bounds.layouts, [order for order, _ in inputs]))
    return {**details, "delegates": _delegates(path), **extra, "executorch": version()}


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    require_executorch()
    program, bounds = export_bounded(ctx, copy.deepcopy(ctx.model).eval())
    return lower_and_save(program, path, bounds, {"partitioner": PARTITIONER})


def exported_program(ctx: BuildContext) -> tuple[Any, Bounds]:
    """The program ``build`` lowers, with its bounds: what ``diagnostics.etdump`` rebuilds (with an
    ETRecord) to explain a ``.pte`` of this kind."""
    require_executorch()
    return export_bounded(ctx, copy.deepcopy(ctx.model).eval())


def warm_patterns() -> None:
    """Build the pattern graphs XNNPACK's lowering matches every model against (bilinear upsampling, SDPA: each
    exported with torch.export and cached by ``lru_cache`` on first use; 4-6 s) in this process: the build server
    calls it once (``builder.server._import``, which keeps what it prints off the terminal), and every build child
    forked after it inherits them."""
    require_executorch()
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa

    bilinear_2d.get_graphs_dict()
    sdpa.get_graphs()


def _pin_threads(threads: int) -> None:
    """XNNPACK's threadpool (process-wide; all cores by default) at the run's ``threads``, as every runtime is pinned."""
    from executorch.extension.pybindings import portable_lib

    reset = getattr(portable_lib, "_unsafe_reset_threadpool", None)
    count = getattr(portable_lib, "_threadpool_get_thread_count", None)
    if reset is not None and (count is None or count() != threads):
        reset(threads)


class PteRunner:
    """The ``.pte`` loaded by the ExecuTorch Python runtime, fed in the layout the app feeds (the signature's), never
    in the one read from the file: a file that records another computes what the app would get."""

    def __init__(self, path: Path, ctx: BuildContext) -> None:
        self.path, self.ctx = path, ctx
        self.method: Any = None
        self.orders: list[tuple[int, ...]] = []
        self.planned: list[tuple[int, ...]] = []  # each input's planned sizes: the bound of every dynamic axis

    def __enter__(self) -> PteRunner:
        require_executorch()
        noise: list[str] = []
        with runtime_stderr(noise):
            from executorch.runtime import Runtime

            found = program_inputs(self.path)
            self.orders, self.planned = [order for order, _ in found], [sizes for _, sizes in found]
            runtime = Runtime.get()
            _pin_threads(self.ctx.threads)
            program = runtime.load_program(self.path)
            method = program.load_method(METHOD)
        if method is None:
            raise ArtifactError(f"{self.path.name} has no method {METHOD!r}" + (f": {'; '.join(noise)}" if noise else ""))
        for line in noise:
            warnings.warn(f"executorch: {line}", NativeWarning, stacklevel=2)
        self.method = method
        return self

    def __exit__(self, *exc: object) -> None:
        self.method = None

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.method is not None, "runner used outside its with-block"
        signature = self.ctx.signature
        arrays = positional_inputs(feeds, signature)
        if len(arrays) != len(self.orders):
            raise ArtifactError(f"{self.path.name} takes {len(self.orders)} inputs; got {len(arrays)}")
        axes = self._batch_axes()
        count = int(arrays[0].shape[axes[0]]) if arrays[0].ndim > axes[0] else 1
        if count > 1 and self._one_sample(axes):  # a program planned for one sample (a recurrence's loop): fed sample by sample
            parts = [self._execute([np.take(a, [i], axis=axis) for a, axis in zip(arrays, axes, strict=True)]) for i in range(count)]
            outs = self._output_axes(len(parts[0]))
            return listed_outputs([np.concatenate([p[k] for p in parts], axis=outs[k]) for k in range(len(parts[0]))], signature)
        return listed_outputs(self._execute(arrays), signature)

    def _batch_axes(self) -> list[int]:
        specs = self.ctx.signature.inputs
        names = [i.batch_axis for i in specs if not i.keyword] + [i.batch_axis for i in specs if i.keyword]
        return names if len(names) == len(self.orders) else [0] * len(self.orders)

    def _output_axes(self, count: int) -> list[int]:
        axes = [o.batch_axis for o in self.ctx.signature.outputs]
        return axes if len(axes) == count else [0] * count

    def _one_sample(self, axes: list[int]) -> bool:
        return all(len(sizes) > axis and sizes[axis] == 1 for sizes, axis in zip(self.planned, axes, strict=True))

    def _beyond_bounds(self, arrays: list[np.ndarray]) -> list[str]:
        """What the feed holds beyond the sizes the program was planned for, each axis in words."""
        names = [i.name for i in self.ctx.signature.inputs if not i.keyword] + [i.name for i in self.ctx.signature.inputs if i.keyword]
        names = names if len(names) == len(arrays) else [f"input {k}" for k in range(len(arrays))]
        found = []
        for name, array, sizes, batch_axis in zip(names, arrays, self.planned, self._batch_axes(), strict=True):
            for axis, (size, bound) in enumerate(zip(array.shape, sizes, strict=False)):
                if size > bound:
                    what = f"batch {size}" if axis == batch_axis else f"{name} axis {axis} is {size},"
                    found.append(beyond_bound(what, bound, "the .pte"))
        return found

    def _execute(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        import torch

        assert self.method is not None
        orders = fed_orders(self.ctx.signature, [a.ndim for a in arrays])
        inputs = [with_dim_order(torch.from_numpy(np.ascontiguousarray(a)), order) for a, order in zip(arrays, orders, strict=True)]
        said: list[str] = []
        try:
            with runtime_stderr(said):
                outputs = self.method.execute(inputs)
        except Exception as exc:  # the runtime's own words (stderr) say why, its exception only the error code; then the bound passed
            text = " ".join(str(exc).split())[:300]
            beyond = "".join(f"; {line}" for line in self._beyond_bounds(arrays))
            raise ArtifactError(f"executorch: {'; '.join(said) + ' (' if said else ''}{text}{')' if said else ''}{beyond}") from None
        for line in said:
            warnings.warn(f"executorch: {line}", NativeWarning, stacklevel=2)
        return [np.ascontiguousarray(o.detach().numpy()) if hasattr(o, "detach") else np.asarray(o) for o in outputs]


def open_runner(path: Path, ctx: BuildContext) -> PteRunner:
    return PteRunner(path, ctx)
