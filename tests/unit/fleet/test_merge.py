"""fleet/merge.py: merge input that is not a fleet report is one UsageError line, never a traceback."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_check.errors import UsageError
from export_check.fleet.merge import merge


@settings(max_examples=40, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["schema", "models", "rows", "x"]), inner,
                                                                                 max_size=3), max_leaves=8))
def test_merge_refuses_any_other_json_with_one_line(tmp_path_factory: pytest.TempPathFactory, data: object) -> None:
    path = tmp_path_factory.mktemp("merge") / "r.json"
    if isinstance(data, dict) and "schema" in data:
        data["schema"] = "export-check-fleet-report"  # the schema right, the content not
    path.write_text(json.dumps(data))
    try:
        merge([path])
    except UsageError as exc:
        assert str(exc).startswith(f"{path}: ") and "\n" not in str(exc)
