"""The names --artifacts takes for a language model (decode/names.py, read without torch) are the kinds' rows (decode/kinds.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from export_check.config import RunConfig
from export_check.decode import goldenset, names
from export_check.decode.kinds import KINDS
from export_check.errors import UsageError


def test_the_names_are_the_kinds_rows_in_order() -> None:
    assert tuple(k.name for k in KINDS) == names.KIND_NAMES


def test_a_generative_set_takes_its_kinds_and_refuses_others_naming_them(tmp_path: Path) -> None:
    (tmp_path / goldenset.MANIFEST).write_text(json.dumps({"format": goldenset.FORMAT}))
    config = RunConfig(checkpoint=tmp_path / "m.pth", arch="m.py:M", golden=tmp_path, out_dir=tmp_path / "out", kinds=("decode-onnx",))
    assert config.kinds == ("decode-onnx",)
    with pytest.raises(UsageError) as refused:
        RunConfig(checkpoint=tmp_path / "m.pth", arch="m.py:M", golden=tmp_path, out_dir=tmp_path / "out", kinds=("decode-onnx", "onnx"))
    assert str(refused.value) == ("unknown language-model kind(s) onnx; a generative golden set is checked with the kinds full-forward, "
                                  "decode-torch-export, decode-onnx, decode-executorch, decode-executorch-runner, decode-torchao-int8, "
                                  "decode-torchao-int4")


def test_a_settings_files_artifacts_may_name_them() -> None:
    from export_check.options import OPTIONS

    check = next(o for o in OPTIONS if o.name == "artifacts").check
    assert check is not None
    check(("decode-onnx", "full-forward"), "pyproject.toml")
    check(("onnx", "modern"), "pyproject.toml")
    with pytest.raises(UsageError, match=r"^pyproject.toml: artifacts must name kinds or groups: unknown artifact kind\(s\) decode-tflite;"):
        check(("decode-onnx", "decode-tflite"), "pyproject.toml")
