"""fleet/placement.py: what this machine offers a job run without Ray, and the one rule that a job needing
more is not run (the Ray executor applies the same rule to a cluster's resources)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from export_check.fleet.placement import machine_resources, unmet, unplaceable_here, unplaceable_result
from export_check.fleet.replays import ReplayJob


def test_this_machine_offers_its_cores_and_its_system_and_nothing_it_cannot_vouch_for() -> None:
    offered = machine_resources()
    assert offered["CPU"] == len(os.sched_getaffinity(0))
    assert offered[{"Darwin": "macos"}.get(platform.system(), platform.system().lower())] == 1.0
    assert "gpu" not in offered and "lab_board" not in offered and "GPU" not in offered


def test_a_job_needing_more_than_is_offered_is_named_with_what_it_lacks() -> None:
    offered = {"CPU": 2.0, "linux": 1.0}
    assert unmet(2.0, (("linux", 1.0),), offered) == []
    assert unmet(3.0, (("linux", 1.0), ("macos", 1.0), ("lab_board", 0.5)), offered) == ["CPU=3", "macos=1", "lab_board=0.5"]


def test_a_target_this_machine_cannot_serve_is_an_error_row_of_exit_1(tmp_path: Path) -> None:
    job = ReplayJob(name="board", bundle=tmp_path / "m.bundle", out_dir=tmp_path, resources=(("lab_board", 1.0),))
    reason = unplaceable_here(job)
    assert reason is not None and reason.startswith("needs lab_board=1, which this machine does not offer (it has CPU=")
    row = unplaceable_result(job, reason)
    assert (row.status, row.exit_code, row.error_kind, row.report) == ("error", 1, "unplaceable", None)
    assert unplaceable_here(ReplayJob(name="here", bundle=tmp_path / "m.bundle", out_dir=tmp_path)) is None
