"""The one table of options (exporter/options.py): its rows against RunConfig and the parser, the
settings files it validates, and the overlay the CLI and the pytest plugin share."""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from export_check import options
from export_check.artifacts import KIND_NAMES
from export_check.cli import build_config, build_parser
from export_check.config import RunConfig, default_cache_dir
from export_check.errors import UsageError
from export_check.gates import GATE_OPTIONS
from export_check.options import CHECK, COMMANDS, OPTIONS, SETTINGS, for_command
from export_check.pytest_plugin import run_config
from export_check.settings import golden_params, parse_settings

# RunConfig fields no option sets directly: arch_root goes with arch (the folder of the settings file
# that named it); thresholds are set by the gate rows; signature_settings by the settings-only
# model-inputs and outputs tables; settings_files by the lookup that found them (issue 24), settings_ignored
# by the same lookup (the files beside the checkpoint it did not read, issue 47); decode_gates by the language model's
# gate rows (issue 45, decode/gates.py OPTIONS).
DERIVED = {"arch_root", "thresholds", "signature_settings", "settings_files", "settings_ignored", "decode_gates",
           "language", "generation_gates"}  # language, generation_gates: made on construction (the set read, the bounds checked)


def test_every_user_settable_runconfig_field_has_exactly_one_row() -> None:
    settable = {f.name for f in fields(RunConfig)} - DERIVED
    counts = Counter(o.field for o in OPTIONS if o.field)
    assert set(counts) == settable
    assert all(n == 1 for n in counts.values()), counts
    assert Counter(o.gate for o in OPTIONS if o.gate) == Counter(GATE_OPTIONS)
    assert all(CHECK in o.commands for o in OPTIONS if o.field or o.gate)


def test_rows_are_unique_per_command_and_name_real_commands() -> None:
    for command in COMMANDS:
        rows = for_command(command)
        assert len({o.name for o in rows}) == len(rows), command
        assert len({o.python for o in rows}) == len(rows), command
    assert all(set(o.commands) <= set(COMMANDS) for o in OPTIONS)
    assert all(o.commands or o.settings for o in OPTIONS), "a row neither a flag nor a settings key"
    assert sorted(o.name for o in SETTINGS.values() if o.kind == "switch") == ["markdown-append", "strict"]  # true or false in a settings file


def test_settings_keys_are_the_ones_settings_files_have_always_had() -> None:
    """None of them goes (a settings file that sets it would stop working), and a key beyond them is a gate option read off
    the gates' table (a new gate metric's, one per family: gates.GATE_METRICS), never one added elsewhere unpinned."""
    assert set(SETTINGS) >= PINNED_SETTINGS, sorted(PINNED_SETTINGS - set(SETTINGS))
    assert set(SETTINGS) - PINNED_SETTINGS <= {o.name for o in GATE_OPTIONS}, sorted(set(SETTINGS) - PINNED_SETTINGS)


