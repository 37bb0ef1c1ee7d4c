"""What the two litert test files share (tests/integration/test_litert.py, test_litert_seq.py; both run in `tox -e litert`, one
per worker): a bundled models/multi_io.py model recorded and checked on the litert row."""

from __future__ import annotations

import pytest

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
