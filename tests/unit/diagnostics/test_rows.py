"""The rows the batch-size and determinism checks compare (diagnostics/run.py's rows_of), and where each output sits in
them (diagnostics/shapes.py's columns_of)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from export_check.diagnostics.run import rows_of
from export_check.diagnostics.shapes import columns_of
from export_check.errors import ArtifactError
from export_check.signature import InputSpec, OutputSpec, Signature

# two compared outputs, the second with its samples on axis 1 (a sequence-first model), and one not compared
SIG = Signature((InputSpec("x"),), (OutputSpec("scores"), OutputSpec("seq", batch_axis=1, kind="values"),
                                    OutputSpec("debug", compared=False)))


def _outputs(n: int) -> dict[str, np.ndarray]:
    return {"scores": np.arange(n * 3, dtype=np.float64).reshape(n, 3),
            "seq": np.arange(4 * n * 2, dtype=np.int64).reshape(4, n, 2),
            "debug": np.zeros((n, 5))}


def test_every_compared_output_side_by_side_one_row_per_sample_in_float32() -> None:
    out = _outputs(2)
    rows = rows_of(out, SIG, "eager")
    assert rows.shape == (2, 3 + 8) and rows.dtype == np.float32  # "debug" is not compared: not in the rows
    assert rows[1, :3].tolist() == [3.0, 4.0, 5.0]
    assert rows[1, 3:].tolist() == np.moveaxis(out["seq"], 1, 0)[1].reshape(-1).astype(np.float32).tolist()
    first = rows_of(out, SIG, "eager", first_only=True)  # the eager self-check's: the first compared output alone
    assert first.shape == (2, 3) and np.array_equal(first, rows[:, :3])


def test_a_missing_compared_output_names_what_returned_it() -> None:
    with pytest.raises(ArtifactError, match="onnx returned outputs scores.*missing: seq"):
        rows_of({"scores": np.zeros((2, 3))}, SIG, "onnx")
    # the first output alone is all the self-check needs
    assert rows_of({"scores": np.zeros((2, 3))}, SIG, "eager", first_only=True).shape == (2, 3)


@given(st.integers(1, 5))
def test_the_columns_say_where_each_output_sits_in_the_rows_whatever_its_batch_axis(n: int) -> None:
    out = _outputs(n)
    columns = columns_of({name: a[:1] if name != "seq" else a[:, :1] for name, a in out.items()}, SIG)
    assert [(c.name, c.kind, c.shape, c.start, c.stop) for c in columns] == [("scores", "logits", (3,), 0, 3),
                                                                             ("seq", "values", (4, 2), 3, 11)]
    rows = rows_of(out, SIG, "eager")
    seq = columns[1]
    assert np.array_equal(rows[:, seq.start:seq.stop].reshape(n, *seq.shape), np.moveaxis(out["seq"], 1, 0).astype(np.float32))
