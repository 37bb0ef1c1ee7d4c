"""golden/spill.py and the spilled mode of golden/batches.py: a set over the memory budget is decoded once into a
file and read back batch by batch, the same bytes, dtypes and shapes as the set decoded and held (issue 43, item 4)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from conftest import DEFAULT_GOLDEN
from export_check.errors import UsageError
from export_check.golden import batches as batches_module
from export_check.golden.batches import ENV, MEMORY_BUDGET, GoldenBatches, memory_budget
from export_check.golden.goldenset import GoldenSet
from export_check.golden.manifest import load_golden
from export_check.golden.spill import SpilledBatches

DTYPES = st.sampled_from([np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_, ">f4"])
ARRAYS = DTYPES.flatmap(lambda dtype: hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit: dtype (byte order too), shape and every byte (a NaN's payload included)."""
    return a.dtype == b.dtype and a.shape == b.shape and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["x", "mask", "tokens"]), ARRAYS, min_size=1), min_size=1, max_size=4))
def test_spilled_batches_read_back_bit_for_bit(batches: list[dict[str, np.ndarray]]) -> None:
    spill = SpilledBatches()
    try:
        for start, feeds in enumerate(batches):
            spill.add(start * 10, feeds)
        spill.finish()
        for _ in range(2):  # every pass reads the same
            back = list(spill)
            assert [start for start, _ in back] == [start * 10 for start in range(len(batches))]
            for (_, got), sent in zip(back, batches, strict=True):
                assert list(got) == list(sent) and all(_same(got[name], sent[name]) for name in sent)
                assert all(got[name].flags.writeable for name in got)  # fresh arrays, as decoded ones are
    finally:
        spill.close()


def test_a_non_contiguous_array_is_spilled_as_its_values() -> None:
    spill = SpilledBatches()
    strided = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    spill.add(0, {"x": strided})
    spill.finish()
    ((_, got),) = list(spill)
    np.testing.assert_array_equal(got["x"], strided)
    spill.close()


class _Set:
    """A stand-in for a golden set of 4 samples whose batches hold ``value`` (an object array has no bytes to spill)."""

    def __init__(self, value: np.ndarray) -> None:
        from export_check.signature import SINGLE

        self.signature, self.value = SINGLE, value

    def __len__(self) -> int:
        return 4

    def feed_batches(self, batch_size: int):
        for start in range(0, 4, batch_size):
            yield start, {"input": self.value}

    first_batch = GoldenSet.first_batch  # the set's own sizing, over these batches


def test_a_set_over_the_budget_spills_plain_numbers_and_streams_object_arrays() -> None:
    numbers = GoldenBatches(_Set(np.zeros((2, 3), np.float32)), 2, budget=0)
    objects = GoldenBatches(_Set(np.array([object(), object()])), 2, budget=0)
    assert numbers.held is None and numbers.rereadable and objects.held is None and not objects.rereadable
    numbers.precompute_eager(lambda feeds: {"logits": feeds["input"] * 2}, budget=1 << 20)
    assert numbers.eager_held() and [start for start, _ in numbers] == [0, 2]  # read back from its spill file
    numbers.close()


@pytest.fixture(scope="module")
def golden():
    return load_golden(DEFAULT_GOLDEN)


def _eager(feeds):
    """A stand-in for eager: deterministic, depends on every input value."""
    x = feeds["input"]
    return {"logits": x.reshape(len(x), -1)[:, :10] * 2.0 + x.mean()}


def test_a_set_over_the_budget_is_spilled_once_and_read_back_as_the_held_one(golden, monkeypatch: pytest.MonkeyPatch) -> None:
    held = GoldenBatches(golden, 16)
    assert held.held is not None and held.rereadable
    spilled = GoldenBatches(golden, 16, budget=4096)  # the inputs' 786 KB over it, eager's 2,560 bytes of outputs within
    assert spilled.held is None and spilled.rereadable and spilled._spill is None  # no spill file until the first pass
    held.precompute_eager(_eager)
    spilled.precompute_eager(_eager)  # the first pass: decoded, run through eager, written
    assert spilled.eager_held() and spilled._spill is not None and len(spilled._spill) == len(held.held) == 4

    def no_decoding(*_):
        raise AssertionError("a spilled set is decoded once")

    monkeypatch.setattr(type(golden), "load_input", no_decoding)  # every later pass reads the file
    for _ in range(2):
        pairs = list(zip(held, spilled, strict=True))
        assert all(a[0] == b[0] and _same(a[1]["input"], b[1]["input"]) for a, b in pairs)
    for index in range(4):
        (ours, _), (theirs, _) = held.eager(index), spilled.eager(index)
        assert _same(ours["logits"], theirs["logits"])
    (ours, count), (theirs, spilled_count) = held.head(40), spilled.head(40)
    assert _same(ours["input"], theirs["input"]) and theirs["input"].shape == (40, 3, 32, 32) and count == spilled_count == 40
    spilled.close()
    assert spilled._spill is None and not spilled.rereadable


def test_without_a_spill_the_set_streams_and_eager_is_not_held(golden) -> None:
    streamed = GoldenBatches(golden, 16, budget=4096, spill=False)
    streamed.precompute_eager(_eager)
    assert not streamed.rereadable and not streamed.eager_held()
    head, count = streamed.head(20)  # the probe, decoded again: the first 20 samples as the batches hold them
    assert count == 20 and _same(head["input"], np.concatenate([feeds["input"] for _, feeds in streamed])[:20])
    assert sum(len(feeds["input"]) for _, feeds in streamed) == len(golden)
    nothing = GoldenBatches(golden, 16, budget=0)  # a budget of nothing holds no eager outputs either: one pass after every build
    nothing.precompute_eager(_eager)
    assert nothing.rereadable and not nothing.eager_held()
    nothing.close()


def test_a_spill_that_cannot_be_written_streams(golden, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk: the file is dropped, the set streams (decoded again per pass), eager's outputs are not held
    (one pass after every build, as before spilling existed)."""
    def full(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(SpilledBatches, "add", full)
    batches = GoldenBatches(golden, 16, budget=4096)
    batches.precompute_eager(_eager)
    assert not batches.rereadable and not batches.eager_held()
    assert [start for start, _ in batches] == [0, 16, 32, 48]


def test_the_budget_comes_from_the_environment_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert memory_budget() == MEMORY_BUDGET == 256 << 20
    monkeypatch.setenv(ENV, " 1000 ")
    assert memory_budget() == 1000 and GoldenBatches(load_golden(DEFAULT_GOLDEN), 16).held is None
    monkeypatch.setenv(ENV, "-5")
    assert memory_budget() == 0
    monkeypatch.setenv(ENV, "256M")
    with pytest.raises(UsageError) as raised:
        memory_budget()
    assert str(raised.value) == f"{ENV}='256M' is not a number of bytes; unset it or give one (e.g. 268435456)"
    assert batches_module.ENV == "EXPORT_CHECK_GOLDEN_MEMORY"
