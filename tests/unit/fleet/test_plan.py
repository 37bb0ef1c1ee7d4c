"""fleet/plan.py: where each model of a fleet writes."""

from __future__ import annotations

from export_check.fleet.plan import out_folder


def test_out_folders_of_a_fleet_never_collide() -> None:
    taken: set[str] = set()
    folders = [out_folder(n, taken) for n in ("a/model.pth", "a-model.pth", "b/model.pth", "///")]
    assert len(set(folders)) == 4 and folders[0] == "a-model.pth" and folders[3] == "model"
