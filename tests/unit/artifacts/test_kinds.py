"""The kind-row contract: every row of the artifact table states every fact about its kind, and
everything the tool knows about kinds is read off the rows (issue 26: a kind is one module and one row)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from conftest import docs_script
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


def _gen_reference() -> ModuleType:
    """docs/gen_reference.py, the MkDocs hook that generates the kind table of docs/explanation/artifacts-and-gates.md."""
    return docs_script("gen_reference")


def account_problems(kind: ArtifactKind, account: str | None) -> list[str]:
    """What is wrong with ``kind``'s account (``ACCOUNTS[kind.name]`` in its module, its "what it is" on the docs page):
    none, more than one paragraph, or naming what is not so: an extra pyproject.toml has not, an option that does not
    exist, a source file that is not its row's source, a gate whose numbers are not that family's default, calibration
    its row does not say."""
    if not account or not account.strip():
        return [f"{kind.name}: no account: add ACCOUNTS = {{{kind.name!r}: ...}} to {kind.module}"]
    problems = [f"{kind.name}: one paragraph, one line of the table"] if "\n\n" in account else []
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    problems += [f"{kind.name}: no extra [{e}]" for e in re.findall(r"`\[([^]`]+)\]`", account) if e not in extras]
    names = {o.name for o in OPTIONS}
    problems += [f"{kind.name}: no option --{o}" for o in re.findall(r"`--([a-z0-9-]+)`", account) if o not in names]
    problems += [f"{kind.name}: built from {kind.source}, not {s}" for s in re.findall(r"the `([a-z0-9-]+)` file", account) if s != kind.source]
    for gate in re.finditer(r"`([a-z0-9]+)` gate: ", account):
        family = FAMILIES.get(gate.group(1))
        words = _gen_reference().gate_words(family.default) if family else ""
        if not family or not account[gate.end():].startswith(words):
            problems.append(f"{kind.name}: the {gate.group(1)} gate is {words or 'no family'}")
    if ("calibrat" in account) != kind.calibrated:
        problems.append(f"{kind.name}: calibrated={kind.calibrated}, its account says otherwise")
    return problems


def test_every_kind_has_its_documented_line_and_a_test_of_its_own() -> None:
    """A kind's account lives in its module; the kind table of docs/explanation/artifacts-and-gates.md is generated from
    it and the row (its reference page's table too: tests/integration/test_docs.py); and a test names the kind."""
    gen_reference = _gen_reference()
    table = gen_reference.kind_accounts().splitlines()
    tests = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("test_*.py") if p.name != Path(__file__).name)
    assert table[0] == "| row | file | what it is | gate (default) | needs | group |" and table[2].startswith("| `eager` |")
    assert [row.split(" | ")[0] for row in table[3:]] == [f"| `{kind.name}`" for kind in KINDS]
    for kind, line in zip(KINDS, table[3:], strict=True):
        account = gen_reference.account(kind)
        assert account_problems(kind, account) == []
        cells = line.split(" | ")
        assert cells[1] == f"`{kind.suffix}`" and cells[2] == account.replace("|", "\\|")
        assert cells[3].startswith(gen_reference.gate_words(FAMILIES[kind.family].default))
        assert f'"{kind.name}"' in tests, f"no test names {kind.name}"


def test_a_kind_without_an_account_or_with_a_stale_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The contract can fail: a new kind whose module has no account for it (the docs build fails too), and accounts
    that name what is not so."""
    import export_check.artifacts

    gen_reference = _gen_reference()
    newcomer = dataclasses.replace(KINDS_BY_NAME["onnx-fp16"], name="onnx-fp8")  # its module holds no account for it
    assert gen_reference.account(newcomer) is None
    assert account_problems(newcomer, None) == ["onnx-fp8: no account: add ACCOUNTS = {'onnx-fp8': ...} to export_check.artifacts.onnx_fp16"]
    monkeypatch.setattr(export_check.artifacts, "KINDS", (*KINDS, newcomer))
    with pytest.raises(ValueError, match="export_check.artifacts.onnx_fp16 holds no account of the kind onnx-fp8"):
        gen_reference.kind_accounts()
    no_module = dataclasses.replace(KINDS_BY_NAME["onnx"], module="export_check.artifacts.base")  # a module with no ACCOUNTS
    assert gen_reference.account(no_module) is None
    onnx_fp16 = KINDS_BY_NAME["onnx-fp16"]
    assert account_problems(onnx_fp16, "the `onnx-dynamo` file in float16, set by `--fp16-level`; needs onnxconverter (`[fp16]`); "
                            "the `fp16` gate: relative MAE ≤ 3%; calibrated on nothing\n\nmore") == [
        "onnx-fp16: one paragraph, one line of the table", "onnx-fp16: no extra [fp16]", "onnx-fp16: no option --fp16-level",
        "onnx-fp16: built from onnx, not onnx-dynamo",
        "onnx-fp16: the fp16 gate is relative MAE ≤ 1% **and** top-1 agreement ≥ 99%",
        "onnx-fp16: calibrated=False, its account says otherwise"]
    assert account_problems(onnx_fp16, gen_reference.account(onnx_fp16)) == []


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
