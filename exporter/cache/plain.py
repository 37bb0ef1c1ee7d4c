"""Typed records back from the JSON a cache entry holds (written with ``dataclasses.asdict``)."""

from __future__ import annotations

import types
import typing
from dataclasses import fields, is_dataclass
from typing import Any

NON_FINITE = ("inf", "-inf", "nan")


def from_plain(tp: Any, value: Any) -> Any:
    """Rebuild a value of type ``tp`` (frozen dataclasses, tuples, optionals, scalars) from JSON data
    written from ``dataclasses.asdict``; raises ``TypeError``/``ValueError`` when it does not fit."""
    if value is None:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        candidates = [a for a in args if a is not type(None)]
        errors = []
        for candidate in candidates:
            try:
                return from_plain(candidate, value)
            except (TypeError, ValueError, KeyError) as exc:
                errors.append(exc)
        raise TypeError(f"{value!r} fits none of {candidates}: {errors}")
    if isinstance(tp, type) and is_dataclass(tp):
        if not isinstance(value, dict):
            raise TypeError(f"{tp.__name__} needs an object, got {type(value).__name__}")
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: from_plain(hints[f.name], value[f.name]) for f in fields(tp) if f.init and f.name in value})
    if origin is tuple:
        if not isinstance(value, list):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_plain(args[0], v) for v in value)
        return tuple(from_plain(a, v) for a, v in zip(args, value, strict=True))
    if origin is dict:
        return {from_plain(args[0], k): from_plain(args[1], v) for k, v in dict(value).items()} if args else dict(value)
    if tp is Any:
        return value
    if tp is float:
        if value in NON_FINITE:  # written by results.lossless: JSON has no such numbers
            return float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"expected a number, got {value!r}")
        return float(value)
    if tp in (int, str, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise TypeError(f"expected {tp.__name__}, got {value!r}")
        return value
    raise TypeError(f"cannot rebuild {tp!r}")
