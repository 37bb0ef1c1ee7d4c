"""A golden set over the memory budget (``EXPORT_CHECK_GOLDEN_MEMORY``) is decoded once into a file and replayed
from it (issue 43, item 4): the rows are the held set's to the bit, each artifact still replayed as its build
is done. How flat the memory stays as the set grows is measured by benchmarks/check_memory.py, not here."""

from __future__ import annotations

import re

import pytest

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, report_numbers
from export_check.config import RunConfig
from export_check.golden import batches as batches_module
from export_check.golden.batches import ENV
from export_check.run import pipeline

KINDS = ("torchscript-trace", "onnx")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """The bundled check (64 digits of 3x32x32: 786 KB decoded) held, and under a budget of 4,096 bytes: the
    inputs spilled, eager's 2,560 bytes of outputs held. Each with its progress lines and the spill files made."""
    out = {}
    for mode, budget in (("held", None), ("spilled", "4096")):
        lines: list[str] = []
        made: list = []
        with pytest.MonkeyPatch.context() as mp:
            if budget is not None:
                mp.setenv(ENV, budget)

            class Recorded(batches_module.SpilledBatches):
                def __init__(self, made: list = made) -> None:
                    super().__init__()
                    made.append(self)

            mp.setattr(batches_module, "SpilledBatches", Recorded)
            config = RunConfig(checkpoint=DEFAULT_CHECKPOINT, arch=DEFAULT_ARCH, golden=DEFAULT_GOLDEN,
                               out_dir=tmp_path_factory.mktemp(mode), kinds=KINDS, cache_dir=None, jobs=2)
            out[mode] = (pipeline.run_check(config, lines.append), lines, made)
    return out


def test_a_spilled_set_gives_the_held_rows_to_the_bit(runs) -> None:
    held, spilled = report_numbers(runs["held"][0], outputs=True), report_numbers(runs["spilled"][0], outputs=True)
    assert [r[0] for r in held] == ["eager", *KINDS] and all(r[1] == "pass" for r in held), held
    onnx = next(r for r in held if r[0] == "onnx")
    assert 1e-8 < onnx[3].mae <= 1e-5  # a real, nonzero error: the comparison compares numbers
    assert spilled == held


def test_the_spilled_set_is_written_once_and_each_artifact_replayed_as_it_is_built(runs) -> None:
    assert runs["held"][2] == []  # 786 KB fits the default budget: no file
    (spill,) = runs["spilled"][2]
    assert len(spill) == 4  # the 64 inputs in batches of 16, written on eager's pass
    with pytest.raises(ValueError):  # the run closed its file
        spill._file.fileno()
    replays = [m[1] for line in runs["spilled"][1] if (m := re.fullmatch(r"replaying 64 inputs through (.+)", line))]
    assert replays == list(KINDS)  # one pass per artifact (eager's outputs held), not one pass after every build
