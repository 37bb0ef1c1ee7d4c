"""The golden set's calibration split: the default an older manifest gets, each rule's samples, and
any ``recording.calibration`` value refused with one line naming the manifest, never a traceback."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DEFAULT_GOLDEN
from export_check.errors import GoldenError
from export_check.golden.manifest import CalibrationSplit, load_golden, parse_manifest


def _manifest(calibration: Any, inputs: int = 6) -> str:
    entries = [{"file": f"inputs/{i}.npy", "name": f"{i}.npy", "sha256": hashlib.sha256(str(i).encode()).hexdigest()}
               for i in range(inputs)]
    recording: dict[str, Any] = {"batch_size": 4, "mode": "eval"}
    if calibration is not None:
        recording["calibration"] = calibration
    return json.dumps({"format": "export-check-golden", "version": 1, "inputs": entries, "recording": recording,
                       "reference": {"file": "reference.npy", "sha256": "0" * 64, "shape": [inputs, 10]}})


def test_an_older_manifest_gets_the_default_half_at_most_32_by_sha256() -> None:
    golden = load_golden(DEFAULT_GOLDEN)
    assert golden.calibration == CalibrationSplit("sha256", 32, recorded=False) and len(golden) == 64
    by_hash = sorted(range(64), key=lambda i: golden.inputs[i].sha256)[:32]
    assert golden.calibration_indices() == tuple(sorted(by_hash))
    labels = {golden.inputs[i].label for i in golden.calibration_indices()}
    assert len(labels) == 10, "the sha256 rule spreads over every class of the bundled digits"
    golden = parse_manifest(Path("/g"), _manifest(None, inputs=3))
    assert golden.calibration.count == 1 and not golden.calibration.recorded
    assert parse_manifest(Path("/g"), _manifest(None, inputs=1)).calibration_indices() == ()


@pytest.mark.parametrize(("value", "indices"), [
    ({"rule": "first", "count": 2}, (0, 1)),
    ({"rule": "names", "names": ["4.npy", "1.npy"]}, (1, 4)),
    ({"rule": "sha256", "count": 0}, ()),
    ({"rule": "sha256", "count": 6}, (0, 1, 2, 3, 4, 5)),
])
def test_each_rule_names_its_samples(value: dict, indices: tuple[int, ...]) -> None:
    golden = parse_manifest(Path("/g"), _manifest(value))
    assert golden.calibration.recorded and golden.calibration_indices() == indices
    assert golden.calibration.to_json() == value


@pytest.mark.parametrize(("value", "message"), [
    ({"rule": "sha256", "count": 7}, "count must be an integer from 0 to 6"),
    ({"rule": "sha256", "count": -1}, "count must be an integer"),
    ({"rule": "first", "count": True}, "count must be an integer"),
    ({"rule": "random"}, "rule is one of sha256, first, names"),
    ({"rule": "names", "names": ["9.npy"]}, "which is not an input of the set"),
    ({"rule": "names", "names": ["1.npy", "1.npy"]}, "distinct input names"),
    ([1, 2], "must be an object"),
])
def test_a_bad_split_is_one_line_naming_the_manifest(value: Any, message: str) -> None:
    with pytest.raises(GoldenError, match=message) as caught:
        parse_manifest(Path("/g"), _manifest(value))
    assert "\n" not in str(caught.value) and "/g/manifest.json" in str(caught.value)


json_values = st.recursive(st.none() | st.booleans() | st.integers(-3, 10) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["rule", "count", "names", "x"]),
                                                                                       inner, max_size=3), max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(value=json_values | st.fixed_dictionaries({"rule": st.sampled_from(["sha256", "first", "names"]), "count": json_values,
                                                  "names": json_values}))
def test_any_split_value_reads_or_is_refused_cleanly(value: Any) -> None:
    try:
        golden = parse_manifest(Path("/g"), _manifest(value))
    except GoldenError as exc:
        assert "\n" not in str(exc) and "/g/manifest.json" in str(exc)
        return
    assert all(0 <= i < len(golden) for i in golden.calibration_indices())
