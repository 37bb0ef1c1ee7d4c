"""Project settings from ``[tool.export-check]`` in pyproject.toml, or ``export-check.toml``.

Lookup, first found wins: ``--config PATH``; ``export-check.toml`` beside the checkpoint; the nearest
``pyproject.toml`` with a ``[tool.export-check]`` table, from the checkpoint's folder upwards, then
from the current directory upwards. Relative paths in a settings file are relative to that file.
Settings files come from the repo under test: they are parsed strictly and never executed.

>>> parse_settings({"arch": "m.py:Net", "batch-size": 8}, Path("/p"), "pyproject.toml")["batch_size"]
8
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from .errors import UsageError
from .options import SETTINGS, coerce

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
    if sep and (module_part.endswith(".py") or "/" in module_part) and not Path(module_part).expanduser().is_absolute():
        spec = f"{base / module_part}:{attr}"
    return spec, base


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc}); fix the file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc}); check its permissions") from None


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
        if not explicit.is_file():
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
