"""``meta.json``, sealed: an entry's description and an HMAC-SHA256 over its exact bytes::

    {"mac": "hmac-sha256:<64 hex>",
     "meta": {...the entry: artifact file name, sha256 and size, observation, key inputs...}}

The MAC is taken, under this user's cache key (``secret``), over the bytes of the ``"meta"`` value as
written and the entry's folder name, so an edited, truncated, moved, or otherwise-keyed ``meta.json``
is refused before any of its JSON is parsed. Only then is it parsed, and even then bounded: nesting
depth and integer length are limited, and so is the file (the writer refuses what the reader would).

Each file of an entry is described there as a :class:`Stored` (its name in ``--out`` and in the entry, its
sealed sha256 and size, the identities cache/linked.py trusts): ``from_meta`` reads one back. The records
it holds (written with ``dataclasses.asdict``: an observation) are typed again by ``from_plain``, which also
reads a report's observations back (``rejudge``).
"""

from __future__ import annotations

import hmac
import json
import re
import types
import typing
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from .secret import CacheKey

MAX_META_BYTES = 8 << 20
MAX_DEPTH = 32
MAX_INT_DIGITS = 40
_DOMAIN = b"export-check cache entry\0"
_HEAD = b'{"mac": "hmac-sha256:'
_MIDDLE = b'",\n "meta": '
_TAIL = b"\n}\n"
_MAC = re.compile(rb"[0-9a-f]{64}")
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
NON_FINITE = ("inf", "-inf", "nan")


class NotSealed(Exception):
    """The meta.json was not written by this user's export-check (no MAC, or a MAC that does not match)."""


def _message(entry_key: str, body: bytes) -> bytes:
    return _DOMAIN + entry_key.encode() + b"\0" + body


def seal(key: CacheKey, entry_key: str, meta: dict[str, Any]) -> bytes:
    """The bytes of a sealed ``meta.json`` for the entry folder ``entry_key``."""
    body = json.dumps(meta, indent=1, sort_keys=True).encode("utf-8")
    if len(body) + 128 > MAX_META_BYTES:
        raise ValueError(f"meta.json would be {len(body)} bytes, more than the {MAX_META_BYTES} a reader accepts")
    loads_bounded(body)  # never write what the reader refuses
    return _HEAD + key.mac(_message(entry_key, body)).encode() + _MIDDLE + body + _TAIL


def unseal(key: CacheKey, entry_key: str, data: bytes) -> dict[str, Any]:
    """The entry's description, if ``data`` was sealed under ``key`` for ``entry_key``; ``NotSealed``
    otherwise, and ``ValueError`` for a sealed one that is not a bounded JSON object."""
    start = len(_HEAD) + 64 + len(_MIDDLE)
    mac = data[len(_HEAD):len(_HEAD) + 64]
    if (not data.startswith(_HEAD) or not _MAC.fullmatch(mac) or data[len(_HEAD) + 64:start] != _MIDDLE
            or not data.endswith(_TAIL) or len(data) < start + len(_TAIL)):
        raise NotSealed("meta.json carries no MAC")
    body = data[start:len(data) - len(_TAIL)]
    if not hmac.compare_digest(mac.decode(), key.mac(_message(entry_key, body))):
        raise NotSealed("its MAC does not match this user's key")
    meta = loads_bounded(body)
    if not isinstance(meta, dict):
        raise ValueError("meta.json holds no object")
    return meta


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def depth(data: bytes, stop: int = MAX_DEPTH) -> int:
    """How deeply the arrays and objects of a JSON text nest (brackets inside strings do not count),
    counted up to one beyond ``stop``."""
    level = deepest = 0
    for byte in _STRINGS.sub(b"", data).translate(None, _NOT_BRACKETS):
        level += 1 if byte in b"[{" else -1
        if level > deepest:
            deepest = level
            if deepest > stop:
                break
    return deepest


def loads_bounded(data: bytes) -> Any:
    """``json.loads`` of UTF-8 ``data`` with its nesting and its integers bounded: ``ValueError``
    (never ``RecursionError`` or a slow huge-integer conversion) for anything beyond them."""
    if len(data) > MAX_META_BYTES:
        raise ValueError(f"{len(data)} bytes of JSON (at most {MAX_META_BYTES})")
    if depth(data) > MAX_DEPTH:
        raise ValueError(f"JSON nested more than {MAX_DEPTH} deep")
    return json.loads(data.decode("utf-8"), parse_int=_bounded_int)


@dataclass(frozen=True)
class Stored:
    """One file of an artifact in a cache entry: its name in ``--out``, its name in the entry folder, its
    sealed sha256 and size, and the identities it had when stored (``seen``: in the entry; ``placed``: in ``--out``)."""

    shown: str
    file: str
    sha256: str
    size: int
    seen: tuple[Any, ...] = ()
    placed: tuple[Any, ...] = ()

    def to_meta(self) -> dict[str, Any]:
        return {"as": self.shown, "file": self.file, "sha256": self.sha256, "size": self.size, "seen": list(self.seen),
                "placed": list(self.placed)}


def from_meta(value: Any, what: str) -> Stored:
    """A ``Stored`` from its sealed description; ``ValueError`` naming ``what`` when it is not one."""
    if not isinstance(value, dict) or not isinstance(value.get("size"), int):
        raise ValueError(f"meta.json describes no file for {what}")
    return Stored(shown=str(value.get("as", "")), file=str(value["file"]), sha256=str(value["sha256"]), size=value["size"],
                  seen=tuple(value.get("seen") or ()), placed=tuple(value.get("placed") or ()))


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
