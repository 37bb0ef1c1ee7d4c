"""Issue 24, item 7: the cache key holds the version of every library a selected kind uses, read from
one place (``ArtifactKind.packages``, a field of each row of the KINDS table), and the cache is best
effort: with no cache key or cache folder possible (an unwritable home) the check runs without the
cache and says so in one line, instead of refusing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN
from export_check.artifacts import KINDS, KINDS_BY_NAME
from export_check.cache import store
from export_check.cache.secret import load_key
from export_check.cli import main
from export_check.versions import BASE, library_versions

KIND = "torchscript-trace"
# the runtimes the issue found missing from the key, by the kinds that use them
RUNTIMES = {"onnxscript": ("onnx-dynamo", "onnx-dynamo-simplified", "onnx-dynamo-int8-dynamic", "onnx-dynamo-int8-static"),
            "torchao": ("torchao-int8-dynamic", "pt2e-int8-static"), "openvino": ("openvino", "openvino-f32"),
            "executorch": ("executorch", "executorch-int8")}


def test_every_kind_declares_its_runtime_packages_in_its_row() -> None:
    for kind in KINDS:
        assert "torch" in kind.packages, kind.name  # every kind is exported from the torch model
        assert len(set(kind.packages)) == len(kind.packages), kind.name
        if kind.source is not None:
            assert set(KINDS_BY_NAME[kind.source].packages) <= set(kind.packages), kind.name
        if kind.runtime == "onnxruntime":
            assert {"onnx", "onnxruntime"} <= set(kind.packages), kind.name
    for package, kinds in RUNTIMES.items():
        assert {k.name for k in KINDS if package in k.packages} >= set(kinds), package
    assert "onnxsim" in KINDS_BY_NAME["onnx-simplified"].packages and "onnxsim" in KINDS_BY_NAME["onnx-dynamo-simplified"].packages


def test_the_report_records_the_versions_of_the_selected_kinds_packages() -> None:
    assert set(library_versions([KIND])) == {"python", "platform", *BASE}
    dynamo = library_versions(["onnx-dynamo"])
    assert {"onnxscript", "onnx-ir", "onnx", "onnxruntime"} <= set(dynamo) and dynamo["onnxscript"] != "not installed"
    assert {"torchao", "openvino"} <= set(library_versions(["torchao-int8-dynamic", "openvino"]))


def _cache(tmp_path: Path) -> store.ArtifactCache:
    return store.ArtifactCache(tmp_path / "cache", {"k": 1}, load_key(tmp_path / "cache"))


@pytest.mark.parametrize("package", sorted(RUNTIMES))
def test_upgrading_a_kinds_runtime_misses_that_kinds_entries_only(tmp_path: Path, monkeypatch, package: str) -> None:
    before = {name: _cache(tmp_path).entry_key(name) for name in ("eager", *(k.name for k in KINDS))}
    real = store.package_version
    monkeypatch.setattr(store, "package_version", lambda name: "99.0" if name == package else real(name))
    after = {name: _cache(tmp_path).entry_key(name) for name in before}
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {k.name for k in KINDS if package in k.packages} and set(RUNTIMES[package]) <= changed


def _run(tmp_path: Path, name: str) -> tuple[int, dict]:
    report = tmp_path / f"{name}.json"
    code = main(["check", str(DEFAULT_CHECKPOINT), "--arch", DEFAULT_ARCH, "--golden", str(DEFAULT_GOLDEN), "--artifacts", KIND,
                 "--out", str(tmp_path / "out"), "--json", str(report), "-q"])
    return code, json.loads(report.read_text())


def test_a_run_is_served_from_the_cache_until_a_package_its_kind_uses_changes(tmp_path: Path, monkeypatch, capsys) -> None:
    assert _run(tmp_path, "cold")[0] == 0
    real = store.package_version
    monkeypatch.setattr(store, "package_version", lambda name: "99.0" if name == "onnxscript" else real(name))
    code, warm = _run(tmp_path, "warm")  # onnxscript upgraded: torchscript-trace does not use it
    assert code == 0 and {r["cache"] for r in warm["rows"]} == {"hit"}
    assert "onnxscript" not in warm["versions"] and "torch" in warm["versions"]
    monkeypatch.setattr(store, "package_version", lambda name: "99.0" if name == "torch" else real(name))
    code, upgraded = _run(tmp_path, "torch")  # torch upgraded: the kind's entry is a miss, built again
    assert code == 0 and next(r for r in upgraded["rows"] if r["name"] == KIND)["cache"] == "miss"
    capsys.readouterr()


@pytest.mark.parametrize("blocked", ["XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HOME"])
def test_an_unwritable_home_runs_without_the_cache_and_says_so_once(tmp_path: Path, monkeypatch, capsys, blocked: str) -> None:
    """A folder that cannot be made (below a file: unwritable for root too) where the key or the cache
    would go: the check passes, one line says the cache was not used, the report records it."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    if blocked == "HOME":
        monkeypatch.delenv("XDG_CONFIG_HOME")
        monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv(blocked, str(blocker))
    code, report = _run(tmp_path, "r")
    out = capsys.readouterr().out.splitlines()
    said = [line for line in out if line.startswith("cache: not used by this run: ")]
    assert code == 0 and len(said) == 1 and str(blocker) in said[0], out
    assert report["run_notes"] == [said[0]] and {r["cache"] for r in report["rows"]} == {None}
    assert report["passed"] is True


def test_every_library_a_kinds_module_imports_is_declared_in_its_row() -> None:
    """The contract behind the field: whatever third-party package a kind's module imports (at the top
    or inside a function) is one of the distributions its row declares, so none is left out of the key."""
    import ast
    import sys
    from importlib import import_module, metadata

    by_import = metadata.packages_distributions()
    for kind in KINDS:
        path = Path(import_module(kind.module.rsplit(".", 1)[0]).__file__ or "").parent / f"{kind.module.rsplit('.', 1)[1]}.py"
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
        third_party = {d.lower() for name in imported - set(sys.stdlib_module_names) for d in by_import.get(name, ())}
        assert third_party - {"numpy"} <= set(kind.packages), (kind.name, third_party)


def test_a_read_only_cache_folder_serves_nothing_stores_nothing_and_says_so_once(tmp_path: Path, monkeypatch, capsys) -> None:
    """A cache folder on a read-only filesystem (a CI cache mounted read-only): the check passes and
    one line says what could not be stored; the rows still carry why."""
    from conftest import mounted_tmpfs

    with mounted_tmpfs(tmp_path / "ro-cache", "ro,size=64k", "test_an_unwritable_home_runs_without_the_cache_and_says_so_once") as ro:
        report = tmp_path / "r.json"
        code = main(["check", str(DEFAULT_CHECKPOINT), "--arch", DEFAULT_ARCH, "--golden", str(DEFAULT_GOLDEN), "--artifacts", KIND,
                     "--out", str(tmp_path / "out"), "--json", str(report), "-q", "--cache-dir", str(ro)])
    out = capsys.readouterr().out.splitlines()
    said = [line for line in out if line.startswith("cache: ")]
    data = json.loads(report.read_text())
    assert code == 0 and data["passed"] is True
    assert len(said) == 1 and said[0].startswith("cache: 2 entries not stored: could not store the entry in ") and "Read-only" in said[0]
    assert data["run_notes"] == said
