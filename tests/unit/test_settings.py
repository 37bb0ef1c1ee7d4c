from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_check.errors import UsageError
from export_check.settings import KEYS, find_settings, parse_settings


def test_relative_paths_are_relative_to_the_settings_file(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()  # the project root: its pyproject.toml is found from a folder below
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.export-check]\narch = "net.py:Net"\ngolden = "gold"\nbatch-size = 4\n'
        '[tool.export-check.arch-kwargs]\nnum_classes = 3\n'
    )
    (tmp_path / "sub").mkdir()
    found = find_settings(None, None, tmp_path / "sub")
    assert found["golden"] == tmp_path / "gold"
    assert found["arch_kwargs"] == {"num_classes": 3}
    assert found["batch_size"] == 4


def test_artifacts_as_one_string_reads_as_the_command_line_does(tmp_path: Path) -> None:
    """``artifacts = "modern"`` and ``"onnx, aoti"`` are the list ``--artifacts`` would give."""
    for text, kinds in (('"modern"', ("modern",)), ('"onnx, aoti"', ("onnx", "aoti")), ('["default", "aoti"]', ("default", "aoti"))):
        (tmp_path / "export-check.toml").write_text(f"artifacts = {text}\n")
        assert find_settings(None, None, tmp_path)["artifacts"] == kinds


def test_export_check_toml_wins_over_pyproject_in_the_same_folder(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.export-check]\narch = "a.py:A"\n')
    (tmp_path / "export-check.toml").write_text('arch = "b.py:B"\n')
    assert find_settings(None, None, tmp_path)["arch"] == f"{tmp_path / 'b.py'}:B"


def test_the_checkpoints_folder_is_no_place_settings_come_from(tmp_path: Path, monkeypatch) -> None:
    """Issue 24: settings beside (or above) the checkpoint are read only when the run stands there."""
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "export-check.toml").write_text('arch = "b.py:B"\n')
    (tmp_path / "pyproject.toml").write_text('[tool.export-check]\narch = "a.py:A"\n')
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")  # no .git above: the current directory alone
    found = find_settings(tmp_path / "ckpt" / "m.pth")
    assert (found["_files"], found["_project"]) == ((), (tmp_path / "work").resolve())
    beside = tmp_path.resolve() / "ckpt" / "export-check.toml"
    assert found["_ignored"] == (f"settings: not read: {beside}, beside the checkpoint (settings come from --config or from the project the "
                                 f"command stands in, {(tmp_path / 'work').resolve()}); pass --config {beside} to use it, or run from its folder",)


@pytest.mark.parametrize(
    "text, match",
    [
        ('[tool.export-check]\narch = 3\n', "arch must be a non-empty string"),
        ('[tool.export-check]\nbatch-size = "8"\n', "batch-size must be an integer"),
        ('[tool.export-check]\nmax-mae = -1\n', "max-mae must be a finite number"),
        ('[tool.export-check]\njobs = 3\n', "jobs must be 1 or 2, got 3"),
        ('[tool.export-check]\njobs = true\n', "jobs must be 1 or 2, got True"),
        ('[tool.export-check]\nbuild-timeout = "1h"\n', "build-timeout must be a finite number >= 0"),
        ('[tool.export-check]\nmax-mea = 1\n', "unknown key 'max-mea'"),
        ('[tool.export-check\n', "not valid TOML"),
        ('[tool.export-check]\nartifacts = []\n', r"artifacts must name kinds or groups, e\.g\. \"modern\" .*, got \[\]"),
        ('[tool.export-check]\nartifacts = " , "\n', "artifacts must name kinds or groups, .* got ' , '"),
        ('[tool.export-check]\nartifacts = ["onnx", "onnx-fp61"]\n', "groups: unknown artifact kind.s. onnx-fp61; choose from the groups"),
        ('[tool.export-check]\nartifacts = "modrn"\n', "artifacts must name kinds or groups: unknown artifact kind.s. modrn"),
    ],
)
def test_bad_settings_name_the_file_and_key(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "pyproject.toml").write_text(text)
    with pytest.raises(UsageError, match=match) as info:
        find_settings(None, None, tmp_path)
    assert str(tmp_path / "pyproject.toml") in str(info.value)


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=500, deadline=None)
@given(table=st.dictionaries(st.sampled_from([*KEYS, "other", ""]), values, max_size=6))
def test_fuzzed_tables_parse_or_fail_with_usage_error(table) -> None:
    try:
        parsed = parse_settings(table, Path("/base"), "pyproject.toml")
    except UsageError as exc:
        assert str(exc).startswith("pyproject.toml") and "\n" not in str(exc)
        return
    assert set(parsed) <= {name for name, _ in KEYS.values()} | {"arch_root"}
    if "arch" in parsed:
        assert parsed["arch_root"] == Path("/base")


def test_a_checkpoint_inside_the_project_gives_its_folders_no_say_and_each_unread_file_is_named(tmp_path: Path) -> None:
    """Issue 47: only the current directory's way up to the project root is read; settings files in the checkpoint's own
    folders (a downloaded model folder inside the project, beside a third-party pyproject.toml) are named, never read."""
    (tmp_path / ".git").mkdir()
    for folder in ("models/a", "src"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text('[tool.export-check]\narch = "root.py:R"\n')
    (tmp_path / "src" / "export-check.toml").write_text('arch = "src.py:S"\n')
    checkpoint = tmp_path / "models" / "a" / "m.pth"
    found = find_settings(checkpoint, None, tmp_path / "src")
    assert found["arch"] == f"{tmp_path / 'src' / 'src.py'}:S" and found["_ignored"] == ()
    (tmp_path / "models" / "export-check.toml").write_text('arch = "m.py:M"\n')
    (tmp_path / "models" / "a" / "pyproject.toml").write_text('[tool.export-check]\narch = "evil.py:E"\n')
    (tmp_path / "models" / "pyproject.toml").write_text('[tool.black]\n')  # another tool's: not ours, not named
    found = find_settings(checkpoint, None, tmp_path / "src")
    assert found["arch"] == f"{tmp_path / 'src' / 'src.py'}:S"
    assert [note.split(",")[0] for note in found["_ignored"]] == [
        f"settings: not read: {tmp_path.resolve() / 'models' / 'a' / 'pyproject.toml'}",
        f"settings: not read: {tmp_path.resolve() / 'models' / 'export-check.toml'}"]
    assert find_settings(checkpoint, None, tmp_path)["arch"] == f"{tmp_path / 'root.py'}:R"
    assert find_settings(checkpoint, None, tmp_path / "models" / "a")["arch"] == f"{tmp_path / 'models' / 'a' / 'evil.py'}:E"  # standing there
