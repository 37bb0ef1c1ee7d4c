"""cache/sealed.py: a meta.json is used only when its MAC, under this user's key and for this entry folder, matches;
the typed records it holds are rebuilt from its JSON (from_plain), and refused when they do not fit."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_check.cache.sealed import MAX_DEPTH, MAX_INT_DIGITS, NotSealed, depth, from_plain, loads_bounded, seal, unseal
from export_check.cache.secret import CacheKey

KEY = CacheKey(Path("k"), b"\x01" * 32)
OTHER = CacheKey(Path("k2"), b"\x02" * 32)
ENTRY = "ab" * 32
META = {"artifact": {"name": "onnx.onnx", "sha256": "0" * 64, "size": 1234}, "mae": 1.5e-7, "notes": ["a \"quoted\" [note]"]}


def test_a_sealed_meta_reads_back() -> None:
    data = seal(KEY, ENTRY, META)
    assert data.startswith(b'{"mac": "hmac-sha256:') and json.loads(data)["meta"] == META
    assert unseal(KEY, ENTRY, data) == META


def test_another_key_or_another_folder_is_not_sealed() -> None:
    data = seal(KEY, ENTRY, META)
    with pytest.raises(NotSealed, match="does not match"):
        unseal(OTHER, ENTRY, data)
    with pytest.raises(NotSealed, match="does not match"):
        unseal(KEY, "cd" * 32, data)  # a meta.json moved into another entry


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_change_to_the_bytes_is_refused_before_parsing(data: st.DataObject) -> None:
    sealed = bytearray(seal(KEY, ENTRY, META))
    index = data.draw(st.integers(0, len(sealed) - 1))
    change = data.draw(st.sampled_from(["flip", "cut", "insert"]))
    if change == "flip":
        sealed[index] ^= data.draw(st.integers(1, 255))
    elif change == "cut":
        del sealed[index:]
    else:
        sealed[index:index] = b" "
    with pytest.raises(NotSealed):
        unseal(KEY, ENTRY, bytes(sealed))


@pytest.mark.parametrize("data", [b"", b"{}", json.dumps({"mac": "hmac-sha256:" + "0" * 64, "meta": META}).encode()])
def test_unsealed_files_carry_no_mac(data: bytes) -> None:
    with pytest.raises(NotSealed):
        unseal(KEY, ENTRY, data)


def test_the_writer_refuses_what_the_reader_would() -> None:
    with pytest.raises(ValueError, match="integer"):
        seal(KEY, ENTRY, {"n": 10 ** MAX_INT_DIGITS})
    deep: object = 1
    for _ in range(MAX_DEPTH):
        deep = [deep]
    with pytest.raises(ValueError, match="nested"):
        seal(KEY, ENTRY, {"d": deep})  # the object itself is one more level
    assert unseal(KEY, ENTRY, seal(KEY, ENTRY, {"n": 10 ** (MAX_INT_DIGITS - 1)}))["n"] == 10 ** (MAX_INT_DIGITS - 1)


def test_a_sealed_non_object_is_a_value_error() -> None:
    from export_check.cache import sealed

    body = b"[1, 2]"
    data = sealed._HEAD + KEY.mac(sealed._message(ENTRY, body)).encode() + sealed._MIDDLE + body + sealed._TAIL
    with pytest.raises(ValueError, match="no object"):
        unseal(KEY, ENTRY, data)


@pytest.mark.parametrize(("text", "expected"), [(b"1", 0), (b"[[{}]]", 3), (b'["[[[", {"a": "]]"}]', 2), (rb'["\"[["]', 1)])
def test_depth_ignores_brackets_in_strings(text: bytes, expected: int) -> None:
    assert depth(text) == expected


def test_loads_bounded_refuses_deep_and_long_input_with_a_value_error() -> None:
    with pytest.raises(ValueError, match="nested more than"):
        loads_bounded(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ValueError, match="integer of"):
        loads_bounded(b"[" + b"9" * 5000 + b"]")
    assert loads_bounded(b'{"a": [1, -2.5]}') == {"a": [1, -2.5]}


@dataclasses.dataclass(frozen=True)
class Inner:
    value: float
    label: str | None = None


@dataclasses.dataclass(frozen=True)
class Outer:
    name: str
    count: int
    flag: bool
    inners: tuple[Inner, ...]
    pair: tuple[int, str]
    table: dict[str, float]
    anything: Any = None
    maybe: Inner | None = None


def test_a_record_round_trips_through_asdict_and_json() -> None:
    record = Outer("a", 3, True, (Inner(1.5), Inner(-2.0, "x")), (7, "seven"), {"k": 0.25}, [1, {"z": None}], Inner(3.0))
    assert from_plain(Outer, json.loads(json.dumps(dataclasses.asdict(record)))) == record


def test_an_int_read_as_a_float_field_becomes_a_float() -> None:
    inner = from_plain(Inner, {"value": 2})
    assert inner == Inner(2.0) and type(inner.value) is float


@pytest.mark.parametrize(("tp", "value"), [
    (int, True), (int, 1.0), (str, 3), (bool, 1), (float, "1.0"), (float, False),
    (Inner, [1.0]), (tuple[int, ...], {"a": 1}), (tuple[int, str], [1]), (tuple[int, str], [1, "a", 2]),
    (int | str, 1.5), (Inner, {"label": "no value"}), (set, [1]),
])
def test_what_does_not_fit_is_refused(tp: Any, value: Any) -> None:
    with pytest.raises((TypeError, ValueError, KeyError)):
        from_plain(tp, value)


def test_none_is_none_for_any_type() -> None:
    assert from_plain(Inner, None) is None and from_plain(int, None) is None


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["name", "count", "flag", "inners", "pair", "table", "value", "label"]), inner, max_size=8),
                    max_leaves=15))
def test_any_json_is_an_outer_or_a_clean_refusal(data: Any) -> None:
    try:
        got = from_plain(Outer, data)
    except (TypeError, ValueError, KeyError):
        return
    assert got is None or isinstance(got, Outer)
