"""Targets files (exporter/fleet/replays.py): a file parses into one replay job per target, relative
bundle paths from the file's folder, or any bad file is one UsageError line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from export_check.cli import main
from export_check.errors import UsageError
from export_check.fleet.replays import parse_targets


def test_a_targets_file_gives_one_job_per_target(tmp_path: Path) -> None:
    path = tmp_path / "lab" / "targets.toml"
    path.parent.mkdir()
    path.write_text('[targets.mac]\nbundle = "m.bundle"\nresources = { macos = 1 }\n[targets.srv]\nbundle = "/abs/s.bundle"\nnum-cpus = 2\n')
    mac, srv = parse_targets(path, tmp_path / "out")
    assert (mac.name, mac.bundle, mac.resources, mac.num_cpus, mac.out_dir) == ("mac", path.parent / "m.bundle", (("macos", 1.0),), 1.0,
                                                                              tmp_path / "out" / "mac")
    assert (srv.bundle, srv.num_cpus, srv.resources) == (Path("/abs/s.bundle"), 2.0, ())


@pytest.mark.parametrize("text, message", [
    ("", "none found"),
    ("[models.a]\ncheckpoint = 'a.pth'\n", "unknown table 'models'"),
    ("[targets.a]\n", "bundle must be the path of a bundle"),
    ("[targets.a]\nbundle = 'a'\nresources = 3\n", "resources must be a table"),
    ("[targets.a]\nbundle = 'a'\nnum-cpus = -1\n", "num-cpus must be a finite number >= 0"),
    ("[targets.a]\nbundle = 'a'\ngpu = 1\n", "unknown key 'gpu'"),
])
def test_a_bad_targets_file_is_one_line_naming_it(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message) as refused:
        parse_targets(path, tmp_path)
    assert str(path) in str(refused.value) and "\n" not in str(refused.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=120))
def test_any_text_is_targets_or_one_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "any.toml"
    path.write_bytes(text.encode("utf-8", "replace"))
    try:
        jobs = parse_targets(path, tmp_path)
    except UsageError as exc:
        assert "\n" not in str(exc)
    else:
        assert jobs and all(job.bundle.is_absolute() for job in jobs)


def test_replay_takes_one_bundle_or_a_targets_file(tmp_path: Path, capsys) -> None:
    assert main(["replay"]) == 2
    assert "name one bundle, or a targets file" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "a.bundle"), "--ray"]) == 2
    assert "--ray runs the targets of a targets file" in capsys.readouterr().err
