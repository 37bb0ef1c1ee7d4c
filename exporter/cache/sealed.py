"""``meta.json``, sealed: an entry's description and an HMAC-SHA256 over its exact bytes::

    {"mac": "hmac-sha256:<64 hex>",
     "meta": {...the entry: artifact file name, sha256 and size, observation, key inputs...}}

The MAC is taken, under this user's cache key (``secret``), over the bytes of the ``"meta"`` value as
written and the entry's folder name, so an edited, truncated, moved, or otherwise-keyed ``meta.json``
is refused before any of its JSON is parsed. Only then is it parsed, and even then bounded: nesting
depth and integer length are limited, and so is the file (the writer refuses what the reader would).

Each file of an entry is described there as a :class:`Stored` (its name in ``--out`` and in the entry, its
sealed sha256 and size, the identities cache/linked.py trusts): ``from_meta`` reads one back.
"""

from __future__ import annotations

import hmac
import json
import re
from dataclasses import dataclass
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