PINNED_SETTINGS = {
    "strict", "markdown-append",  # issue 16.2: append the Markdown summary
    "onnx-fp16-optimization",  # issue 13.4: the level the onnx-fp16 row loads at (the ViT crashes onnxruntime at all)
    "arch", "arch-kwargs", "golden", "inputs", "out", "artifacts", "batch-size", "threads", "jobs", "build-timeout",
    "opset", "onnx-exporter", "max-mae", "int8-max-relative-mae", "int8-max-mae", "int8-min-top1", "preprocess", "cache-dir", "cache-max-size",
    "model-inputs", "outputs",  # golden format 2: [tool.export-check.model-inputs.NAME], [tool.export-check.outputs.NAME]
    "fp16-max-relative-mae", "fp16-max-mae", "fp16-min-top1",  # the fp16 gate family (onnx-fp16, openvino)
    # bounds on every value beside MAE, per family (issue 16.5): max-abs and numpy.allclose's atol/rtol
    "max-abs", "atol", "rtol", "int8-max-abs", "int8-atol", "int8-rtol", "fp16-max-abs", "fp16-atol", "fp16-rtol",
    "diagnostics-budget",  # issue 15: the diagnostics' share of a row's replay
    # issue 23: the bf16 gate family (openvino on a CPU with avx512_bf16 or AMX)
    "bf16-max-relative-mae", "bf16-max-mae", "bf16-min-top1", "bf16-max-abs", "bf16-atol", "bf16-rtol",
    # issue 30: the similarity gates, per family (gates.GATE_METRICS)
    *(f"{prefix}{stem}" for prefix in ("", "int8-", "fp16-", "bf16-") for stem in ("min-cosine", "min-snr")),
    # issue 30.1: the label-accuracy gate, per family
    *(f"{prefix}{stem}" for prefix in ("", "int8-", "fp16-", "bf16-") for stem in ("max-accuracy-drop", "min-topk", "top-k")),
    # issue 25.6: the character error rate of CTC outputs, per family
    *(f"{prefix}max-cer" for prefix in ("", "int8-", "fp16-", "bf16-")),
    # issue 45: a language model's weight-only gates
    "int8-weight-max-kl", "int8-weight-min-top1", "int4-weight-max-kl", "int4-weight-min-top1",
}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sub
                found.update({f"{name} {k}": v for k, v in _subparsers(sub).items()})
    return found


def test_each_subcommand_has_exactly_its_rows_as_arguments_with_their_help(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "2000")  # no wrapping: each help text is whole in --help
    subs = _subparsers(build_parser())
    for command in COMMANDS:
        actions = [a for a in subs[command]._actions if not isinstance(a, argparse._HelpAction)]
        rows = for_command(command)
        assert [a.dest for a in actions] == [o.python for o in rows], command
        for action, row in zip(actions, rows, strict=True):
            assert action.help == row.help_text()
            if not row.positional:
                assert f"--{row.name}" in action.option_strings
            if row.settings:  # so that the overlay can tell "not given" (a switch: not set)
                assert action.default is (False if row.kind == "switch" else None)
        text = " ".join(subs[command].format_help().split())
        assert all(" ".join(row.help_text().split()) in text for row in rows)


def test_help_shows_the_real_defaults() -> None:
    rows = {o.name: o for o in for_command(CHECK)}
    assert "(default: 16)" in rows["batch-size"].help_text()
    assert "(default: 1800; 0: no limit)" in rows["build-timeout"].help_text()
    assert "(default: torchscript;" in rows["onnx-exporter"].help_text()
    assert all("{default}" not in o.help_text() for o in OPTIONS)


def test_defaults_are_runconfigs_own(tmp_path: Path) -> None:
    values = options.overlay(CHECK, {"checkpoint": tmp_path / "m.pth", "arch": "m:F"}, {})
    config = options.to_run_config(values)
    plain = RunConfig(checkpoint=tmp_path / "m.pth", arch="m:F", golden=Path("golden"), out_dir=Path("export-check-out"),
                      cache_dir=default_cache_dir())
    assert config == plain


def test_overlay_explicit_over_settings_over_default(tmp_path: Path) -> None:
    ckpt = tmp_path / "m.pth"
    base = {"checkpoint": ckpt}
    assert options.overlay(CHECK, base, {})["batch_size"] == 16
    assert options.overlay(CHECK, base, {"batch_size": 4})["batch_size"] == 4
    assert options.overlay(CHECK, {**base, "batch_size": 2}, {"batch_size": 4})["batch_size"] == 2
    from_file = {"arch": "/p/net.py:Net", "arch_root": Path("/p")}
    assert options.overlay(CHECK, base, from_file)["arch_root"] == Path("/p")
    assert options.overlay(CHECK, {**base, "arch": "m:F"}, from_file)["arch_root"] is None
    assert options.overlay(CHECK, base, {}, {"out": lambda: tmp_path / "private"})["out"] == tmp_path / "private"
    assert options.overlay(CHECK, base, {"out": Path("/o")}, {"out": lambda: tmp_path / "private"})["out"] == Path("/o")


