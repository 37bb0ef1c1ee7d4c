from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from arches import TinyNet
from conftest import TESTS, seeded
from export_check.checkpoint import build_model, load_state_dict, resolve_factory
from export_check.errors import ArchitectureError, CheckpointError

TINY = f"{TESTS / 'arches.py'}:TinyNet"


WRAPPERS = ("state_dict", "model", "model_state_dict", "model_state", "net", "network", "weights", "params")


@pytest.mark.parametrize("wrap", ["bare", *WRAPPERS, "module", "compiled"])
def test_common_checkpoint_shapes_load_to_the_same_weights(tmp_path: Path, wrap: str) -> None:
    state = seeded(TinyNet).state_dict()
    obj = {
        "bare": state,
        "state_dict": {"state_dict": state, "epoch": 3, "optimizer": {"lr": 0.1}},
        "model": {"model": state, "step": 10},
        "model_state_dict": {"model_state_dict": state},
        "model_state": {"model_state": state, "epoch": 3, "optimizer_state": {"state": {}, "param_groups": []}},
        "net": {"net": state, "epoch": 3},
        "network": {"network": state},
        "weights": {"weights": state, "config": {"width": 8}},
        "params": {"params": state},
        "module": {f"module.{k}": v for k, v in state.items()},
        "compiled": {f"_orig_mod.{k}": v for k, v in state.items()},
    }[wrap]
    path = tmp_path / "ckpt.pth"
    torch.save(obj, path)
    notes: list[str] = []
    loaded = load_state_dict(path, notes)
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], state[k]) for k in state)
    model = build_model(TINY, {}, loaded, path)
    assert not model.training
    if wrap in WRAPPERS:  # the note names the key it loaded, and what else the file holds
        assert notes == [f"checkpoint ckpt.pth: loaded the state_dict under its key {wrap!r} ({len(state)} tensors"
                         + (f", beside {', '.join(repr(k) for k in obj if k != wrap)})" if len(obj) > 1 else ")")]
    else:
        assert notes == []


def test_a_state_dict_under_an_unknown_key_is_an_error_naming_that_key(tmp_path: Path) -> None:
    state = seeded(TinyNet).state_dict()
    path = tmp_path / "ckpt.pth"
    torch.save({"ema_weights": state, "epoch": 3}, path)
    with pytest.raises(CheckpointError) as info:
        load_state_dict(path)
    message = str(info.value)
    assert message.startswith(f"{path}: its state_dict is under the key 'ema_weights', which export-check does not unwrap")
    assert "torch.save(torch.load(path)['ema_weights'], new_path)" in message and "\n" not in message


@pytest.mark.parametrize("obj, held", [
    ({"model_state": {}, "epoch": 3}, " (its key 'model_state' holds an empty dict)"),
    ({"model_state": {"lr": 0.1, "momentum": 0.9}, "epoch": 3}, " (its key 'model_state' holds a dict of 2 entries, no state_dict of tensors)"),
    ({"state_dict": [1, 2, 3]}, " (its key 'state_dict' holds a list)"),
    ({"weights": {"a": {"b": 1}}, "note": "x"}, " (its key 'weights' holds a dict of 1 entries, no state_dict of tensors)"),
    ({"epoch": 3, "note": "trained"}, ""),
])
def test_a_wrapper_holding_no_tensors_is_one_error_naming_its_keys(tmp_path: Path, obj: dict, held: str) -> None:
    path = tmp_path / "ckpt.pth"
    torch.save(obj, path)
    notes: list[str] = []
    with pytest.raises(CheckpointError) as info:
        load_state_dict(path, notes)
    keys = ", ".join(repr(k) for k in obj)
    assert str(info.value) == (f"{path}: a dict of {keys} that holds no state_dict: no key maps parameter names to tensors{held}; "
                               "save one with torch.save(model.state_dict(), path)")
    assert notes == []


