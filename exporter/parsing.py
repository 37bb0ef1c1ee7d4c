"""Bounded parsing of the text files export-check reads from outside: settings and fleet files (TOML),
merged reports (JSON), history lines (JSON). The golden set's own files are read by
:mod:`export_check.golden.reading`, which parses its JSON with :func:`load_json` here.

Every limit is here, so that docs/explanation/trust-model.md can list them:

- only a regular file is opened, non-blocking (a FIFO or a device is refused, never waited on), and
  read only up to its limit (``TOML_MAX_BYTES``, ``REPORT_MAX_BYTES``, ``HISTORY_MAX_BYTES``);
- the text must be UTF-8;
- arrays and tables nest at most ``MAX_DEPTH`` levels (JSON is measured before it is parsed; Python's
  parsers recurse, so a deeper file would end in a ``RecursionError``);
- integers are 64-bit (JSON: at most ``JSON_MAX_INT_DIGITS`` digits are parsed; Python refuses over
  4,300 digits with a ``ValueError``, and spends quadratic time below that), floats are finite.

Every refusal is one line of the caller's error class (``UsageError`` by default) naming the file
and the fix.

>>> load_json('{"a": [1, 2.5]}', Path("r.json"))
{'a': [1, 2.5]}
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from . import files
from .errors import ExportCheckError, UsageError

TOML_MAX_BYTES = 4 << 20  # a settings or fleet file; a fleet of 1,000 models is about 200 kB
REPORT_MAX_BYTES = 256 << 20  # a JSON report given to merge: a fleet of 1,000 models is a few MB
HISTORY_MAX_BYTES = 256 << 20  # a --history file: about 1 kB per run
MAX_DEPTH = 32  # our own files nest at most 8 levels deep
JSON_MAX_INT_DIGITS = 24  # int64 has 19 digits
INT_RANGE = (-(1 << 63), (1 << 63) - 1)


def read_text(path: Path, limit: int, what: str, fix: str, error: type[ExportCheckError] = UsageError) -> str:
    """``path``'s text: a regular file (a FIFO or device refused without waiting), at most ``limit``
    bytes, UTF-8; anything else is one ``error`` line naming the file, ``what`` it is and the ``fix``."""
    try:
        data = files.read_fd(files.open_regular(path, follow=True), limit, path)
    except FileNotFoundError:
        raise error(f"{path}: {what} not found; {fix}") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a {what}; {fix}") from None
    except files.UnsafeFile as exc:
        raise error(f"{path}: {what} {exc.strerror or exc}; refused, {fix}") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise error(f"{path}: cannot read the {what} ({getattr(exc, 'strerror', None) or exc}); {fix}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); {fix}") from None


# --- JSON --------------------------------------------------------------------------------------

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def json_depth(text: str) -> int:
    """How deeply ``text``'s arrays and objects nest (strings ignored), without parsing it."""
    import numpy as np  # here: a settings file's reading (no JSON) stays light

    skeleton = _STRING.sub("", text).encode("utf-8", "surrogatepass")
    if not skeleton:
        return 0
    codes = np.frombuffer(skeleton, dtype=np.uint8)
    steps = np.isin(codes, (ord("["), ord("{"))).astype(np.int32) - np.isin(codes, (ord("]"), ord("}"))).astype(np.int32)
    return int(np.cumsum(steps).max(initial=0))


