"""``torch.export`` shared by the kinds built on it (torch-export, aoti, torchao-int8-dynamic, onnx-dynamo):
the exported program with the batch axis and every declared dynamic axis dynamic, and its checks.

The trap: an axis of size 1 in the example is specialised to 1 ("0/1 specialization"), so a program
exported from one sample accepts one sample only. The example is therefore widened to at least two
along every dynamic axis (repeating its first slice, which changes no weight), and the program's
input shapes are checked to be symbolic on those axes afterwards.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..errors import ArtifactError
from .base import BuildContext, NotApplicable


def _widened(tensor: Any, axes: list[int]) -> Any:
    import torch

    for axis in axes:
        if tensor.shape[axis] < 2:
            tensor = torch.cat([tensor, tensor.narrow(axis, 0, 1)], dim=axis)
    return tensor


def dynamic_axes_of(ctx: BuildContext) -> dict[str, list[int]]:
    """Per input name, the axes that must stay dynamic: its batch axis and its declared dynamic axes."""
    return {i.name: sorted({i.batch_axis, *(a for a, _ in i.dynamic_axes)}) for i in ctx.signature.inputs}


def export_inputs(ctx: BuildContext, model: Any = None) -> tuple[tuple[Any, ...], dict[str, Any], dict[str, Any]]:
    """(args, kwargs, dynamic_shapes by forward's parameter name) for ``torch.export.export``; every
    dynamic axis of the example at least 2 long."""
    from torch.export import Dim

    model = ctx.model if model is None else model
    args, kwargs = ctx.example_args()
    axes = dynamic_axes_of(ctx)
    positional = [i.name for i in ctx.signature.inputs if not i.keyword]
    args = tuple(_widened(a, axes[name]) for a, name in zip(args, positional, strict=True))
    kwargs = {k: _widened(v, axes[k]) for k, v in kwargs.items()}
    params = [p for p in inspect.signature(model.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if len(params) < len(args):
        raise ArtifactError(f"forward takes {len(params)} named parameters, the golden set feeds {len(args)} positional inputs")
    shapes: dict[str, Any] = {}
    for param, name in zip(params, positional, strict=False):
        shapes[param.name] = {axis: Dim.DYNAMIC for axis in axes[name]}
    for name in kwargs:
        shapes[name] = {axis: Dim.DYNAMIC for axis in axes[name]}
    return args, kwargs, shapes


def warm_export() -> None:
    """torch.export's first call in a process imports and sets up most of its machinery (3 s on this project's 2-core
    machine; 0.1 s for the next call): the build server calls this once, on a small model with a bounded dynamic
    batch, decomposed, before the first child of a kind built on torch.export (``ArtifactKind.preload``), so that
    every such child starts warm (``builder.ahead.import_ahead`` runs it, keeping what it prints off the terminal)."""
    import torch

    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8, 2)).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(model, (torch.zeros(2, 1, 4, 4),), dynamic_shapes=({0: batch},), strict=False)
    program.run_decompositions()


def export_program(ctx: BuildContext, model: Any = None, check_guards: bool = True) -> Any:
    """``torch.export.export`` of the model (strict=False, as torch recommends) with dynamic batch and declared axes.

    ``check_guards``: the program's ``.module()`` must also take the example doubled along every dynamic
    axis (what ``torch.export.load(...).module()`` enforces); an AOTInductor package, which compiles the
    graph and does not enforce those guards, skips it."""
    import torch

    model = ctx.model if model is None else model
    args, kwargs, shapes = export_inputs(ctx, model)
    try:
        program = torch.export.export(model, args, kwargs or None, dynamic_shapes=shapes, strict=False)
    except Exception as exc:  # torch.export's own message says which axis or op; keep its first lines
        text = " ".join(str(exc).split())[:600]
        raise ArtifactError(f"torch.export failed: {type(exc).__name__}: {text}") from None
    require_dynamic_program(program, ctx)
    if check_guards:
        require_guards_hold(program, model, args, kwargs, dynamic_axes_of(ctx), [i.name for i in ctx.signature.inputs if not i.keyword])
    return program


def require_guards_hold(program: Any, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], axes: dict[str, list[int]],
                        positional: list[str]) -> None:
    """Run the program on the example doubled along every dynamic axis, where eager runs: an axis can be
    symbolic and still be pinned by a guard (``nn.LSTM`` pins its time steps: ``image.size()[3] // 4 == 12``),
    and then ``.module()`` refuses every other size."""
    import torch

    def doubled(tensor: Any, name: str) -> Any:
        for axis in axes[name]:
            tensor = torch.cat([tensor, tensor], dim=axis)
        return tensor

    wide_args = tuple(doubled(a, n) for a, n in zip(args, positional, strict=True))
    wide_kwargs = {k: doubled(v, k) for k, v in kwargs.items()}
    with torch.inference_mode():
        try:
            model(*wide_args, **wide_kwargs)
        except Exception:
            return  # the model itself refuses the doubled sizes: nothing to learn here
        try:
            program.module()(*wide_args, **wide_kwargs)
        except Exception as exc:
            sizes = ", ".join(f"{n} {tuple(t.shape)}" for n, t in (*zip(positional, wide_args, strict=True), *wide_kwargs.items()))
            text = " ".join(str(exc).split())[:300]
            refused = f"the exported program refuses inputs of other sizes that eager takes ({sizes}): {type(exc).__name__}: {text}"
            recurrent = _recurrent_layers(model)
            if recurrent:  # the known upstream limitation: the kind cannot represent this model, said as such
                raise NotApplicable(f"not applicable: torch.export cannot keep this model's dynamic axes free: {refused} ({recurrent}: "
                                    "torch.export's recurrent-layer decomposition fixes the number of time steps, pytorch/pytorch#115092); "
                                    "onnx-dynamo and aoti run this model at every size") from None
            # any other cause stays an error: a .pt2 that refuses sizes its model takes must not pass quietly
            raise ArtifactError(f"torch.export kept the dynamic axes symbolic, but {refused}; check the model for code that "
                                "turns that axis's size into a constant") from None


def _recurrent_layers(model: Any) -> str:
    """The recurrent layer types in the model ("LSTM", "GRU/LSTM"), or "" when there are none."""
    import torch

    return "/".join(sorted({type(m).__name__ for m in model.modules() if isinstance(m, (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN))}))


def require_dynamic_program(program: Any, ctx: BuildContext, axes: dict[str, list[int]] | None = None) -> None:
    """Raise when an input's batch axis or declared dynamic axis (or each of ``axes``, by input name) is a fixed
    number in the exported program."""
    import torch

    user_inputs = [spec for spec in program.graph_signature.input_specs if spec.kind.name == "USER_INPUT"]
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    axes = dynamic_axes_of(ctx) if axes is None else axes
    names = [i.name for i in ctx.signature.inputs if not i.keyword] + [i.name for i in ctx.signature.inputs if i.keyword]
    for name, spec in zip(names, user_inputs, strict=False):
        node = placeholders.get(getattr(spec.arg, "name", ""))
        value = None if node is None else node.meta.get("val")
        if value is None:
            continue
        for axis in axes[name]:
            if not isinstance(value.shape[axis], torch.SymInt):
                where = "input" if len(names) == 1 else f"input {name!r}"
                raise ArtifactError(f"torch.export fixed the {where} axis {axis} to {value.shape[axis]}; the program only accepts that size")
