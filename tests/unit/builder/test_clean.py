"""builder/clean.py: each file is replayed in a replay child of the load host, a process that has imported nothing of the
user's architecture, whatever this process imported.

The architecture here is a module of the test's own that says, in a file named by the process id, every process that
imports it: the test process does; the replay child that runs the file must not. Its outputs are the file's, run by
hand in this process (bit for bit: the same file, input and thread count), its timings are its own, and what its
runtime uses is read back there.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from export_check.artifacts import KINDS_BY_NAME, BuildContext
from export_check.artifacts._common import captured_warnings
from export_check.builder import isolation
from export_check.builder.clean import CleanRunner

ARCH = '''
import os
from pathlib import Path

import torch
from torch import nn

Path(os.environ["CLEAN_TEST_SEEN"], str(os.getpid())).write_text("imported")


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)
'''


@pytest.fixture()
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, BuildContext, Path, torch.nn.Module]:
    """The architecture imported here (its marker file says so), and its TorchScript file built in this process."""
    seen = tmp_path / "seen"
    seen.mkdir()
    monkeypatch.setenv("CLEAN_TEST_SEEN", str(seen))
    (tmp_path / "clean_test_arch.py").write_text(ARCH)
    monkeypatch.syspath_prepend(str(tmp_path))
    arch = importlib.import_module("clean_test_arch")
    monkeypatch.setitem(sys.modules, "clean_test_arch", arch)
    model = arch.Head().eval()
    example = torch.from_numpy(np.random.default_rng(0).standard_normal((4, 12)).astype(np.float32))
    ctx = BuildContext(model=model, example=example, opset=17, onnx_exporter="torchscript", threads=1)
    path = tmp_path / "torchscript-trace.pt"
    with captured_warnings([]):
        KINDS_BY_NAME["torchscript-trace"].build(ctx, path, None)
    return path, ctx, seen, model


@pytest.mark.skipif(not isolation.enabled(), reason="replay children need os.fork and isolation on (EXPORT_CHECK_ISOLATE)")
def test_a_file_is_replayed_in_a_process_that_never_imported_the_architecture_and_gives_the_files_own_outputs(built) -> None:
    path, ctx, seen, model = built
    assert (seen / str(os.getpid())).exists()  # this process imported the architecture
    batch = np.random.default_rng(1).standard_normal((9, 12)).astype(np.float32)
    notes: list[str] = []
    with captured_warnings(notes), isolation.open_deployed(KINDS_BY_NAME["torchscript-trace"], path, ctx, notes) as runner:
        assert isinstance(runner, CleanRunner), notes  # not the fallback beside the model
        got = runner.infer({"input": batch})["logits"]
        assert runner.last_seconds is not None and 0 < runner.last_seconds < 60
        used = runner.settings_in_use
        child = runner.pid
        if sys.platform.startswith("linux") and child is not None:  # each process says what it is (lifeline.name_process)
            assert Path(f"/proc/{child}/comm").read_text().strip() == "xc r torchscrip"  # 15 bytes: the kernel's limit
            host = int(Path(f"/proc/{child}/stat").read_text().rpartition(")")[2].split()[1])
            assert Path(f"/proc/{host}/comm").read_text().strip() == "xc load host"
    assert child is not None and child != os.getpid()
    assert not (seen / str(child)).exists(), sorted(p.name for p in seen.iterdir())  # it never imported the architecture
    assert sorted(p.name for p in seen.iterdir()) == [str(os.getpid())]
    assert used["torch_threads"] == 1 and used["torch_interop_threads"] == 1, used
    # by hand: the same file, the same input, one thread, in this process
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit.load warns of its deprecation
            by_hand = torch.jit.load(str(path))(torch.from_numpy(batch)).detach().numpy()
    finally:
        torch.set_num_threads(before)
    assert np.array_equal(got, by_hand)
    assert float(np.abs(got - model(torch.from_numpy(batch)).detach().numpy()).max()) < 1e-5


@pytest.mark.skipif(not isolation.enabled(), reason="replay children need os.fork and isolation on (EXPORT_CHECK_ISOLATE)")
def test_what_the_file_raises_there_is_raised_here_by_its_own_type_and_the_child_goes_on(built) -> None:
    path, ctx, _, _ = built
    notes: list[str] = []
    with captured_warnings(notes), isolation.open_deployed(KINDS_BY_NAME["torchscript-trace"], path, ctx, notes) as runner:
        with pytest.raises(RuntimeError) as raised:
            runner.infer({"input": np.zeros((2, 7), np.float32)})  # 7 features where the head takes 12
        assert "mat1 and mat2 shapes cannot be multiplied" in str(raised.value)
        assert runner.infer({"input": np.zeros((2, 12), np.float32)})["logits"].shape == (2, 5)  # the same child, still serving


def test_with_isolation_off_the_file_is_replayed_here_and_the_row_says_so(built, monkeypatch: pytest.MonkeyPatch) -> None:
    path, ctx, _, _ = built
    monkeypatch.setenv(isolation.ENV_SWITCH, "0")
    notes: list[str] = []
    with captured_warnings([]), isolation.open_deployed(KINDS_BY_NAME["torchscript-trace"], path, ctx, notes) as runner:
        assert not isinstance(runner, CleanRunner)
        assert runner.infer({"input": np.zeros((1, 12), np.float32)})["logits"].shape == (1, 5)
    assert notes == [f"replayed beside the model, not in a process without the architecture: build isolation is off ({isolation.ENV_SWITCH}=0)"]


@pytest.mark.skipif(not isolation.enabled(), reason="replay children need os.fork and isolation on (EXPORT_CHECK_ISOLATE)")
def test_an_onnx_file_is_replayed_where_onnxruntime_alone_is_imported_not_torch(built, tmp_path: Path) -> None:
    """A deployed ONNX process runs onnxruntime, not torch: its file is replayed in a child of a fresh interpreter that
    imported onnxruntime and numpy only (``RUNTIME_ALONE``), and gives what onnxruntime gives here, by hand."""
    import onnxruntime as ort

    _, ctx, seen, _ = built
    path = tmp_path / "onnx.onnx"
    with captured_warnings([]):
        KINDS_BY_NAME["onnx"].build(ctx, path, None)
    batch = np.random.default_rng(2).standard_normal((5, 12)).astype(np.float32)
    notes: list[str] = []
    with captured_warnings(notes), isolation.open_deployed(KINDS_BY_NAME["onnx"], path, ctx, notes) as runner:
        assert isinstance(runner, CleanRunner) and notes == [], notes
        got = runner.infer({"input": batch})["logits"]
        used, child = runner.settings_in_use, runner.pid
    assert used["imported"] == ["onnxruntime"], used  # no torch, no onnx, no exporter: what a deployed process holds
    assert used["onnxruntime"]["intra_op_num_threads"] == 1 and used["onnxruntime"]["providers"] == ["CPUExecutionProvider"], used
    assert not (seen / str(child)).exists()
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    assert np.array_equal(got, session.run(None, {session.get_inputs()[0].name: batch})[0])


PYTREE = '''
from collections import OrderedDict

import torch
import torch.utils._pytree as pytree
from torch import nn


class Out(OrderedDict):
    """Named outputs in a dict subclass registered as a pytree node, as a transformers ModelOutput is."""


pytree.register_pytree_node(Out, lambda out: (list(out.values()), list(out.keys())), lambda values, keys: Out(zip(keys, values)),
                            serialized_type_name=f"{__name__}.Out")


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(12, 5)

    def forward(self, x: torch.Tensor) -> Out:
        return Out(logits=self.fc(x))
'''


@pytest.mark.skipif(not isolation.enabled(), reason="replay children need os.fork and isolation on (EXPORT_CHECK_ISOLATE)")
def test_a_file_that_opens_only_beside_the_architecture_names_what_it_lacks_on_every_path(tmp_path: Path,
                                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only the load probe of a file built in the run: a file opened for replay (one restored from the cache, say)
    that needs the user's pytree class fails in its replay child, and the error names the class, as the probe's does."""
    from export_check.builder.protocol import load_needs

    (tmp_path / "clean_test_pytree.py").write_text(PYTREE)
    monkeypatch.syspath_prepend(str(tmp_path))
    arch = importlib.import_module("clean_test_pytree")
    monkeypatch.setitem(sys.modules, "clean_test_pytree", arch)
    torch.manual_seed(0)
    model = arch.Head().eval()
    example = torch.zeros(2, 12)
    ctx = BuildContext(model=model, example=example, opset=17, onnx_exporter="torchscript", threads=1)
    path = tmp_path / "torch-export.pt2"
    with captured_warnings([]):
        KINDS_BY_NAME["torch-export"].build(ctx, path, None)
    notes: list[str] = []
    with captured_warnings(notes), pytest.raises(isolation.NeedsWhatItLacks) as lacked:
        isolation.open_deployed(KINDS_BY_NAME["torch-export"], path, ctx, notes)
    failure = lacked.value.failure
    assert (failure.how, failure.missing) == ("pytree", "clean_test_pytree.Out"), failure
    assert load_needs(path.name, failure.how, failure.missing, None, failure.description).startswith(
        "torch-export.pt2 needs clean_test_pytree.Out registered as a pytree node to load")
    # by hand: it loads here, where the class is registered
    assert torch.export.load(str(path)) is not None