def load_json(text: str, shown: Path | str, fix: str = "fix or replace the file", error: type[ExportCheckError] = UsageError,
              max_depth: int = MAX_DEPTH) -> Any:
    """Parse untrusted JSON text: at most ``max_depth`` levels deep, integers of at most
    ``JSON_MAX_INT_DIGITS`` digits and within 64 bits, finite numbers only (no NaN, Infinity or 1e999); one ``error`` line otherwise."""
    depth = json_depth(text)
    if depth > max_depth:
        raise error(f"{shown}: nests {depth} levels deep (at most {max_depth} are read); {fix}")

    def bounded_int(digits: str) -> int:
        if len(digits.lstrip("-")) > JSON_MAX_INT_DIGITS:
            raise error(f"{shown}: holds an integer of {len(digits.lstrip('-')):,} digits (at most {JSON_MAX_INT_DIGITS} are read); {fix}")
        value = int(digits)
        if not INT_RANGE[0] <= value <= INT_RANGE[1]:  # 19 digits reach past 2**63 - 1: what check_values refuses, refused here too
            raise error(f"{shown}: the integer {digits} needs {value.bit_length():,} bits, outside the 64-bit range; {fix}")
        return value

    def finite_float(digits: str) -> float:
        value = float(digits)
        if not math.isfinite(value):
            raise error(f"{shown}: holds the number {digits[:40]}, too large for a float; {fix}")
        return value

    def no_constant(constant: str) -> Any:
        raise error(f"{shown}: {constant} is not valid here; {fix}")

    try:
        return json.loads(text, parse_int=bounded_int, parse_float=finite_float, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise error(f"{shown}: not valid JSON ({exc.msg} at line {exc.lineno}); {fix}") from None
    except (RecursionError, ValueError) as exc:  # belt and braces: the bounds above should have refused it
        raise error(f"{shown}: not readable JSON ({type(exc).__name__}); {fix}") from None


def read_json(path: Path, limit: int, what: str, fix: str, error: type[ExportCheckError] = UsageError) -> Any:
    """A JSON file from outside, read (:func:`read_text`) and parsed (:func:`load_json`) within the bounds."""
    return load_json(read_text(path, limit, what, fix, error), path, fix, error)


# --- TOML --------------------------------------------------------------------------------------


def load_toml(path: Path, what: str, fix: str, error: type[ExportCheckError] = UsageError, ours: tuple[str, ...] = ()) -> dict[str, Any]:
    """A TOML file from outside (a settings or fleet file), read within the bounds and parsed, then the
    values of its table ``ours`` (``("tool", "export-check")`` in a ``pyproject.toml``; ``()``: the whole
    file) checked (:func:`check_values`): one ``error`` line naming the file otherwise. Other tools'
    tables are theirs to judge: an ``inf`` there is no reason to refuse the file."""
    text = read_text(path, TOML_MAX_BYTES, what, fix, error)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML ({exc}); {fix}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise error(f"{path}: nests arrays or inline tables too deeply to read (at most {MAX_DEPTH} levels); {fix}") from None
    except ValueError as exc:  # an integer of over 4,300 digits (int()'s limit)
        what_is = "an integer of over 4,300 digits" if "digits" in str(exc) else f"a value that cannot be read ({' '.join(str(exc).split())[:100]})"
        raise error(f"{path}: holds {what_is}, outside the 64-bit range; {fix}") from None
    checked: Any = data
    for key in ours:
        checked = checked.get(key) if isinstance(checked, dict) else None
    check_values(checked, path, fix, error, ".".join(ours))
    return data


def check_values(data: Any, shown: Path | str, fix: str, error: type[ExportCheckError] = UsageError, at: str = "") -> None:
    """Every value of parsed ``data`` (walked without recursion): at most ``MAX_DEPTH`` levels deep,
    integers within 64 bits, floats finite (``at``: the key ``data`` sits at). A TOML file of dotted keys (``a.b.c... = 1``) nests without
    the parser recursing, and a 4,000-digit integer parses: both are refused here, naming the key."""
    stack: list[tuple[Any, str, int]] = [(data, at, at.count(".") + 1 if at else 0)]
    while stack:
        value, key, depth = stack.pop()
        where = f" at {key[:80]}" if key else ""
        if depth > MAX_DEPTH:
            raise error(f"{shown}: nests {depth} levels deep{where} (at most {MAX_DEPTH} are read); {fix}")
        if isinstance(value, dict):
            stack.extend((v, f"{key}.{k}" if key else str(k), depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{key}[{i}]", depth + 1) for i, v in enumerate(value))
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int) and not INT_RANGE[0] <= value <= INT_RANGE[1]:
            raise error(f"{shown}: the integer{where} needs {value.bit_length():,} bits, outside the 64-bit range; {fix}")
        elif isinstance(value, float) and not math.isfinite(value):
            raise error(f"{shown}: the number{where} is {value}, not a finite number; {fix}")


__all__ = [
    "HISTORY_MAX_BYTES",
    "JSON_MAX_INT_DIGITS",
    "MAX_DEPTH",
    "REPORT_MAX_BYTES",
    "TOML_MAX_BYTES",
    "check_values",
    "json_depth",
    "load_json",
    "load_toml",
    "read_json",
    "read_text",
]


def env_bytes(name: str, default: int, error: type[Exception], example: int) -> int:
    """A number of bytes an environment variable sets (``default`` when it is unset or empty), at least 0; any other
    text is one ``error`` line naming the variable and an ``example``.

    >>> env_bytes("EXPORT_CHECK_UNSET_FOR_THE_EXAMPLE", 7, ValueError, 1)
    7
    """
    import os

    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return max(0, int(value))
    except ValueError:
        raise error(f"{name}={value!r} is not a number of bytes; unset it or give one (e.g. {example})") from None