def test_a_wrapped_checkpoint_records_checks_and_says_which_key_and_a_bad_one_is_one_line(tmp_path: Path, capsys) -> None:
    """Through the CLI: the note on record, in the check's run notes (JSON too); exit 2 and one line
    for a wrapper without weights."""
    import json

    import numpy as np

    from arches import EnergyNet
    from export_check.cli import main

    checkpoint = tmp_path / "wrapped.pth"
    torch.save({"model_state": seeded(EnergyNet).state_dict(), "epoch": 12}, checkpoint)
    samples = tmp_path / "samples"
    samples.mkdir()
    for i, x in enumerate(np.random.default_rng(0).standard_normal((8, 12)).astype(np.float32)):
        np.save(samples / f"s{i}.npy", x)
    arch, golden = f"{TESTS / 'arches.py'}:EnergyNet", str(tmp_path / "golden")
    note = "checkpoint wrapped.pth: loaded the state_dict under its key 'model_state' (4 tensors, beside 'epoch')"
    assert main(["golden", "record", str(checkpoint), "--arch", arch, "--inputs", str(samples), "--golden", golden]) == 0
    assert f"note: {note}" in capsys.readouterr().out.splitlines()
    report = tmp_path / "r.json"
    assert main(["check", str(checkpoint), "--arch", arch, "--golden", golden, "--out", str(tmp_path / "out"), "--no-cache", "-q",
                 "--artifacts", "onnx", "--json", str(report)]) == 0
    assert json.loads(report.read_text())["run_notes"] == [note]
    capsys.readouterr()
    torch.save({"model_state": {}, "epoch": 12}, checkpoint)
    assert main(["check", str(checkpoint), "--arch", arch, "--golden", golden, "--out", str(tmp_path / "out"), "--no-cache", "-q",
                 "--artifacts", "onnx"]) == 2
    stderr = capsys.readouterr().err
    err = [line for line in stderr.splitlines() if line.startswith("export-check: error")]
    assert "Traceback" not in stderr
    assert err == [f"export-check: error: {checkpoint}: a dict of 'model_state', 'epoch' that holds no state_dict: no key maps parameter "
                   "names to tensors (its key 'model_state' holds an empty dict); save one with torch.save(model.state_dict(), path)"]


def _unreadable(tmp_path: Path, case: str) -> Path:
    if case == "parent-is-a-file":
        (tmp_path / "a-file").write_bytes(b"x")
        return tmp_path / "a-file" / "m.pth"
    path = tmp_path / "m.pth"
    if case == "dangling-link":
        path.symlink_to(tmp_path / "gone.pth")
    elif case == "directory":
        path.mkdir()
    elif case == "fifo":
        os.mkfifo(path)
    elif case == "empty":
        path.write_bytes(b"")
    return path


@pytest.mark.parametrize("case, says", [("missing", "checkpoint not found;"), ("parent-is-a-file", "is a file, not a folder"),
                                        ("dangling-link", "checkpoint not found;"), ("directory", "is not a regular file"),
                                        ("fifo", "is not a regular file"), ("empty", "is empty (0 bytes)")])
def test_an_unreadable_checkpoint_is_said_where_it_is_opened_as_the_early_check_says_it(tmp_path: Path, case: str, says: str) -> None:
    """A recording or a build server loads without the run's early check: the loader's one open says the same, and a FIFO
    does not block it."""
    from export_check.files import check_readable_file

    path = _unreadable(tmp_path, case)
    with pytest.raises(CheckpointError) as early:
        check_readable_file(path, "checkpoint", "pass the path of a .pth/.pt/.safetensors state_dict")
    with pytest.raises(CheckpointError) as loading:
        load_state_dict(path)
    assert str(loading.value) == str(early.value) and says in str(loading.value) and str(loading.value).startswith(str(path))


