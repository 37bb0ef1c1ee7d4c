"""Per-layer errors as node data for Google's Model Explorer, so a failing ONNX file's graph can be coloured by error.

For every row whose per-layer table (the divergence finder of a failing float row, or an int8 row's
SQNR table; ``measurements.LayerComparison``) was measured on an ONNX file, ``<out>/<row>.node-data.json``
holds one value per graph node: the error of the innermost module of the table that holds the node
(``LayerComparison.nodes``). Open it beside the file with the ONNX adapter::

    pip install ai-edge-model-explorer model-explorer-onnx
    model-explorer export-check-out/onnx.onnx --extensions=model_explorer_onnx \\
        --node_data_paths=export-check-out/onnx.node-data.json

The format is Model Explorer's "custom node data" (``model_explorer.node_data_builder``: ``ModelNodeData``
written by ``to_json_string``): ``{graph id: {"name", "results": {node id: {"value": v}}, "gradient": [...]}}``,
where the ONNX adapter's graph id is the graph's name and a node's id its name. It is written here with
``json`` rather than with that package, which would be a dependency (with a web server) for five lines of JSON;
the tests hold the keys to the node names of the file. A divergence table gives each node the MAE of its
module's output against eager (yellow to red); an int8 table the SQNR in dB (red, the worst, to green).
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..nofollow import Refused, write_inside
from ..records import LayerComparison
from ..results import Row

SUFFIX = ".node-data.json"
EXTENSION = "model_explorer_onnx"
MAE_GRADIENT = ({"stop": 0, "bgColor": "#fff8c5"}, {"stop": 1, "bgColor": "#cf222e"})
SQNR_GRADIENT = ({"stop": 0, "bgColor": "#cf222e"}, {"stop": 1, "bgColor": "#dafbe1"})


def node_data(name: str, table: LayerComparison) -> dict[str, Any] | None:
    """The Model Explorer node data of a row's per-layer table, or None when the table names no nodes."""
    if table.error or not table.nodes or not table.graph:
        return None
    by_module = {d.module: d for d in table.layers}
    divergence = table.purpose == "divergence"
    results = {}
    for node, module in table.nodes:
        delta = by_module.get(module)
        if delta is None:
            continue
        value = delta.mae if divergence else delta.sqnr_db
        if math.isfinite(value):  # an identical layer (SQNR inf) or a non-finite one stays uncoloured: JSON has no inf
            results[node] = {"value": value}
    if not results:
        return None
    what = "MAE against eager of the module holding the node" if divergence else "SQNR (dB) of the module holding the node"
    return {table.graph: {"name": f"export-check {name}: {what}", "results": results,
                          "gradient": list(MAE_GRADIENT if divergence else SQNR_GRADIENT)}}


def path_for(out_dir: Path, row: str) -> Path:
    return out_dir / f"{row}{SUFFIX}"


def command(artifact: str, data: str) -> str:
    """The command that opens ``artifact`` coloured by ``data`` in Model Explorer."""
    return f"model-explorer {artifact} --extensions={EXTENSION} --node_data_paths={data}"


def write_all(rows: tuple[Row, ...], out_dir: Path) -> tuple[tuple[Row, ...], tuple[tuple[str, str], ...]]:
    """Write the node data of every row with a per-layer table of an ONNX file, following no link in ``out_dir``
    (``nofollow.write_inside``); the rows (one whose file could not be written says why in a note, its verdict
    as it was) and (row, path) of each written."""
    written, kept = [], []
    for row in rows:
        kept.append(row)
        table = row.diagnostics.layers if row.diagnostics is not None else None
        path = path_for(out_dir, row.name)
        data = None if table is None or row.artifact is None or not row.artifact.path.endswith(".onnx") else node_data(row.name, table)
        if data is None:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):  # a link there is removed, never followed
                path.unlink()  # an earlier run's, for a table this run does not have: it would mislead
            continue
        try:
            write_inside(out_dir, path.name, (json.dumps(data, indent=1) + "\n").encode())
        except (Refused, OSError) as exc:  # advice, like the table it colours: never the run's end
            why = str(exc) if isinstance(exc, Refused) else f"{path}: {exc.strerror or exc}"
            kept[-1] = replace(row, notes=(*row.notes, f"Model Explorer node data not written: {why}"))
            continue
        written.append((row.name, str(path)))
    return tuple(kept), tuple(written)
