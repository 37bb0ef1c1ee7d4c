"""What the two litert test files share (tests/integration/test_litert.py, test_litert_seq.py; both run in `tox -e litert`, one
per worker): a bundled models/multi_io.py model recorded and checked on the litert row, its eager model, and a .tflite of
signatures run by hand over its golden set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO, read_report
from export_check.cli import main
from models.make_multi_io_samples import write_samples


def multi_io_run(tmp_path_factory: pytest.TempPathFactory, model: str, cls: str, count: int):
    """A bundled models/multi_io.py model recorded on ``count`` held-out samples (models.make_multi_io_samples) and checked
    on the litert row: (exit code, report, golden folder, checkpoint)."""
    folder = tmp_path_factory.mktemp(f"litert-{model}")
    write_samples(folder / "samples", model, count=count)
    weights, arch = REPO / "models" / "checkpoints" / f"{model}.pth", f"{REPO / 'models' / 'multi_io.py'}:{cls}"
    assert main(["golden", "record", str(weights), "--arch", arch, "--golden", str(folder / "golden"), "--inputs",
                 str(folder / "samples"), "-q"]) == 0
    code = main(["check", str(weights), "--arch", arch, "--golden", str(folder / "golden"), "--artifacts", "litert", "-q", "--no-cache",
                 "--out", str(folder / "out"), "--json", str(folder / "r.json")])
    return code, read_report(folder / "r.json"), folder / "golden", weights


def eager_model(arch: str, checkpoint: Path) -> torch.nn.Module:
    from models import multi_io

    model = getattr(multi_io, arch)()
    model.load_state_dict(torch.load(checkpoint, weights_only=True))
    return model.eval()


def by_hand(path: str, golden_dir: Path, model: torch.nn.Module, names: list[str], batch_axis: int) -> tuple[float, set[str], int]:
    """(MAE, signatures used, samples): the .tflite in the LiteRT interpreter, each golden batch through the signature of its
    size, one sample at a time (the file holds one), int64 fed as the int32 the file declares; eager on the same golden batch."""
    from ai_edge_litert.interpreter import Interpreter

    from export_check.golden.manifest import load_golden

    interpreter = Interpreter(model_path=path, num_threads=1)
    errors, used, count = [], set(), 0
    for _, feeds in load_golden(golden_dir).feed_batches(16):  # consecutive samples of one size, as the tool compares them
        arrays = [feeds[name] for name in names]
        size = arrays[0].shape[-1]
        runner = interpreter.get_signature_runner(f"len_{size}")
        used.add(f"len_{size}")
        with torch.inference_mode():
            eager = model(*(torch.from_numpy(a) for a in arrays)).numpy()
        parts = [runner(**{f"args_{k}": (a[i:i + 1].astype(np.int32) if a.dtype == np.int64 else a[i:i + 1])
                          for k, a in enumerate(arrays)})["output_0"] for i in range(len(arrays[0]))]
        got = np.concatenate(parts, axis=batch_axis)
        assert got.shape == eager.shape
        errors.append(np.abs(got.astype(np.float64) - eager.astype(np.float64)).ravel())
        count += len(arrays[0])
    return float(np.concatenate(errors).mean()), used, count
