"""The cache's key: everything an artifact or its observation depends on, hashed.

The checkpoint's and the golden manifest's sha256, the architecture spec, its kwargs and its
source file's sha256, the export and inference settings, the base library versions, export-check's
version and the sha256 of its own source. Each kind's entry is keyed on the versions of the packages
its row declares as well (``ArtifactKind.packages``; ``store.ArtifactCache.entry_key``). Thresholds are not in it: they judge, they do not change
what is observed.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

from .. import __version__
from ..files import sha256_file
from ..versions import kernel_choices, library_versions

# 6: the diagnostics' plan is decided by the model's parameters and the set's counts (no clock), every size on the
# whole probe, and the key holds that rule (``plan_rule``); 5: ONNX per-layer tables name the graph's nodes of each
# module; 4: observations hold facts, not sentences, and every
# stream measured (then compare.STREAMS, now gates.STREAMS); 3: meta.json sealed
# with an HMAC; 2: unsealed observations; 1: judged rows
FORMAT = 6


def arch_source_sha256(spec: str, root: Path | None = None) -> str:
    """The sha256 of the file that defines the architecture, found without importing it.

    ``path/to/file.py:Factory`` hashes that file; ``package.module:Factory`` hashes the module's
    source as the import system would find it (from the current directory and ``root`` first).
    Files the architecture imports in turn are not hashed: see docs/explanation/performance.md.
    """
    module_part = spec.rpartition(":")[0]
    if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
        path = Path(os.path.expanduser(module_part)).resolve()
        return sha256_file(path) if path.is_file() else "missing"
    # Found by hand: importlib.util.find_spec("pkg.mod") would import pkg (and torch with it), and a
    # cache hit must not cost a torch import.
    parts = module_part.split(".")
    for folder in (Path.cwd(), root, *sys.path):
        if folder is None or not str(folder):
            continue
        base = Path(folder).joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return sha256_file(candidate)
    return "unresolved"


def tool_source_sha256() -> str:
    """One sha256 over export-check's own source files: an edited builder (a development install)
    must not be served artifacts its previous version built."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def local_module_sources() -> dict[str, str]:
    """sha256 of every imported module file that is neither installed nor part of export-check: the
    architecture file and whatever local code it imported. Stored with each entry and checked on
    lookup, so an edited helper module the architecture imports is a miss, not a stale hit."""
    installed = {Path(p).resolve() for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}}
    own = Path(__file__).resolve().parents[1]
    found: dict[str, str] = {}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file or not file.endswith(".py"):
            continue
        path = Path(file).resolve()
        if own in path.parents or any(root in path.parents for root in installed) or "site-packages" in path.parts:
            continue
        if path.is_file():
            found[str(path)] = sha256_file(path)
    return dict(sorted(found.items()))


def plan_rule() -> dict[str, Any]:
    """What decides the diagnostics' plan (``diagnostics.shapes.plan_for``) besides inputs the key already holds: it reads
    the model's parameter count (of the keyed checkpoint and architecture), the golden set's size (of the keyed
    manifest), the batch size and ``--diagnostics-budget`` (the keyed settings), and these constants; never a clock. So
    one key is one plan: an entry measured under a plan the budget cut is never served to a check that plans more."""
    from ..config import LATENCY_REPEATS, SMALL_MODEL_PARAMETERS

    return {"reads": ["parameters", "golden_size", "batch_size", "diagnostics_budget"], "small_model_parameters": SMALL_MODEL_PARAMETERS,
            "latency_repeats": LATENCY_REPEATS}


def run_key_inputs(
    *,
    checkpoint_sha256: str,
    golden_manifest_sha256: str,
    arch: str,
    arch_kwargs: dict[str, Any],
    arch_root: Path | None,
    export_settings: dict[str, Any],
    inference_settings: dict[str, Any],
) -> dict[str, Any]:
    """Everything an artifact or its metrics depend on, as one JSON-able dict."""
    return {
        "cache_format": FORMAT,
        "export_check": __version__,
        "export_check_source_sha256": tool_source_sha256(),
        "checkpoint_sha256": checkpoint_sha256,
        "golden_manifest_sha256": golden_manifest_sha256,
        "arch": arch,
        "arch_kwargs": arch_kwargs,
        "arch_source_sha256": arch_source_sha256(arch, arch_root),
        "export": export_settings,
        "inference": inference_settings,
        "plan": plan_rule(),
        "versions": library_versions(()),  # the base packages; each kind's own are in its entry's key (store.entry_key)
        # int8, fp16 and bf16 kernels differ by CPU (VNNI, avx512_bf16) and by an instruction-set cap:
        # a cache shared between machines serves only results measured on this kind of CPU
        "kernels": kernel_choices(),
    }
