"""The runtimes: one all-keyword row each, holding every fact about what loads and runs a kind's file.

A kind names its runtime (``ArtifactKind.runtime``); everything the tool needs to know of that runtime is its row
here: the modules a replay looks for before it reloads a file (exporter/replay.py), the loaders the build server
imports ahead (builder/server.py), whether a deployed process runs it without torch (its files are then replayed in a
fresh interpreter holding that runtime and numpy alone: builder/clean.py), the systems it predicts on, and the extra
(or tox environment) that installs it. The contract test reads "not here" from the rows. Adding a runtime is one row.

>>> RUNTIMES_BY_NAME["onnxruntime"].alone, RUNTIMES_BY_NAME["coreml"].systems
(True, ('Darwin',))
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Runtime:
    name: str
    modules: tuple[str, ...]  # what a replay on another machine needs to load and run a file
    # what its loader imports beyond ``modules`` that is heavy enough to import once, ahead, in the build server before
    # it forks its load host (torch.export's deserializer pulls in torch._dynamo and sympy: 2-4 s on a loaded machine)
    loaders: tuple[str, ...] = ()
    alone: bool = False  # a deployed process runs it without torch: replayed where only it and numpy are imported
    systems: tuple[str, ...] = ()  # the systems (platform.system()) it predicts on; empty: every one
    installs: str  # the extra of pyproject.toml (or the tox environment) that installs it; "core": the base install


RUNTIMES: tuple[Runtime, ...] = (
    Runtime(name="torch", modules=("torch",), installs="core"),
    Runtime(name="torch.export", modules=("torch",), loaders=("torch._export.serde.serialize",), installs="core"),
    Runtime(name="aoti", modules=("torch",), installs="core"),
    Runtime(name="onnxruntime", modules=("onnxruntime",), alone=True, installs="core"),
    Runtime(name="openvino", modules=("openvino",), alone=True, installs="openvino"),
    # the Python runtime imports the whole of exir (executorch 1.5: 5-7 s): once in the load host, not in each load child
    Runtime(name="executorch", modules=("executorch", "torch"), loaders=("executorch.runtime",), installs="executorch"),
    # coremltools imports torch itself (and 9-11 s of scikit-learn, torchao and exir): not alone; predicts on macOS only
    Runtime(name="coreml", modules=("coremltools",), loaders=("coremltools",), systems=("Darwin",), installs="coreml"),
    Runtime(name="litert", modules=("ai_edge_litert",), alone=True, installs="tox -e litert"),
)
RUNTIMES_BY_NAME = {runtime.name: runtime for runtime in RUNTIMES}

# The views the tool's modules read, each off the rows
RUNTIME_MODULES: dict[str, tuple[str, ...]] = {r.name: r.modules for r in RUNTIMES}
RUNTIME_LOADERS: dict[str, tuple[str, ...]] = {r.name: r.loaders for r in RUNTIMES if r.loaders}
RUNTIME_ALONE: frozenset[str] = frozenset(r.name for r in RUNTIMES if r.alone)
RUNTIME_SYSTEMS: dict[str, tuple[str, ...]] = {r.name: r.systems for r in RUNTIMES if r.systems}