# --- settings files ------------------------------------------------------------------------------

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10) | st.datetimes() | st.dates(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
KEYS = [*SETTINGS, *(o.name for o in OPTIONS if not o.settings), "other", "", "batch_size"]


@settings(max_examples=500, deadline=None)
@given(table=st.dictionaries(st.sampled_from(KEYS), values, max_size=6))
def test_random_settings_tables_validate_or_fail_with_one_line_naming_the_key(table) -> None:
    try:
        parsed = parse_settings(table, Path("/base"), "pyproject.toml")
    except UsageError as exc:
        message = str(exc)
        assert message.startswith("pyproject.toml: ") and "\n" not in message
        # the first key that is wrong on its own is the one named
        for key, value in table.items():
            try:
                parse_settings({key: value}, Path("/base"), "pyproject.toml")
            except UsageError as alone:
                assert str(alone) == message
                # a table of tables (model-inputs, outputs) names the key inside it: "pyproject.toml: outputs.boxes.kind must"
                assert (message.startswith(f"pyproject.toml: {key} must") or f"unknown key {key!r}" in message
                        or message.startswith(f"pyproject.toml: {key}."))
                return
        raise AssertionError(f"no key of {table!r} fails alone, yet the table fails: {message}") from None
    kinds = {o.python: o.kind for o in SETTINGS.values()}
    assert set(parsed) <= set(kinds) | {"arch_root"}
    for name, value in parsed.items():
        expected = {"str": str, "path": Path, "int": int, "jobs": int, "float": float, "strlist": tuple, "table": dict, "switch": bool}
        assert isinstance(value, Path if name == "arch_root" else expected[kinds[name]]), (name, value)


# --- the CLI and the plugin: the same options give the same RunConfig -----------------------------

paths = st.sampled_from(["g", "sub/dir", "/abs/golden", "a b"])
floats = st.sampled_from([0.0, 1e-5, 1e-4, 0.5, 0.98, 1.0, 2.0, -1.0, 1800.0])
OPTION_VALUES = {
    "arch": st.sampled_from(["m:F", "pkg.mod:Net", "net.py:Net", ""]),
    "arch_kwargs": st.dictionaries(st.sampled_from(["width", "num_classes", "x"]), st.integers(0, 9) | st.text(max_size=3), max_size=2),
    "golden": paths,
    "out": paths,
    "artifacts": st.lists(st.sampled_from(KIND_NAMES), min_size=1, max_size=3),
    "max_mae": floats,
    "int8_max_mae": floats,
    "int8_max_relative_mae": floats,
    "int8_min_top1": floats,
    "batch_size": st.integers(-1, 64),
    "threads": st.integers(0, 4),
    "opset": st.integers(6, 20),
    "onnx_exporter": st.sampled_from(["torchscript", "dynamo"]),
    "cache_dir": paths,
    "no_cache": st.booleans(),
    "jobs": st.sampled_from([1, 2]),
    "build_timeout": floats,
    "diagnose": st.booleans(),
}
SETTING_VALUES = {  # what a settings file beside the checkpoint may say, as TOML text
    "arch": st.sampled_from(['"net.py:Net"', '"pkg.mod:Net"']),
    "batch-size": st.sampled_from(["4", "8"]),
    "artifacts": st.sampled_from(['["onnx"]', '["torchscript-trace", "onnx"]', "[]"]),
    "max-mae": st.sampled_from(["0.001", "0"]),
    "golden": st.sampled_from(['"gold"', '"/abs/gold"']),
    "out": st.sampled_from(['"out"']),
    "cache-dir": st.sampled_from(['"c"']),
    "jobs": st.sampled_from(["1", "2"]),
    "arch-kwargs": st.sampled_from(["{ width = 8 }", "{}"]),
}


def _argv(name: str, value: object) -> list[str]:
    flag = f"--{name.replace('_', '-')}"
    if isinstance(value, bool):
        return [flag] if value else []
    if name == "artifacts":
        return [flag, ",".join(value)]
    if name == "arch_kwargs":
        return [flag, json.dumps(value)]
    return [flag, repr(value) if isinstance(value, float) else str(value)]


def _both(checkpoint: Path, chosen: dict[str, object]) -> tuple[object, object]:
    results = []
    argv = ["check", str(checkpoint), *(part for name, value in chosen.items() for part in _argv(name, value))]
    keywords = {name: Path(v) if name in ("golden", "out", "cache_dir") else v for name, v in chosen.items()}
    for build in (lambda: build_config(build_parser().parse_args(argv)), lambda: run_config(checkpoint, keywords)[0]):
        try:
            results.append(build())
        except UsageError:
            results.append(UsageError)
    return results[0], results[1]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chosen=st.fixed_dictionaries({}, optional=OPTION_VALUES), in_file=st.fixed_dictionaries({}, optional=SETTING_VALUES))
