"""The kind-row contract: every row of the artifact table states every fact about its kind, and
everything the tool knows about kinds is read off the rows (issue 26: a kind is one module and one row)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import re
from pathlib import Path

import pytest

from export_check.artifacts import BUILD_ORDER, GROUP_NAMES, GROUPS, KIND_NAMES, KINDS, KINDS_BY_NAME, PRELOAD
from export_check.artifacts.base import KIND_FACTS, ArtifactKind
from export_check.artifacts.runtimes import RUNTIME_MODULES
from export_check.builder import protocol
from export_check.config import RunConfig
from export_check.diagnostics.layers import method
from export_check.gates import FAMILIES
from export_check.options import OPTIONS

ROOT = Path(__file__).resolve().parents[3]


def test_a_row_that_leaves_out_a_fact_is_refused() -> None:
    fields = {f.name: f for f in dataclasses.fields(ArtifactKind)}
    for fact in KIND_FACTS:  # no default: the table cannot forget one
        assert fields[fact].default is dataclasses.MISSING and fields[fact].default_factory is dataclasses.MISSING, fact
    row = {f.name: getattr(KINDS[0], f.name) for f in dataclasses.fields(ArtifactKind)}
    for fact in KIND_FACTS:
        with pytest.raises(TypeError, match=fact):
            ArtifactKind(**{k: v for k, v in row.items() if k != fact})


@pytest.mark.parametrize("kind", KINDS, ids=KIND_NAMES)
def test_every_row_states_every_fact(kind: ArtifactKind) -> None:
    assert kind.family in FAMILIES
    assert re.fullmatch(r"\.[a-z0-9]+", kind.suffix)
    assert kind.runtime in RUNTIME_MODULES, "a replay knows what the runtime needs"
    assert isinstance(kind.build_rank, int) and [k.build_rank for k in KINDS].count(kind.build_rank) == 1, "one rank per kind"
    assert set(kind.groups) <= set(GROUP_NAMES) - {"all"}
    assert kind.packages and "torch" in kind.packages and all(re.fullmatch(r"[a-z0-9][a-z0-9._-]*", p) for p in kind.packages)
    assert kind.layers is None or callable(method(kind.layers)), "the per-layer method it names is a module of diagnostics/layers/"
    if all(_installed(package) for package in kind.packages):  # litert's live in an environment of their own (tox -e litert)
        for entry in kind.preload:  # a module, or module:function (a warm-up the build server runs once)
            module, _, function = entry.partition(":")
            assert importlib.util.find_spec(module.partition(".")[0]) is not None, f"preload names an importable module: {entry}"
            assert not function or callable(getattr(importlib.import_module(module), function, None)), f"no such warm-up: {entry}"
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    settable = {o.field for o in OPTIONS}
    assert set(kind.options) <= fields & settable, "options are run settings a user can set"
    assert importlib.util.find_spec(kind.module) is not None
    if kind.source is not None:  # a derived kind: after its source, running its source's packages, reading its settings
        source = KINDS_BY_NAME[kind.source]
        assert source.build_rank < kind.build_rank
        assert set(source.packages) <= set(kind.packages) and set(source.options) <= set(kind.options)


def test_what_the_tool_knows_about_kinds_is_read_off_the_rows() -> None:
    assert [k.name for k in BUILD_ORDER] == [k.name for k in sorted(KINDS, key=lambda k: k.build_rank)]
    assert GROUPS["all"] == KIND_NAMES
    for group in GROUP_NAMES[:-1]:
        assert GROUPS[group] == tuple(k.name for k in KINDS if group in k.groups)
    # every run's idle preload is the default kinds' own; the others' are imported when a run builds them (server._import_for)
    assert protocol.PRELOAD == PRELOAD == tuple(dict.fromkeys(m for k in BUILD_ORDER if "default" in k.groups for m in k.preload))
    assert "executorch.runtime" not in PRELOAD and "executorch.runtime" in KINDS_BY_NAME["executorch"].preload
    assert PRELOAD[0] == "torch", "the build server imports torch first"


def test_every_kind_has_its_documented_line_and_a_test_of_its_own() -> None:
    # the account of each kind (the reference page's table is generated from KINDS: tests/integration/test_docs.py)
    readme = (ROOT / "docs" / "explanation" / "artifacts-and-gates.md").read_text(encoding="utf-8")
    tests = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("test_*.py") if p.name != Path(__file__).name)
    for kind in KINDS:
        line = next((row for row in readme.splitlines() if row.startswith(f"| `{kind.name}` |")), None)
        assert line is not None, f"docs/explanation/artifacts-and-gates.md's kind table has no line for {kind.name}"
        assert kind.suffix in line
        assert f'"{kind.name}"' in tests, f"no test names {kind.name}"


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
