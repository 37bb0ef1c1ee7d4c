"""fleet/binding.py: a target's report is held to its build's (checkpoint sha256, golden manifest sha256,
gates); which build that is when several reports are merged; the one line of a refusal."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from export_check.errors import UsageError
from export_check.fleet.binding import check_targets
from export_check.fleet.result import FleetReport, ModelResult
from export_check.fleet.views import across_machines

SHA_A, SHA_B = "a1" * 32, "b2" * 32


def _report(target: str | None = None, checkpoint: str = SHA_A, golden: str = SHA_A, max_mae: float = 1e-5, path: str = "m.pth") -> dict:
    return {"checkpoint": {"path": path, "sha256": checkpoint}, "golden": {"manifest_sha256": golden}, "target": target,
            "thresholds": {"float": {"max_mae": max_mae, "min_top1": 0.0}, "reference_mae": max_mae}, "passed": True, "exit_code": 0,
            "counts": {}, "rows": [{"name": "onnx", "status": "pass", "metrics": {"mae": 1e-7}, "reasons": []}]}


def _found(*reports: tuple[dict, str]) -> list[tuple[ModelResult, Path]]:
    return [(ModelResult(name=r["checkpoint"]["path"] + (f" @ {r['target']}" if r["target"] else f"#{i}"), checkpoint=r["checkpoint"]["path"],
                         report=r), Path(file)) for i, (r, file) in enumerate(reports)]


def test_a_target_of_the_builds_bundle_is_bound_and_shown_beside_it() -> None:
    found = _found((_report(), "build.json"), (_report("board"), "board.json"))
    check_targets(found)
    (row,) = across_machines(FleetReport(models=tuple(m for m, _ in found), seconds=0.0, executor="merge", created="", tool_version=""))
    assert row["build_status"] == "pass" and row["target"] == "board"


@pytest.mark.parametrize(("change", "says"), [
    ({"checkpoint": SHA_B}, f"checkpoint sha256 {SHA_B[:12]} here, {SHA_A[:12]} there"),
    ({"golden": SHA_B}, f"golden manifest sha256 {SHA_B[:12]} here, {SHA_A[:12]} there"),
    ({"max_mae": 0.5}, "gates (float.max_mae) 0.5 here, 1e-05 there"),
])
def test_a_target_of_another_bundle_is_refused_naming_the_field_and_both_values(change: dict, says: str) -> None:
    with pytest.raises(UsageError) as refused:
        check_targets(_found((_report(), "build.json"), (_report("board", **change), "board.json")))
    line = str(refused.value)
    assert line.startswith("board.json: m.pth @ board replayed another bundle than its build in build.json: " + says + "; replay the current")
    assert "\n" not in line and SHA_A not in line and SHA_B not in line  # shortened


def test_among_several_builds_of_one_checkpoint_the_target_needs_one_that_agrees() -> None:
    """A fleet holding m.pth twice (gates of its own each): a target agreeing with either is bound to it, in the views too."""
    loose, strict = _report(max_mae=0.5), _report()
    loose["rows"][0]["status"] = "fail"  # told apart in the views: the target is shown beside the build it agrees with
    found = _found((loose, "fleet.json"), (strict, "fleet.json"), (_report("board"), "board.json"))
    check_targets(found)
    (row,) = across_machines(FleetReport(models=tuple(m for m, _ in found), seconds=0.0, executor="merge", created="", tool_version=""))
    assert row["build_status"] == "pass"
    with pytest.raises(UsageError, match=r"gates \(float.max_mae\) 0.2 here, 0.5 there"):  # named against the first
        check_targets(_found((loose, "fleet.json"), (strict, "fleet.json"), (_report("board", max_mae=0.2), "board.json")))


def test_targets_merged_without_their_build_must_agree_with_one_another() -> None:
    check_targets(_found((_report("a"), "a.json"), (_report("b"), "b.json"), (_report("c", path="other.pth", checkpoint=SHA_B), "c.json")))
    with pytest.raises(UsageError) as refused:
        check_targets(_found((_report("a"), "a.json"), (_report("b", golden=SHA_B), "b.json")))
    assert str(refused.value).startswith("b.json: m.pth @ b replayed another bundle than the replay on a in a.json: golden manifest sha256")
    assert str(refused.value).endswith("replay one bundle, the build's, on every target and merge those reports")


def test_a_build_of_another_checkpoint_path_binds_nothing() -> None:
    """Another model's build says nothing about this target: it is shown as without its build, as before."""
    check_targets(_found((_report(path="other.pth", checkpoint=SHA_B), "build.json"), (_report("board"), "board.json")))


@given(field=st.sampled_from(["checkpoint", "golden", "max_mae"]), same=st.booleans(), target_first=st.booleans())
def test_any_one_field_changed_is_refused_whatever_the_order_and_nothing_else_is(field: str, same: bool, target_first: bool) -> None:
    change = {} if same else {field: 0.25 if field == "max_mae" else SHA_B}
    build, target = (_report(), "build.json"), (_report("board", **copy.deepcopy(change)), "board.json")
    found = _found(*((target, build) if target_first else (build, target)))
    if same:
        check_targets(found)
        return
    with pytest.raises(UsageError) as refused:
        check_targets(found)
    assert str(refused.value).startswith("board.json: m.pth @ board replayed another bundle than its build in build.json: ")
