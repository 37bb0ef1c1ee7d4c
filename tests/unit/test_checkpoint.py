from __future__ import annotations

from pathlib import Path

import pytest
import torch

from arches import TinyNet
from conftest import TESTS, seeded
from exporter.checkpoint import build_model, load_state_dict, resolve_factory
from exporter.errors import ArchitectureError, CheckpointError

TINY = f"{TESTS / 'arches.py'}:TinyNet"


@pytest.mark.parametrize("wrap", ["bare", "state_dict", "model", "model_state_dict", "module", "compiled"])
def test_common_checkpoint_shapes_load_to_the_same_weights(tmp_path: Path, wrap: str) -> None:
    state = seeded(TinyNet).state_dict()
    obj = {
        "bare": state,
        "state_dict": {"state_dict": state, "epoch": 3, "optimizer": {"lr": 0.1}},
        "model": {"model": state, "step": 10},
        "model_state_dict": {"model_state_dict": state},
        "module": {f"module.{k}": v for k, v in state.items()},
        "compiled": {f"_orig_mod.{k}": v for k, v in state.items()},
    }[wrap]
    path = tmp_path / "ckpt.pth"
    torch.save(obj, path)
    loaded = load_state_dict(path)
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], state[k]) for k in state)
    model = build_model(TINY, {}, loaded, path)
    assert not model.training


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
