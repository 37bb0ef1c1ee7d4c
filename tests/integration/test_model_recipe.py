"""Issue 43, item 2: the model crosses no pipe. The build server builds its own copy of the model from the checkpoint
(mapped from the file: one copy of the weights between the processes) and builds from it only when its fingerprint
(every tensor's name, shape and dtype, and the buffers the factory makes) equals the run's; otherwise the run's own
process builds in a child of its own, which holds the model already, and the row says so."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from export_check.api import check, record
from export_check.builder.isolation import SERVICE

WIDE = '''
import torch


class Wide(torch.nn.Module):
    """8x8 digits -> 10 scores through a 4 MB layer: its weights dwarf a batch of inputs."""

    def __init__(self, noisy: bool = False):
        super().__init__()
        self.wide = torch.nn.Linear(64, 16384)
        self.head = torch.nn.Linear(16384, 10)
        # a buffer the factory makes and the checkpoint does not hold: random where noisy
        self.register_buffer("shift", torch.randn(10) if noisy else torch.zeros(10), persistent=False)

    def forward(self, x):
        return self.head(torch.relu(self.wide(x.flatten(1)))) + self.shift
'''


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory, digit_images: Path) -> Path:
    folder = tmp_path_factory.mktemp("recipe")
    (folder / "wide.py").write_text(WIDE)
    torch.manual_seed(0)
    import importlib.util

    spec = importlib.util.spec_from_file_location("wide_for_test", folder / "wide.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.save(module.Wide().state_dict(), folder / "wide.pth")
    record(folder / "wide.pth", f"{folder / 'wide.py'}:Wide", golden=folder / "golden", inputs=digit_images, size=8, mode="L")
    return folder


def test_the_build_server_builds_the_model_from_its_checkpoint_and_is_never_sent_it(wide: Path) -> None:
    report = check(wide / "wide.pth", f"{wide / 'wide.py'}:Wide", golden=wide / "golden", out=wide / "out", no_cache=True,
                   artifacts=["torchscript-trace", "onnx"])
    assert report.passed and all(r.status == "pass" for r in report.rows), [(r.name, r.status, r.reasons) for r in report.rows]
    assert not [n for r in report.rows for n in r.notes if "built in a child of the run's process" in n]
    sent = SERVICE._pickled[2]
    weights = (wide / "wide.pth").stat().st_size
    assert weights > 4_000_000 and len(sent) < weights / 8, (len(sent), weights)  # the inputs and settings, not the model
    assert pickle.loads(sent).model is None and pickle.loads(sent).recipe.checkpoint == str(wide / "wide.pth")
    for row in report.rows[1:]:  # the files hold the checkpoint's weights: compared with eager by hand on the golden inputs
        assert row.metrics is not None and row.metrics.mae <= 1e-5


def test_a_model_the_server_would_build_otherwise_is_built_in_a_child_of_the_run(wide: Path) -> None:
    """A factory that makes a random buffer the checkpoint does not hold: the server's copy would differ from the run's
    eager model, so its fingerprint refuses it, and the run builds from its own model, saying so."""
    report = check(wide / "wide.pth", f"{wide / 'wide.py'}:Wide", golden=wide / "golden", out=wide / "noisy", no_cache=True,
                   artifacts=["torchscript-trace"], arch_kwargs={"noisy": True})
    trace = report.row("torchscript-trace")
    assert trace.status == "pass" and trace.metrics is not None and trace.metrics.mae <= 1e-5, (trace.reasons, trace.notes)
    assert any(n.startswith("built in a child of the run's process, not the build server: the build process cannot rebuild the model "
                            "(ValueError: the model built from its checkpoint here differs from the run's") for n in trace.notes), trace.notes
    assert report.row("eager").status == "fail" and np.isfinite(report.row("eager").metrics.mae)  # the random shift moved eager itself
