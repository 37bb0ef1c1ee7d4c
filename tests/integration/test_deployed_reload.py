"""Deployed means deployed (issue 25, item 5): every built file is loaded, and its first sample run, in a
process that has imported nothing of the user's architecture. A torch.export ``.pt2`` whose output is a
pytree node class of the user's (as a transformers ``ModelOutput`` is) loads only where that class is
imported, so its row is an error naming the class and its module; the same model returning a dict passes.
The truth comes from outside the tool: ``torch.export.load`` of the file in a fresh interpreter.

And each file is replayed there, not here: every golden sample, batch size and rerun runs in a replay child of that
process (builder/clean.py). An architecture whose import turns on flushing subnormal floats to zero
(``torch.set_flush_denormal(True)``, a CPU speed tip) changes what torch computes in the checking process, eager
included: the files, replayed as deployed, fail against it by the difference measured by hand (each file run on every
golden sample without the flush, against the approved outputs, recorded with it)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from export_check.cli import main

PACKAGE = "deployedproj"  # the user's package, in the test's folder only: no other test imports a module of that name
MODELING = textwrap.dedent(
    '''
    from collections import OrderedDict

    import torch
    import torch.utils._pytree as pytree
    from torch import nn


    class SequenceClassifierOutput(OrderedDict):
        """Named output tensors in a dict subclass registered as a pytree node, as transformers' ModelOutput is."""


    pytree.register_pytree_node(
        SequenceClassifierOutput,
        lambda out: (list(out.values()), list(out.keys())),
        lambda values, keys: SequenceClassifierOutput(zip(keys, values)),
        serialized_type_name=f"{__name__}.SequenceClassifierOutput",
    )


    class Classifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3))

        def forward(self, x: torch.Tensor) -> SequenceClassifierOutput:
            return SequenceClassifierOutput(logits=self.body(x))


    class PlainClassifier(Classifier):
        """The same weights, returning a plain dict: torch's own pytree node, which every process knows."""

        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"logits": self.body(x)}
    '''
).lstrip()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's project: the package, a checkpoint, 12 samples and a golden set recorded from them."""
    import torch

    root = tmp_path_factory.mktemp("deployed")
    (root / PACKAGE).mkdir()
    (root / PACKAGE / "__init__.py").write_text("")
    (root / PACKAGE / "modeling.py").write_text(MODELING)
    rng = np.random.default_rng(0)
    (root / "samples").mkdir()
    for i in range(12):
        np.savez(root / "samples" / f"s{i:02d}.npz", x=rng.standard_normal(12).astype(np.float32))
    torch.manual_seed(0)
    body = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    torch.save({f"body.{k}": v for k, v in body.state_dict().items()}, root / "model.pth")
    assert main(["golden", "record", str(root / "model.pth"), "--arch", _arch(root, "Classifier"), "--inputs", str(root / "samples"),
                 "--golden", str(root / "golden")]) == 0
    return root


def _arch(root: Path, name: str) -> str:
    return f"{root / PACKAGE / 'modeling.py'}:{name}"


def _check(root: Path, name: str) -> tuple[int, dict]:
    report = root / f"{name}.json"
    code = main(["check", str(root / "model.pth"), "--arch", _arch(root, name), "--golden", str(root / "golden"), "--out",
                 str(root / f"out-{name}"), "--no-cache", "-q", "--artifacts", "torch-export", "--json", str(report)])
    return code, {row["name"]: row for row in json.loads(report.read_text())["rows"]}


@pytest.fixture(scope="module")
def checked(project: Path) -> dict[str, tuple[int, dict]]:
    """Both models checked, torch-export only: the exit code and the rows by name."""
    return {name: _check(project, name) for name in ("Classifier", "PlainClassifier")}


# A fresh interpreter (-P: no current folder on its path) loads the two files by hand: the plain one
# at once, the user's class one only after importing its module; then runs it on two samples.
BY_HAND = """
import glob, json, sys, numpy, torch
root, package = sys.argv[1], sys.argv[2]
torch.export.load(f"{root}/out-PlainClassifier/torch-export.pt2")
try:
    torch.export.load(f"{root}/out-Classifier/torch-export.pt2")
    print(json.dumps({"loaded_alone": True}))
    sys.exit(0)
except RuntimeError:
    pass
sys.path.insert(0, root)
__import__(f"{package}.modeling")
program = torch.export.load(f"{root}/out-Classifier/torch-export.pt2").module()
x = numpy.stack([numpy.load(f)["x"] for f in sorted(glob.glob(f"{root}/samples/*.npz"))[:2]])
print(json.dumps({"loaded_alone": False, "logits": program(torch.from_numpy(x))["logits"].tolist()}))
"""


def test_a_pt2_that_needs_the_users_output_class_to_load_is_an_error_naming_it(checked) -> None:
    code, rows = checked["Classifier"]
    assert code == 1 and rows["eager"]["status"] == "pass", rows
    row = rows["torch-export"]
    assert row["status"] == "error", row
    reason = row["reasons"][0]
    assert f"needs {PACKAGE}.modeling.SequenceClassifierOutput registered as a pytree node to load" in reason, reason
    assert f"import {PACKAGE}.modeling in the deployed process" in reason and "return a tuple or dict from forward" in reason, reason


def test_the_same_model_returning_a_dict_passes(checked) -> None:
    code, rows = checked["PlainClassifier"]
    assert code == 0 and rows["torch-export"]["status"] == "pass", rows
    assert rows["torch-export"]["metrics"]["images"] == 12 and rows["torch-export"]["metrics"]["mae"] <= 1e-5


def test_by_hand_the_file_loads_only_once_the_users_module_is_imported_and_then_matches_eager(project: Path, checked) -> None:
    run = subprocess.run([sys.executable, "-P", "-c", BY_HAND, str(project), PACKAGE], cwd=project.parent, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["loaded_alone"] is False
    assert f"Deserializing {PACKAGE}.modeling.SequenceClassifierOutput in pytree is not registered" in run.stderr
    # the file is right, it only cannot load alone: once loaded, it computes what eager does on those samples
    import torch

    modeling = sys.modules[f"{PACKAGE}.modeling"]  # the check imported it in this process
    model = modeling.Classifier().eval()
    model.load_state_dict(torch.load(project / "model.pth", weights_only=True))
    x = np.stack([np.load(f)["x"] for f in sorted((project / "samples").glob("*.npz"))[:2]])
    with torch.no_grad():
        eager = model(torch.from_numpy(x))["logits"].numpy()
    np.testing.assert_allclose(np.array(result["logits"]), eager, atol=1e-5)


def test_a_tiny_transformers_classifier_pt2_names_the_transformers_output_class(tmp_path: Path) -> None:
    """The issue's own case, when transformers is installed (an optional extra, like OpenVINO): a tiny
    BertForSequenceClassification from a config (no download) returns a SequenceClassifierOutput."""
    pytest.importorskip("transformers", reason="transformers is not installed: the optional transformers case is not run")
    import torch

    (tmp_path / "tinybert.py").write_text(textwrap.dedent(
        '''
        from transformers import BertConfig, BertForSequenceClassification


        def tiny_bert():
            config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                                max_position_embeddings=16, num_labels=3)
            return BertForSequenceClassification(config)
        '''
    ))
    sys.path.insert(0, str(tmp_path))
    try:
        from tinybert import tiny_bert  # type: ignore[import-not-found]

        torch.manual_seed(0)
        torch.save(tiny_bert().state_dict(), tmp_path / "bert.pth")
    finally:
        sys.path.remove(str(tmp_path))
    rng = np.random.default_rng(0)
    (tmp_path / "samples").mkdir()
    for i in range(6):
        np.savez(tmp_path / "samples" / f"s{i}.npz", input_ids=rng.integers(1, 64, 8).astype(np.int64))
    arch = f"{tmp_path / 'tinybert.py'}:tiny_bert"
    assert main(["golden", "record", str(tmp_path / "bert.pth"), "--arch", arch, "--inputs", str(tmp_path / "samples"),
                 "--golden", str(tmp_path / "golden")]) == 0
    report = tmp_path / "bert.json"
    code = main(["check", str(tmp_path / "bert.pth"), "--arch", arch, "--golden", str(tmp_path / "golden"), "--out", str(tmp_path / "out"),
                 "--no-cache", "-q", "--artifacts", "torch-export", "--json", str(report)])
    rows = {r["name"]: r for r in json.loads(report.read_text())["rows"]}
    assert code == 1 and rows["eager"]["status"] == "pass" and rows["torch-export"]["status"] == "error", rows
    reason = rows["torch-export"]["reasons"][0]
    assert "needs transformers.modeling_outputs.SequenceClassifierOutput registered as a pytree node to load" in reason, reason
    assert "import transformers.modeling_outputs in the deployed process" in reason, reason


SUBNORMAL = textwrap.dedent(
    '''
    import torch
    from torch import nn

    torch.set_flush_denormal(True)  # run by importing the architecture: every torch kernel of this thread flushes subnormals


    class Rescaled(nn.Module):
        """A head whose output passes through subnormal values (about 1e-40) on its way back to scale."""

        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x) * 1e-20 * 1e-20 * 1e20 * 1e20
    '''
).lstrip()


def test_every_file_is_replayed_where_the_architectures_import_has_not_run_and_fails_by_the_deployed_difference_by_hand(
        tmp_path: Path) -> None:
    import torch

    (tmp_path / "subnormal.py").write_text(SUBNORMAL)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    rng = np.random.default_rng(0)
    for i in range(8):
        np.save(inputs / f"s{i}.npy", rng.standard_normal(16).astype(np.float32))
    # the weights, made in a fresh interpreter (the architecture's import must not flush this test process's thread)
    subprocess.run([sys.executable, "-c", "import torch, subnormal; torch.manual_seed(0); "
                    "torch.save(subnormal.Rescaled().state_dict(), 'w.pth')"], cwd=tmp_path, check=True)
    cli = [sys.executable, "-m", "export_check"]
    arch = ["--arch", "subnormal.py:Rescaled", "--golden", "g"]
    subprocess.run([*cli, "golden", "record", "w.pth", *arch, "--inputs", "inputs"], cwd=tmp_path, check=True, capture_output=True)
    run = subprocess.run([*cli, "w.pth", *arch, "--no-cache", "-q", "--out", "out", "--artifacts", "torchscript-trace,torchscript-script,onnx",
                          "--json", "r.json"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 1, run.stderr
    rows = {r["name"]: r for r in json.loads((tmp_path / "r.json").read_text())["rows"]}
    # eager, beside its architecture, flushes: the golden set (recorded there too) holds the bias alone, and eager matches it
    assert rows["eager"]["status"] == "pass" and rows["eager"]["metrics"]["mae"] == 0.0
    # by hand: every golden sample through each file as deployed (this process never imported the architecture), against
    # the approved outputs; and with the flush the architecture's import turns on, the file matches them: a replay beside
    # the architecture (as before the replay child) would have passed every row
    from export_check.golden.manifest import load_golden

    golden = load_golden(tmp_path / "g")
    batch = torch.from_numpy(np.stack([golden.load_input(item) for item in golden.inputs]))
    approved = golden.reference_outputs(0, len(golden))["logits"]
    for name, suffix in (("torchscript-trace", ".pt"), ("torchscript-script", ".pt"), ("onnx", ".onnx")):
        if suffix == ".pt":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch.jit.load warns of its deprecation
                module = torch.jit.load(str(tmp_path / "out" / f"{name}{suffix}"))
            with torch.inference_mode():
                deployed = module(batch).numpy()
                try:
                    assert torch.set_flush_denormal(True)  # x86: FTZ/DAZ are there to set
                    assert np.array_equal(module(batch).numpy(), approved)
                finally:
                    torch.set_flush_denormal(False)
        else:
            import onnxruntime as ort

            session = ort.InferenceSession(str(tmp_path / "out" / f"{name}{suffix}"), providers=["CPUExecutionProvider"])
            deployed = session.run(None, {session.get_inputs()[0].name: batch.numpy()})[0]
        mae = float(np.abs(deployed.astype(np.float64) - approved).mean())
        assert mae > 0.1  # a real difference: the flushed model outputs its bias only
        row = rows[name]
        assert row["status"] == "fail", row
        assert row["metrics"]["mae"] == pytest.approx(mae, rel=1e-4), name
        assert not any("beside the model" in note for note in row.get("notes", [])), row
