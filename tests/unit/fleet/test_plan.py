"""fleet/plan.py: every model of a fleet gets its own config and its own folder under --out."""

from __future__ import annotations

from pathlib import Path

import pytest

from export_check.fleet.plan import out_folder, plan
from export_check.fleet.spec import FleetModel


def test_out_folders_of_a_fleet_never_collide() -> None:
    taken: set[str] = set()
    folders = [out_folder(n, taken) for n in ("a/model.pth", "a-model.pth", "b/model.pth", "///")]
    assert len(set(folders)) == 4 and folders[0] == "a-model.pth" and folders[3] == "model"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / ".git").mkdir()  # the project root: no settings file of the repository around it is read
    (tmp_path / "net.py").write_text("class Net: ...\n")
    for name in ("a.pth", "b.pth"):
        (tmp_path / name).write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def models(root: Path) -> list[FleetModel]:
    return [FleetModel("a", root / "a.pth", {"batch_size": 4}, num_cpus=2.0), FleetModel("b", root / "b.pth", {"out": root / "own"},
                                                                                    resources=(("gpu", 1.0),))]


def test_parallel_models_build_one_artifact_at_a_time_each_in_its_folder(project: Path) -> None:
    common = {"arch": f"{project / 'net.py'}:Net", "out": project / "out"}
    jobs = plan(models(project), common, parallel=True, source=str(project / "fleet.toml"))
    assert [j.name for j in jobs] == ["a", "b"] and [j.config.jobs for j in jobs] == [1, 1]
    assert [j.config.out_dir for j in jobs] == [project / "out" / "a", project / "out" / "b"]  # the command line's --out wins
    assert [j.config.checkpoint for j in jobs] == [project / "a.pth", project / "b.pth"]
    assert jobs[0].config.batch_size == 4 and jobs[1].config.batch_size != 4
    assert (jobs[0].num_cpus, jobs[1].resources) == (2.0, (("gpu", 1.0),))
    assert jobs[0].config.settings_files[0] == str(project / "fleet.toml")


def test_a_models_own_out_stands_and_the_command_lines_jobs_win(project: Path) -> None:
    common = {"arch": f"{project / 'net.py'}:Net", "jobs": 2}
    jobs = plan(models(project), common, parallel=True)
    assert jobs[1].config.out_dir == project / "own" and [j.config.jobs for j in jobs] == [2, 2]
    assert jobs[0].config.out_dir.name == "a" and jobs[0].config.settings_files == ()
    serial = plan(models(project), {"arch": f"{project / 'net.py'}:Net"}, parallel=False)
    assert [j.config.jobs for j in serial] == [None, None]  # one model at a time: its artifacts build by core count
