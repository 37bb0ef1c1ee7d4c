"""The per-layer method of ``torch.export`` programs (``.pt2``): *cumulative*. Every node's value in one
run of the loaded program's graph, nodes mapped to modules by their ``nn_module_stack`` (or the node -> module
map the file carries); the first departing module is saved alone beside the file when the program unflattens.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...artifacts import ArtifactKind, BuildContext
from ...artifacts.pt2e_int8_static import SCOPES_FILE
from ...records import LayerComparison
from ._common import DIVERGENCE, capture_eager, cumulative, finish, numpy_of, save_module_case


def compare(kind: ArtifactKind, path: Path, model: Any, batch: np.ndarray, threshold: float, purpose: str, threads: int,
            start: int, ctx: BuildContext | None = None) -> LayerComparison:
    """The method's entry (``layers.compare_layers``): the program's graph run node by node."""
    return program_layers(path, model, batch, threshold, purpose, start=start)


def program_layers(path: Path, model: Any, batch: np.ndarray, threshold: float, purpose: str, start: int = 0) -> LayerComparison:
    """Cumulative comparison for a ``.pt2`` (torch.export) file: every node's value in one run of the
    loaded program's graph, nodes mapped to modules by their ``nn_module_stack`` (or, for a file whose
    graph lost it, the node -> module map it carries: pt2e-int8-static)."""
    import json

    import torch

    with contextlib.suppress(ImportError):
        import torchao  # noqa: F401  (a quantized program's ops are registered by torchao)
    extra = {SCOPES_FILE: ""}
    loaded = torch.export.load(str(path), extra_files=extra)
    carried: dict[str, str] = json.loads(extra[SCOPES_FILE]) if extra[SCOPES_FILE] else {}
    module = loaded.module()
    values: list[tuple[str, str, str]] = []
    for node in module.graph.nodes:
        if node.op != "call_function":
            continue
        stack = node.meta.get("nn_module_stack") or {}
        scope = carried.get(node.name, str(list(stack.values())[-1][0]) if stack else None)
        if scope is not None:
            values.append((node.name, scope, getattr(node.target, "__name__", str(node.target)).split(".")[0]))
    # the model's own outputs, in order (the output node's arguments), each compared with eager's (a second head too)
    leaves = torch.utils._pytree.tree_leaves(next(n for n in module.graph.nodes if n.op == "output").args[0])
    graph_outputs = [n.name for n in leaves] if all(isinstance(n, torch.fx.Node) for n in leaves) else []
    wanted = {name for name, _, _ in values} | set(graph_outputs)
    results: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            out = super().run_node(n)
            if n.name in wanted and isinstance(out, torch.Tensor) and out.dtype == torch.float32:
                results[n.name] = out.detach().numpy().copy()
            return out

    with torch.inference_mode():
        Recorder(module).run(torch.from_numpy(batch))
    layers = cumulative(values, results, model, batch, threshold, purpose, graph_outputs=graph_outputs)
    method = "program"  # messages.LAYER_METHODS words it
    found = finish(purpose, method, "cumulative", start, len(batch), threshold, layers)
    if purpose == DIVERGENCE and found.first is not None and found.first.module:
        found = replace(found, repro=_program_module_case(path, loaded, model, batch, found.first.module))
    return found


def _program_module_case(path: Path, program: Any, model: Any, batch: np.ndarray, module: str) -> str | None:
    """The first departing module of a ``.pt2``, alone: eager's inputs to it and its output saved beside the file, when
    ``torch.export.unflatten`` gives that module as one callable that runs on them (else None: the where: line stands)."""
    import torch

    cap = next((c for c in capture_eager(model, batch).order if c.name == module), None)
    if cap is None or cap.inputs is None or cap.output is None:
        return None
    try:
        with warnings.catch_warnings():  # torch's own deprecations inside unflatten (LeafSpec), not the user's export
            warnings.simplefilter("ignore")
            alone = dict(torch.export.unflatten(program).named_modules())[module]
        with torch.inference_mode():
            got = numpy_of(alone(*(t.clone() for t in cap.inputs)))
    except Exception:  # a module the program inlined or split: no callable of its own
        return None
    if got is None or got.shape != tuple(cap.output.shape):
        return None
    return save_module_case(path, cap, cap.output.numpy())
