"""feeds.py: batches of named inputs are sliced and joined along each input's own batch axis."""

from __future__ import annotations

import numpy as np

from export_check.feeds import length, samples_first, take
from export_check.signature import SINGLE, InputSpec, OutputSpec, Signature

# "x" holds its samples on axis 1 (a sequence-first input), "ids" on axis 0; "y" is an output batched on axis 2
SIG = Signature(inputs=(InputSpec("x", batch_axis=1), InputSpec("ids", "int64")), outputs=(OutputSpec("y", batch_axis=2),))


def feeds(n: int, offset: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.arange(3 * n * 2).reshape(3, n, 2) + 1000 * offset, "ids": np.arange(n) + offset}


def test_length_and_take_use_each_inputs_batch_axis() -> None:
    f = feeds(5)
    assert length(f, SIG) == 5
    part = take(f, SIG, 1, 3)
    assert part["x"].shape == (3, 2, 2) and part["ids"].tolist() == [1, 2]
    np.testing.assert_array_equal(part["x"], f["x"][:, 1:3])
    assert length(part, SIG) == 2
    assert take(f, SIG, 4, 99)["ids"].tolist() == [4]  # past the end: what is there


def test_an_input_the_signature_does_not_name_is_batched_on_axis_0() -> None:
    f = {"unknown": np.arange(12).reshape(4, 3)}
    assert length(f, SINGLE) == 4
    assert take(f, SINGLE, 0, 2)["unknown"].shape == (2, 3)


def test_samples_first_moves_only_outputs_batched_elsewhere() -> None:
    y = np.arange(24).reshape(2, 3, 4)
    z = np.ones((4, 2))
    moved = samples_first({"y": y, "z": z}, SIG)
    assert moved["y"].shape == (4, 2, 3) and moved["z"] is z
    np.testing.assert_array_equal(moved["y"][1], y[:, :, 1])