def test_cli_and_plugin_give_identical_runconfigs(tmp_path: Path, monkeypatch, chosen, in_file) -> None:
    monkeypatch.chdir(tmp_path)
    checkpoint = tmp_path / "m.pth"
    checkpoint.write_bytes(b"x")
    # the file beside the checkpoint wins, so no pyproject.toml above tmp_path is read
    (tmp_path / "export-check.toml").write_text("".join(f"{k} = {v}\n" for k, v in in_file.items()))
    cli, plugin = _both(checkpoint, chosen)
    assert cli == plugin, (chosen, in_file)
    if cli is not UsageError and not chosen.get("no_cache") and "cache_dir" not in chosen and "cache-dir" not in in_file:
        assert cli.cache_dir == default_cache_dir()


def test_cli_and_plugin_agree_on_a_full_set(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    checkpoint = tmp_path / "m.pth"
    checkpoint.write_bytes(b"x")
    (tmp_path / "export-check.toml").write_text('arch = "net.py:Net"\nbatch-size = 4\nartifacts = ["onnx"]\n')
    chosen = {"arch_kwargs": {"width": 8}, "golden": "g", "artifacts": ["onnx", "torchscript-trace"], "max_mae": 1e-4,
              "int8_min_top1": 0.5, "threads": 2, "opset": 18, "jobs": 1, "build_timeout": 5.0, "diagnose": True}
    cli, plugin = _both(checkpoint, chosen)
    assert isinstance(cli, RunConfig) and cli == plugin
    assert cli.arch == f"{tmp_path / 'net.py'}:Net" and cli.arch_root == tmp_path and cli.batch_size == 4
    assert cli.kinds == ("onnx", "torchscript-trace") and cli.thresholds.gate_for("eager").max_mae == 1e-4


# --- the plugin's keywords ---------------------------------------------------------------------------


@pytest.fixture
def checkpoint(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "export-check.toml").write_text("")
    path = tmp_path / "m.pth"
    path.write_bytes(b"x")
    return path


@pytest.mark.parametrize("keywords, message", [
    ({"foo": 1}, "export-check: unrecognized arguments: --foo 1 (see export-check --help)"),
    ({"inputs": "photos"}, "unrecognized arguments: --inputs photos"),  # golden record's, not check's
    ({"checkpoint": "other.pth"}, "unrecognized arguments: --checkpoint other.pth"),
    ({"max": 1.0}, "unrecognized arguments: --max 1.0"),  # no abbreviations
    ({"batch_size": 8.0}, "option batch_size must be an integer, got 8.0"),
    ({"batch_size": "many"}, "option batch_size must be an integer, got 'many'"),
    ({"opset": True}, "option opset must be an integer, got True"),
    ({"jobs": 3}, "option jobs must be 1 or 2, got 3"),
    ({"onnx_exporter": "x"}, "option onnx_exporter must be one of torchscript, dynamo, got 'x'"),
    ({"no_cache": "yes"}, "option no_cache is a switch"),
    ({"arch_kwargs": {"p": Path("x")}}, "option arch_kwargs must hold JSON data only"),
    ({"arch_kwargs": "{oops"}, "--arch-kwargs is not valid JSON"),
    ({"artifacts": []}, "--artifacts is empty"),
    ({"artifacts": [1]}, "option artifacts must be a list of strings"),
    ({"max_mae": math.nan}, "option max_mae must be a finite number >= 0, got nan"),
    ({"max_mae": "nan"}, "max MAE must be a finite number >= 0, got nan"),  # text, read as --max-mae nan is
])
def test_bad_keywords_are_one_usage_error(checkpoint: Path, keywords: dict, message: str) -> None:
    with pytest.raises(UsageError) as info:
        run_config(checkpoint, {"arch": "m:F", **keywords})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_keywords_as_text_or_values(checkpoint: Path) -> None:
    def config(**kw: object) -> RunConfig:
        return run_config(checkpoint, {"arch": "m:F", **kw})[0]

    assert config(batch_size="8") == config(batch_size=8)
    assert config(artifacts="onnx, torchscript-trace") == config(artifacts=("onnx", "torchscript-trace"))
    assert config(arch_kwargs='{"w": [1, 2]}') == config(arch_kwargs={"w": (1, 2)})  # as JSON gives it
    assert config(golden="g").golden == config(golden=Path("g")).golden == Path("g")
    # None and False leave an option out; the CLI's report flags are accepted (and do not change the config)
    assert config(max_mae=None, diagnose=False, json="r.json", quiet=True) == config()
    assert config(no_cache=True).cache_dir is None


def test_golden_params_overlay(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    ckpt = tmp_path / "m.pth"
    ckpt.write_bytes(b"x")
    (tmp_path / "export-check.toml").write_text('arch = "net.py:Net"\ninputs = "photos"\nthreads = 3\n')
    params = golden_params(options.RECORD, {"checkpoint": ckpt, "batch_size": 4})
    assert params.inputs == tmp_path / "photos" and params.settings["threads"] == 3
    assert params.common == dict(checkpoint=ckpt, arch=f"{tmp_path / 'net.py'}:Net", arch_kwargs={}, arch_root=tmp_path,
                                 golden_dir=Path("golden"), threads=3, batch_size=4)
    approve = golden_params(options.APPROVE, {"checkpoint": ckpt, "arch": "m:F"})
    assert approve.inputs is None and approve.common["arch"] == "m:F" and approve.common["arch_root"] is None
    (tmp_path / "export-check.toml").write_text("")
    with pytest.raises(UsageError, match="no architecture given"):
        golden_params(options.APPROVE, {"checkpoint": ckpt})


def test_model_inputs_and_outputs_tables_reach_record_approve_and_the_runconfig(tmp_path: Path, monkeypatch) -> None:
    from export_check.signature import SignatureSettings

    monkeypatch.chdir(tmp_path)
    ckpt = tmp_path / "m.pth"
    ckpt.write_bytes(b"x")
    (tmp_path / "export-check.toml").write_text('arch = "net.py:Net"\n[model-inputs.mask]\ndtype = "int64"\nkeyword = true\n'
                                                '[outputs.scores]\nbatch-axis = 1\nkind = "values"\n')
    expected = SignatureSettings(inputs={"mask": {"dtype": "int64", "keyword": True}}, outputs={"scores": {"batch_axis": 1, "kind": "values"}})
    params = golden_params(options.RECORD, {"checkpoint": ckpt})
    assert params.signature == expected and "signature_settings" not in params.common
    cli, plugin = _both(ckpt, {})
    assert isinstance(cli, RunConfig) and cli == plugin and cli.signature_settings == expected
    assert "signature_settings" not in cli.settings_json()  # the report's settings do not change
    (tmp_path / "export-check.toml").write_text('arch = "net.py:Net"\n[outputs.scores]\nbatch_axis = 1\n')
    with pytest.raises(UsageError, match=r"export-check.toml: outputs.scores: unknown key 'batch_axis'; known keys: batch-axis"):
        golden_params(options.RECORD, {"checkpoint": ckpt})
    (tmp_path / "export-check.toml").write_text('arch = "net.py:Net"\noutputs = 3\n')
    with pytest.raises(UsageError, match=r"export-check.toml: outputs must be a table, got 3"):
        golden_params(options.RECORD, {"checkpoint": ckpt})
    assert RunConfig(checkpoint=ckpt, arch="m:F", golden=Path("g"), out_dir=Path("o")).signature_settings == SignatureSettings()
