"""How one option value is read and checked, apart from the table of options that uses it.

A settings file's (or a pytest plugin keyword's) value of a given kind, checked and converted
(:func:`coerce`); an ``artifacts`` list split at commas and its names checked against the artifact
kinds and groups; integers bounded to what torch, onnxruntime and numpy take (:func:`bounded_int`);
``arch-kwargs`` checked to be JSON data of bounded depth and size (:func:`json_data`). Every problem
is one :class:`~export_check.errors.UsageError` line naming where the value came from. Imports
nothing heavy: ``exporter/options.py`` builds ``--help`` on it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from .config import JOBS
from .errors import UsageError

NAME_KINDS = 'must name kinds or groups, e.g. "modern" or ["onnx", "aoti"]'  # an artifacts setting that names none


def comma_list(text: str) -> list[str]:
    """``--artifacts`` text (or a settings string) as its names: split at commas, blanks dropped."""
    return [part.strip() for part in text.split(",") if part.strip()]


def known_kinds(names: tuple[str, ...], where: str) -> None:
    """A settings file's ``artifacts``: at least one name, each a kind or a group (the file named in the error)."""
    from .artifacts import GROUPS, KIND_NAMES, unknown_kinds_message

    if not names:
        raise UsageError(f"{where} {NAME_KINDS}, got []")
    unknown = [n for n in names if n not in KIND_NAMES and n not in GROUPS]
    if unknown:
        raise UsageError(f"{where} must name kinds or groups: {unknown_kinds_message(unknown)}")


def coerce(value: Any, kind: str, base: Path | None, where: str) -> Any:
    """A settings value of ``kind``, checked; a relative path is made relative to ``base`` (if any).
    Every problem is one line starting with ``where`` ("pyproject.toml: batch-size")."""
    if kind == "str" or kind == "path":
        if not isinstance(value, str) or not value.strip() or "\x00" in value:
            raise UsageError(f"{where} must be a non-empty string, got {value!r}")
        if kind == "path":
            path = Path(os.path.expanduser(value))
            return path if path.is_absolute() or base is None else base / path
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"{where} must be an integer, got {value!r}")
        return bounded_int(value, where)
    if kind == "jobs":
        if isinstance(value, bool) or value not in JOBS:
            raise UsageError(f"{where} must be 1 or 2, got {value!r}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise UsageError(f"{where} must be a finite number >= 0, got {value!r}")
        return float(value)
    if kind == "strlist":
        if isinstance(value, str):  # artifacts = "modern" or "onnx, aoti", as --artifacts takes it
            parts = comma_list(value)
            if not parts:
                raise UsageError(f"{where} {NAME_KINDS}, got {value!r}")
            value = parts
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{where} must be a list of strings, got {value!r}")
        return tuple(value)
    if kind == "table":
        if not isinstance(value, dict):
            raise UsageError(f"{where} must be a table, got {value!r}")
        return dict(value)
    if kind == "switch":
        if not isinstance(value, bool):
            raise UsageError(f"{where} must be true or false, got {value!r}")
        return value
    raise AssertionError(kind)


INT_MAX = 2**31 - 1  # what every int option is read into at last (torch, onnxruntime, numpy take C ints)
JSON_MAX_DEPTH = 32
JSON_MAX_BYTES = 1 << 20


def bounded_int(value: int, where: str) -> int:
    if not -INT_MAX <= value <= INT_MAX:
        raise UsageError(f"{where} must be at most {INT_MAX} in size, got a {len(str(abs(value)))}-digit number")
    return value


def json_data(value: Any, where: str) -> Any:
    """``value`` when it is JSON data of bounded size (the cache, the golden manifest and every report
    record ``arch-kwargs`` as JSON): objects with string keys, lists, strings, finite numbers, 64-bit
    integers, booleans and null, at most ``JSON_MAX_DEPTH`` levels deep and ``JSON_MAX_BYTES`` as text.
    Anything else (a TOML date, say) is one line naming it. Checked without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > JSON_MAX_DEPTH:
            raise UsageError(f"{where} is nested more than {JSON_MAX_DEPTH} levels deep; pass plain constructor arguments")
        if isinstance(item, dict):
            bad = next((k for k in item if not isinstance(k, str)), None)
            if bad is not None:
                raise UsageError(f"{where} must have string keys, got {bad!r}")
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, int) and not isinstance(item, bool) and not -(2**63) <= item < 2**63:
            raise UsageError(f"{where} must hold at most 64-bit integers: it holds one of {len(str(abs(item)))} digits")
        elif isinstance(item, float) and not math.isfinite(item):
            raise UsageError(f"{where} must hold finite numbers: it holds {item!r}, which JSON cannot carry; pass a finite number")
        elif not (item is None or isinstance(item, (str, int, float))):
            raise UsageError(f"{where} must hold JSON data only (tables, lists, strings, numbers, booleans), "
                             f"got a {type(item).__name__} ({str(item)[:40]})")
    if len(json.dumps(value)) > JSON_MAX_BYTES:
        raise UsageError(f"{where} is more than {JSON_MAX_BYTES:,} bytes as JSON; pass plain constructor arguments")
    return value
