"""cache/key.py: what the cache key hashes, and that each input changes it."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from export_check.cache.key import FORMAT, arch_source_sha256, local_module_sources, run_key_inputs, tool_source_sha256


def test_a_file_arch_hashes_that_file(tmp_path: Path) -> None:
    source = tmp_path / "net.py"
    source.write_text("class Net: ...\n")
    assert arch_source_sha256(f"{source}:Net") == hashlib.sha256(source.read_bytes()).hexdigest()
    assert arch_source_sha256(f"{tmp_path / 'gone.py'}:Net") == "missing"


def test_a_module_arch_is_found_without_importing_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "pkg_for_key_test"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (package / "nets.py").write_text("class Net: ...\n")
    monkeypatch.chdir(tmp_path.parent)
    assert arch_source_sha256("pkg_for_key_test.nets:Net", tmp_path) == hashlib.sha256(b"class Net: ...\n").hexdigest()
    assert arch_source_sha256("pkg_for_key_test:Net", tmp_path) == hashlib.sha256((package / "__init__.py").read_bytes()).hexdigest()
    assert arch_source_sha256("no_such_module_here:Net", tmp_path) == "unresolved"
    assert "pkg_for_key_test" not in sys.modules


def test_the_tools_own_source_hash_is_stable_hex() -> None:
    first = tool_source_sha256()
    assert first == tool_source_sha256() and len(first) == 64 and int(first, 16) >= 0


def test_local_modules_are_listed_with_their_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    helper = tmp_path / "key_test_helper.py"
    helper.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import key_test_helper  # noqa: F401

    try:
        found = local_module_sources()
        assert found[str(helper.resolve())] == hashlib.sha256(b"VALUE = 1\n").hexdigest()
        assert not any("export_check" in p or "site-packages" in p for p in found) and list(found) == sorted(found)
    finally:
        sys.modules.pop("key_test_helper", None)


def inputs(tmp_path: Path, **changes: object) -> str:
    source = tmp_path / "net.py"
    if not source.exists():
        source.write_text("class Net: ...\n")
    given = dict(checkpoint_sha256="c" * 64, golden_manifest_sha256="g" * 64, arch=f"{source}:Net", arch_kwargs={"width": 2},
                 arch_root=None, export_settings={"opset": 17}, inference_settings={"batch_size": 16})
    given.update(changes)
    return json.dumps(run_key_inputs(**given), sort_keys=True)  # type: ignore[arg-type]


def test_every_input_is_in_the_key(tmp_path: Path) -> None:
    base = inputs(tmp_path)
    assert base == inputs(tmp_path) and json.loads(base)["cache_format"] == FORMAT
    others = [inputs(tmp_path, checkpoint_sha256="d" * 64), inputs(tmp_path, golden_manifest_sha256="h" * 64),
              inputs(tmp_path, arch_kwargs={"width": 3}), inputs(tmp_path, export_settings={"opset": 18}),
              inputs(tmp_path, inference_settings={"batch_size": 8})]
    (tmp_path / "net.py").write_text("class Net: pass\n")  # the same spec, an edited file
    others.append(inputs(tmp_path))
    assert len({base, *others}) == len(others) + 1
