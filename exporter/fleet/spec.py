"""Which models a fleet run checks: checkpoints given on the command line, or a fleet file, and the shard.

A fleet file is TOML: optional ``[defaults]`` (settings every model takes) and one ``[models.NAME]``
table per model, holding its ``checkpoint`` and any ``check`` setting of ``[tool.export-check]``
(``arch``, ``arch-kwargs``, ``golden``, ``artifacts``, gates, ...), plus ``config`` (that model's own
settings file), ``num-cpus`` and ``resources`` (what a Ray task of it needs). Paths are relative to
the fleet file. Each model's settings: command line > its table > ``[defaults]`` > its settings file.

>>> shard_index("resnet-digits", 4) in range(4)
True
>>> parse_shard("2/4")
(2, 4)
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..files import sha256_file

# keys of a model's table that are not settings of [tool.export-check]
OWN_KEYS = ("checkpoint", "config", "num-cpus", "resources")
_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class FleetModel:
    """One model of a fleet: its name (the fleet table's key, or the checkpoint as given), checkpoint,
    its own explicit check values (python names, from the fleet file) and what a cluster task needs."""

    name: str
    checkpoint: Path
    explicit: Mapping[str, Any] = field(default_factory=dict)
    arch_root: Path | None = None  # the fleet file's folder when the fleet file names the arch
    num_cpus: float = 1.0
    resources: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Fleet:
    models: tuple[FleetModel, ...]
    source: str | None = None  # the fleet file, None for checkpoints on the command line
    sha256: str | None = None  # of the fleet file: merge refuses reports of different fleets

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.models)


def from_checkpoints(paths: Sequence[Path]) -> Fleet:
    """``export-check a.pth b.pth``: one model per checkpoint, named as given."""
    seen: dict[str, Path] = {}
    for path in paths:
        if "\x00" in str(path):
            raise UsageError(f"{str(path)!r}: a checkpoint path cannot hold a NUL character; pass the path of a .pth/.pt/.safetensors file")
        key = str(Path(os.path.expanduser(path)).resolve())
        if key in seen:
            raise UsageError(f"{path}: given twice; list each checkpoint once")
        seen[key] = path
    names = "\n".join(str(p) for p in paths)
    # the fleet's identity for merge: the checkpoints as given (the shards of one CI matrix give the same)
    return Fleet(models=tuple(FleetModel(name=str(p), checkpoint=p) for p in paths), sha256=hashlib.sha256(names.encode()).hexdigest())


def parse_shard(text: str) -> tuple[int, int]:
    """``--shard I/N``: shard ``I`` (1-based) of ``N``."""
    match = _SHARD.fullmatch(text)
    if match is None or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise UsageError(f"--shard must be I/N with 1 <= I <= N (e.g. 2/4 for the second of four CI jobs), got {text!r}")
    return int(match.group(1)), int(match.group(2))


def shard_index(name: str, count: int) -> int:
    """The 0-based shard of a model: its name's sha256 modulo ``count``. Stable across machines, runs
    and fleet order (Python's ``hash`` is salted per process, so it is not used), and adding a model
    to the fleet moves no other model."""
    return int(hashlib.sha256(name.encode("utf-8")).hexdigest(), 16) % count


def select_shard(fleet: Fleet, shard: tuple[int, int] | None) -> tuple[FleetModel, ...]:
    if shard is None:
        return fleet.models
    index, count = shard
    return tuple(m for m in fleet.models if shard_index(m.name, count) == index - 1)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise UsageError(f"{where} must be a finite number >= 0, got {value!r}")
    return float(value)


def _model(name: str, table: Any, defaults: Mapping[str, Any], base: Path, source: str) -> FleetModel:
    from ..settings import check_arch_inside, parse_settings, project_root

    where = f"{source}: models.{name}"
    if not isinstance(table, dict):
        raise UsageError(f"{where} must be a table ([models.{name}] with checkpoint = \"...\")")
    merged = {**defaults, **table}
    own = {k: merged.pop(k) for k in OWN_KEYS if k in merged}
    if "checkpoint" not in own:
        raise UsageError(f"{where}: no checkpoint; add checkpoint = \"path/to/model.pth\"")
    explicit = parse_settings(merged, base, where)  # the keys of [tool.export-check], checked the same way
    explicit.pop("_source", None)
    if "arch" in explicit:  # code the fleet file names: inside its project or the run's, as a settings file's
        check_arch_inside({"arch": explicit["arch"], "_project": project_root(base), "_source": where}, {})
    arch_root = explicit.pop("arch_root", None)
    for key in ("inputs", "preprocess", "model_inputs", "outputs"):
        if key in explicit:
            raise UsageError(f"{where}: {key.replace('_', '-')} belongs in the model's settings file; name it with config = \"...\"")
    paths = {}
    for key in ("checkpoint", "config"):
        if key in own:
            value = own[key]
            if not isinstance(value, str) or not value.strip() or "\x00" in value:
                raise UsageError(f"{where}: {key} must be a non-empty string (a path), got {value!r}")
            path = Path(os.path.expanduser(value))
            paths[key] = path if path.is_absolute() else base / path
    if "config" in paths:
        explicit["config"] = paths["config"]
    resources = own.get("resources", {})
    if not isinstance(resources, dict):
        raise UsageError(f"{where}: resources must be a table of custom resource amounts, e.g. {{ avx512 = 1 }}, got {resources!r}")
    return FleetModel(
        name=name,
        checkpoint=paths["checkpoint"],
        explicit=explicit,
        arch_root=arch_root,
        num_cpus=_number(own.get("num-cpus", 1), f"{where}: num-cpus"),
        resources=tuple(sorted((str(k), _number(v, f"{where}: resources.{k}")) for k, v in resources.items())),
    )


def parse_fleet(path: Path) -> Fleet:
    """Read and check a fleet file; every problem is one line naming the file, the model and the key."""
    from ..parsing import load_toml

    if "\x00" in str(path):
        raise UsageError(f"{str(path)!r}: cannot read the fleet file (a file name holds no NUL byte); fix --fleet")
    data = load_toml(path, "fleet file", "fix --fleet or the fleet file")  # bounded: size, nesting, numbers, UTF-8, a FIFO refused
    source, base = str(path), path.resolve().parent
    unknown = [k for k in data if k not in ("defaults", "models")]
    if unknown:
        raise UsageError(f"{source}: unknown table {unknown[0]!r}; a fleet file holds [defaults] and [models.NAME] tables")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise UsageError(f"{source}: defaults must be a table")
    if "checkpoint" in defaults:
        raise UsageError(f"{source}: defaults.checkpoint: each model names its own checkpoint")
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise UsageError(f"{source}: no models; add a [models.NAME] table with checkpoint = \"...\" for each model")
    fleet = tuple(_model(str(name), table, defaults, base, source) for name, table in models.items())
    return Fleet(models=fleet, source=source, sha256=sha256_file(path))
