"""golden/discover.py: the named inputs of recorded samples, checked against the model's forward (no torch needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from export_check.errors import GoldenError
from export_check.golden.discover import batched_axis, input_specs, sample_axis
from export_check.signature import InputSpec, SignatureSettings, parse_signature_settings

NONE = SignatureSettings()


class TextModel:
    def forward(self, ids, mask=None, *, temperature=1.0):
        return ids


class Strict:
    def forward(self, image, boxes):
        return image


def sample(length: int, dtype=np.int64) -> dict[str, np.ndarray]:
    return {"ids": np.zeros(length, dtype), "mask": np.ones(length, bool)}


def files(n: int, suffix: str = ".npz") -> list[Path]:
    return [Path(f"inputs/{i}{suffix}") for i in range(n)]


def test_axes_that_change_between_samples_are_dynamic_and_share_a_symbol_when_they_move_together() -> None:
    samples = [sample(5), sample(7), sample(5)]
    specs = input_specs(TextModel(), samples, files(3), NONE)
    assert specs == (InputSpec("ids", "int64", 0, ((1, "ids_1"),)), InputSpec("mask", "bool", 0, ((1, "ids_1"),)))


def test_settings_override_what_is_discovered() -> None:
    settings = parse_signature_settings({"ids": {"batch-axis": 1, "dynamic-axes": {"0": "tokens"}},
                                         "temperature": {"keyword": True}}, None, "s")
    samples = [{**sample(4), "temperature": np.float32(0.5) * np.ones(())} for _ in range(2)]
    specs = input_specs(TextModel(), samples, files(2), settings)
    assert specs[0] == InputSpec("ids", "int64", 1, ((0, "tokens"),)) and specs[2].keyword and specs[2].dynamic_axes == ()


def test_safetensors_samples_take_forwards_order() -> None:
    reordered = [{"mask": s["mask"], "ids": s["ids"]} for s in (sample(3), sample(3))]
    assert [s.name for s in input_specs(TextModel(), reordered, files(2, ".safetensors"), NONE)] == ["ids", "mask"]
    with pytest.raises(GoldenError, match=r"passed by position: mask, ids"):
        input_specs(TextModel(), reordered, files(2), NONE)


@pytest.mark.parametrize(("samples", "says"), [
    ([sample(3), {"ids": np.zeros(3, np.int64)}], "inputs/1.npz: holds inputs ids (no mask), but 0.npz holds ids, mask"),
    ([sample(3), {**sample(3), "extra": np.zeros(1)}], "(unexpected extra)"),
    ([sample(3), sample(3, np.int32)], "input ids holds int32 but 0.npz holds int64"),
    ([sample(3), {"ids": np.zeros((3, 1), np.int64), "mask": np.ones(3, bool)}], "input ids has shape (3, 1) but 0.npz has (3,)"),
])
def test_samples_that_disagree_are_refused_naming_the_file(samples, says: str) -> None:
    with pytest.raises(GoldenError) as info:
        input_specs(TextModel(), samples, files(len(samples)), NONE)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_forward_must_take_what_the_samples_hold() -> None:
    with pytest.raises(GoldenError, match=r"holds no input boxes, which the model takes \(Strict.forward\(image, boxes\)\)"):
        input_specs(Strict(), [{"image": np.zeros(2)}], files(1), NONE)
    with pytest.raises(GoldenError, match=r"the model takes TextModel.forward\(ids, mask=..., \*, temperature=...\)"):
        input_specs(TextModel(), [{"tokens": np.zeros(2)}], files(1), NONE)
    with pytest.raises(GoldenError, match=r"\[tool.export-check.model-inputs.labels\]: the samples hold no input 'labels'"):
        input_specs(TextModel(), [sample(2)], files(1), parse_signature_settings({"labels": {"dtype": "int64"}}, None, "s"))
    with pytest.raises(GoldenError, match="its batch axis is one of 0..1, not 3"):
        input_specs(TextModel(), [sample(2)], files(1), parse_signature_settings({"ids": {"batch-axis": 3}}, None, "s"))


def test_a_model_without_a_forward_signature_takes_any_names() -> None:
    assert [s.name for s in input_specs(object(), [{"anything": np.zeros(2)}], files(1), NONE)] == ["anything"]


@given(st.integers(1, 6).flatmap(lambda ndim: st.tuples(st.just(ndim), st.integers(0, ndim - 1), st.integers(0, ndim - 1))))
def test_sample_axis_and_batched_axis_are_inverse(args: tuple[int, int, int]) -> None:
    ndim, batch, axis = args  # ndim axes on the batched array, the batch on ``batch``
    if axis == batch:
        return
    on_sample = sample_axis(axis, ndim, batch)
    assert 0 <= on_sample < ndim - 1 and batched_axis(on_sample, batch) == axis
    assert sample_axis(axis - ndim, ndim, batch) == on_sample  # negative axes count from the end