def test_safetensors_checkpoint(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    state = seeded(TinyNet).state_dict()
    path = tmp_path / "ckpt.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    loaded = load_state_dict(path)
    assert all(torch.equal(loaded[k], state[k]) for k in state)


def test_mismatch_lists_missing_unexpected_and_shapes(tmp_path: Path) -> None:
    state = seeded(TinyNet).state_dict()
    state.pop("head.2.bias")
    state["extra.weight"] = torch.zeros(1)
    state["head.0.weight"] = torch.zeros(5, 5)
    path = tmp_path / "ckpt.pth"
    torch.save(state, path)
    with pytest.raises(CheckpointError) as info:
        build_model(TINY, {}, load_state_dict(path), path)
    message = str(info.value)
    assert "1 missing: head.2.bias" in message
    assert "1 unexpected: extra.weight" in message
    assert "1 shape mismatch: head.0.weight (5, 5)!=(32, 64)" in message
    assert str(path) in message and "\n" not in message


def test_mismatch_counts_all_but_shows_a_few(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pth"
    torch.save({f"layer{i}.weight": torch.zeros(1) for i in range(20)}, path)
    with pytest.raises(CheckpointError, match=r"20 unexpected: layer0.weight, layer1.weight, layer2.weight, … 20 in all"):
        build_model(TINY, {}, load_state_dict(path), path)


def test_pickle_that_would_run_code_is_refused_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            import os

            return (os.system, (f"touch {marker}",))

    path = tmp_path / "evil.pth"
    torch.save({"weight": torch.zeros(1), "payload": Payload()}, path)
    with pytest.raises(CheckpointError, match="refused"):
        load_state_dict(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    "spec, match",
    [
        ("nocolon", "not of the form"),
        ("no_such_module_xyz:Net", "cannot import module 'no_such_module_xyz'"),
        (f"{TESTS / 'arches.py'}:Missing", "has no attribute 'Missing'"),
        ("/nonexistent/dir/net.py:Net", "not found"),
        (f"{TESTS / 'arches.py'}:__name__", "not a class or factory"),
    ],
)
def test_unresolvable_architecture_specs(spec: str, match: str) -> None:
    with pytest.raises(ArchitectureError, match=match):
        resolve_factory(spec)


def test_architecture_by_module_path_and_kwargs(tmp_path: Path) -> None:
    factory = resolve_factory("models.simple_cnn:SimpleCNN")
    model = factory(num_classes=4, image_size=32)
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 4)
    with pytest.raises(ArchitectureError, match="cannot construct"):
        build_model("models.simple_cnn:SimpleCNN", {"no_such_arg": 1}, {}, tmp_path / "x.pth")


@pytest.mark.parametrize("spec", ["subprocess:run", "os:system", "builtins:eval", "posix:system", "collections:OrderedDict",
                                  "importlib:import_module", "os.path:join"])
def test_standard_library_and_builtin_factories_are_refused_before_they_are_called(spec: str) -> None:
    with pytest.raises(ArchitectureError, match="refused: .* standard library"):
        resolve_factory(spec)


def test_a_module_arch_imports_after_the_installed_libraries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings folder and the current directory go at the end of sys.path: a `json.py` there
    cannot replace the standard library's, while the model module there imports."""
    (tmp_path / "json.py").write_text("raise ImportError('the fake json')\n")
    (tmp_path / "usernet.py").write_text("import json\nimport torch\n\n\ndef Net():\n    return torch.nn.Linear(2, 2)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(__import__("sys").modules, "usernet", raising=False)
    factory = resolve_factory("usernet:Net", tmp_path)
    import sys

    assert sys.path[-1] == str(tmp_path) and sys.path.index(str(tmp_path)) > max(i for i, p in enumerate(sys.path) if "site-packages" in p)
    assert isinstance(factory(), torch.nn.Linear)
    assert sys.modules["json"].__file__ != str(tmp_path / "json.py")


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("make, says", [
    (lambda t: t.to_sparse(), "sparse tensor (sparse_coo)"),
    (lambda t: torch.empty_like(t, device="meta"), "meta tensor"),
    (lambda t: torch.quantize_per_tensor(t, 0.1, 0, torch.quint8), "quantized tensor (quint8)"),
    (lambda t: t.to(torch.complex64), "complex tensor (complex64)"),
])
def test_non_dense_tensors_are_one_checkpoint_error_naming_the_key(tmp_path: Path, make, says: str) -> None:
    state = seeded(TinyNet).state_dict()
    key = next(iter(state))
    state[key] = make(state[key])
    torch.save(state, tmp_path / "m.pth")
    with pytest.raises(CheckpointError, match=rf"m\.pth: {key.replace('.', '[.]')} is a {says.replace('(', '[(]').replace(')', '[)]')}"):
        load_state_dict(tmp_path / "m.pth")
