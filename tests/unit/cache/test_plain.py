"""cache/plain.py: typed records rebuilt from the JSON a cache entry holds, and refused when they do not fit."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_check.cache.plain import from_plain


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
