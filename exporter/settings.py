"""Project settings from ``[tool.export-check]`` in pyproject.toml, or ``export-check.toml``.

Lookup, first found wins: ``--config PATH``; ``export-check.toml`` beside the checkpoint; the nearest
``pyproject.toml`` with a ``[tool.export-check]`` table, from the checkpoint's folder upwards, then
from the current directory upwards. Relative paths in a settings file are relative to that file.
Settings files come from the repo under test: they are parsed strictly and never executed.

>>> parse_settings({"arch": "m.py:Net", "batch-size": 8}, Path("/p"), "pyproject.toml")["batch_size"]
8
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import RunConfig
from .errors import UsageError
from .options import CHECK, SETTINGS, coerce, overlay, to_run_config
from .signature import SignatureSettings, parse_signature_settings

TABLE = "export-check"

# key in the file -> (python name, kind): a view of exporter/options.py's table, whose rows say
# which keys a settings file may hold and how each value is checked (options.coerce).
KEYS: dict[str, tuple[str, str]] = {o.name: (o.python, o.kind) for o in SETTINGS.values()}


def parse_settings(table: Any, base: Path, source: str) -> dict[str, Any]:
    """Validate one ``[tool.export-check]`` table; every problem names ``source`` and the key."""
    if not isinstance(table, dict):
        raise UsageError(f"{source}: [tool.{TABLE}] must be a table")
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key not in SETTINGS:
            raise UsageError(f"{source}: unknown key {key!r} in [tool.{TABLE}]; known keys: {', '.join(SETTINGS)}")
        option = SETTINGS[key]
        out[option.python] = coerce(value, option.kind, base, f"{source}: {key}")
        if option.check is not None:
            option.check(out[option.python], source)
    if "arch" in out:
        out["arch"], out["arch_root"] = anchor_arch(out["arch"], base)
    return out


def anchor_arch(spec: str, base: Path) -> tuple[str, Path]:
    """Make a file-path architecture spec absolute against ``base``; module specs import from ``base``."""
    module_part, sep, attr = spec.rpartition(":")
    if sep and (module_part.endswith(".py") or "/" in module_part) and not Path(os.path.expanduser(module_part)).is_absolute():
        spec = f"{base / module_part}:{attr}"
    return spec, base


def _read_toml(path: Path) -> dict[str, Any]:
    from .parsing import load_toml

    ours = ("tool", TABLE) if path.name == "pyproject.toml" else ()  # other tools' tables are theirs to judge
    return load_toml(path, "settings file", "fix the file", ours=ours)  # bounded: size, nesting, numbers, UTF-8, a FIFO refused


def _from_file(path: Path) -> dict[str, Any] | None:
    data = _read_toml(path)
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get(TABLE) if isinstance(data.get("tool"), dict) else None
        if table is None:
            return None
    else:
        table = data
    settings = parse_settings(table, path.parent, str(path))
    settings["_source"] = str(path)
    return settings


def find_settings(checkpoint: Path | None, explicit: Path | None = None) -> dict[str, Any]:
    """The settings that apply to ``checkpoint``, or ``{}`` when no file has any."""
    if explicit is not None:
        if not explicit.exists():  # a FIFO or a device exists: reading it refuses it, without waiting
            raise UsageError(f"{explicit}: settings file not found; fix --config")
        found = _from_file(explicit)
        if found is None:
            raise UsageError(f"{explicit}: has no [tool.{TABLE}] table; add one or drop --config")
        return found
    starts: list[Path] = []
    if checkpoint is not None:
        beside = checkpoint.parent / f"{TABLE}.toml"
        if beside.is_file():
            return _from_file(beside) or {}
        starts.append(checkpoint.resolve().parent)
    starts.append(Path.cwd().resolve())
    for start in starts:
        for folder in (start, *start.parents):
            candidate = folder / "pyproject.toml"
            if candidate.is_file():
                found = _from_file(candidate)
                if found is not None:
                    return found
    return {}


# --- the settings read, overlaid on the explicit values (exporter/options.py's table) ---------------


def load_settings(checkpoint: Path, config: Path | None) -> dict[str, Any]:
    """The settings that apply to ``checkpoint`` (``--config`` first), once the checkpoint is known to be there."""
    from .files import check_readable_file

    # The checkpoint is the one thing every command needs: say first when it is not there.
    check_readable_file(checkpoint, "checkpoint", "pass the path of a .pth/.pt/.safetensors state_dict")
    return find_settings(checkpoint, config)


def signature_settings(settings: Mapping[str, Any]) -> SignatureSettings:
    """The ``model-inputs`` and ``outputs`` tables of the settings read (validated when they were read)."""
    return parse_signature_settings(settings.get("model_inputs"), settings.get("outputs"), str(settings.get("_source", "settings")))


def check_config(explicit: Mapping[str, Any], default_out: Callable[[], Path] | None = None) -> tuple[RunConfig, dict[str, Any]]:
    """``check``'s RunConfig from explicit values (``checkpoint`` among them), and the settings it read.
    ``default_out`` makes the out folder when neither the explicit values nor the settings name one."""
    settings = load_settings(explicit["checkpoint"], explicit.get("config"))
    values = overlay(CHECK, explicit, settings, None if default_out is None else {"out": default_out})
    values["signature_settings"] = signature_settings(settings)
    return to_run_config(values), settings


@dataclass(frozen=True)
class GoldenParams:
    """What ``golden record`` and ``golden approve`` need beyond their own switches."""

    common: dict[str, Any]  # the keyword arguments golden.lifecycle.record_golden and approve_golden share
    inputs: Path | None  # record's inputs folder, if given or set
    settings: dict[str, Any]  # as read (record takes its [tool.export-check.preprocess] from here)
    signature: SignatureSettings = SignatureSettings()  # [tool.export-check.model-inputs.*] and [...outputs.*]: record and approve take it


def golden_params(command: str, explicit: Mapping[str, Any]) -> GoldenParams:
    settings = load_settings(explicit["checkpoint"], explicit.get("config"))
    values = overlay(command, explicit, settings)
    if not values["arch"]:
        raise UsageError("no architecture given: pass --arch module:Factory or path/to/file.py:Factory, or set arch in [tool.export-check]")
    common = dict(
        checkpoint=values["checkpoint"], arch=values["arch"], arch_kwargs=values["arch_kwargs"], arch_root=values["arch_root"],
        golden_dir=values["golden"], threads=values["threads"], batch_size=values["batch_size"],
    )
    return GoldenParams(common=common, inputs=values.get("inputs"), settings=settings, signature=signature_settings(settings))
