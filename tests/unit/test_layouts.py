"""layouts.py: the dim order of each layout an app feeds, its name, and the cause a mismatched file's row states."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from export_check.layouts import FED, MISMATCH, dim_order, layout_details, layout_of, layout_reasons


@given(st.permutations(range(4)))
def test_a_dim_order_is_named_by_its_layout_or_shown_as_itself(order: list[int]) -> None:
    name = layout_of(order)
    if name.startswith("dim order "):
        assert tuple(order) not in ((0, 1, 2, 3), (0, 2, 3, 1)) and name == "dim order " + ",".join(map(str, order))
    else:
        assert dim_order(name, 4) == tuple(order)


def test_channels_last_is_numpys_nhwc_memory_and_needs_a_channel_and_a_spatial_axis() -> None:
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    nhwc = np.ascontiguousarray(x.transpose(dim_order("channels-last", 4)))  # memory in the layout's order
    assert nhwc.shape == (2, 4, 5, 3) and (nhwc.transpose(0, 3, 1, 2) == x).all()
    with pytest.raises(ValueError, match="channels-last needs an input with a channel axis and a spatial one"):
        dim_order("channels-last", 2)
    with pytest.raises(ValueError, match="unknown layout 'nhwc'"):
        dim_order("nhwc", 4)


def test_a_file_recording_another_layout_is_the_cause_of_a_failing_row_and_a_note_on_a_passing_one() -> None:
    same = layout_details("m.pte", ["x"], ["channels-last"], [(0, 2, 3, 1)])
    assert same == {FED: "x: channels-last"} and layout_reasons(same, failed=True) == ((), ())
    other = layout_details("m.pte", ["x", "y"], ["channels-last", "contiguous"], [(0, 1, 2, 3), (0, 1)])
    assert other[FED] == "x: channels-last; y: contiguous"
    assert other[MISMATCH].startswith("m.pte was exported for input x in contiguous NCHW and the app feeds channels-last (NHWC in memory)")
    reasons, notes = layout_reasons(other, failed=True)
    assert reasons == (f"cause: {other[MISMATCH]}",) and notes == ()
    reasons, notes = layout_reasons(other, failed=False)
    assert reasons == () and notes == ("m.pte was exported for input x in contiguous NCHW and the app feeds channels-last (NHWC in memory); "
                                       "fed the app's layout it computes the same all the same (within the gate)",)
    assert layout_details("m.pte", ["x"], [], []) == {}  # counts that do not match say nothing rather than something false
