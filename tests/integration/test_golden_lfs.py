"""A Git LFS pointer in place of a golden file (a checkout without `git lfs pull`, issue 16.10): `check`
stops with one line saying so and how to fetch it, `golden verify` lists it as an LFS POINTER, not
as CHANGED, and the JSON report of the exit-2 run carries the same hint."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN
from export_check.cli import main


def _pointer_for(path: Path) -> bytes:
    """The pointer `git lfs` leaves for ``path`` (https://github.com/git-lfs/git-lfs/blob/main/docs/spec.md)."""
    data = path.read_bytes()
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\n"
            f"size {len(data)}\n").encode()


def test_a_git_lfs_pointer_instead_of_a_golden_file_says_to_run_git_lfs_pull(tmp_path: Path, capfd) -> None:
    golden = tmp_path / "golden"
    shutil.copytree(DEFAULT_GOLDEN, golden)
    reference = next(golden.glob("reference-*.npy"))
    size = reference.stat().st_size
    reference.write_bytes(_pointer_for(reference))
    image = sorted((golden / "inputs").iterdir())[0]
    image.write_bytes(_pointer_for(image))

    code = main([str(DEFAULT_CHECKPOINT), "--arch", DEFAULT_ARCH, "--golden", str(golden), "--out", str(tmp_path / "out"), "-q",
                 "--artifacts", "torchscript-trace", "--json", str(tmp_path / "r.json")])
    _, err = capfd.readouterr()
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "is a Git LFS pointer, not the file" in err and "`git lfs pull`" in err
    assert json.loads((tmp_path / "r.json").read_text())["error"]["message"] in err

    code = main(["golden", "verify", str(golden)])
    out, _ = capfd.readouterr()
    assert code == 1
    flagged = [line for line in out.splitlines() if "LFS POINTER" in line]
    assert len(flagged) == 2 and "CHANGED" not in out, out
    reference_line = next(line for line in flagged if reference.name in line)
    assert f"({size:,} bytes, oid " in reference_line and "`git lfs pull`" in reference_line
