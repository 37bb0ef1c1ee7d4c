"""``--jobs``: builds in the build server overlap the replay here; the numbers never depend on it.

With ``--jobs 2`` every build is sent to the build server up front and each artifact is replayed
and diagnosed as soon as its file is there, while the next ones build on the other core. With
``--jobs 1`` one thing happens at a time; a golden set too large to hold is replayed once, after all
builds. The three give the same rows, to the bit, on the bundled ResNet and its 64 real digits.
How much faster ``--jobs 2`` is, is measured by benchmarks/run.py, not here.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, process_gone, report_numbers
from export_check.artifacts import BUILD_ORDER, DEFAULT_KINDS, KINDS_BY_NAME, BuildContext
from export_check.artifacts._common import captured_warnings
from export_check.builder import builds, isolation
from export_check.config import RunConfig
from export_check.golden.batches import GoldenBatches
from export_check.run import pipeline

MODES = ("jobs2", "jobs1", "streamed")
DEFAULT_ORDER = [kind for kind in BUILD_ORDER if kind.name in DEFAULT_KINDS]  # what a run without --artifacts builds


REPLAYING = re.compile(r"replaying \d+ inputs through (.+)")
DIAGNOSING = re.compile(r"diagnosing(?: (\S+))?: batch sizes")


def _recording(events: list[tuple[str, tuple[str, ...]]], diagnosed: list[tuple[str, bool, bool | None]], overlap: bool):
    """What a run shows, as it shows it: the builds it starts (``builds.start_build``, the build
    server's door) and its progress lines, each with the thread that said it. ``diagnosed``: per row,
    whether its diagnosis ran on the main thread and (``overlap``: an artifact row's diagnosis waits,
    up to a minute, for the next row's replay to start) whether the next replay started while it ran;
    ``None`` for the last row."""
    real_start = builds.start_build
    started: dict[str, threading.Event] = {}
    order = [kind.name for kind in DEFAULT_ORDER]

    def start(kind, *args, **kwargs):
        events.append(("build", (kind.name,)))
        return real_start(kind, *args, **kwargs)

    def progress(line: str) -> None:
        if replaying := REPLAYING.fullmatch(line):
            names = tuple(DEFAULT_KINDS) if replaying[1].endswith(" artifacts") else (replaying[1],)
            events.append(("replay", names))
            for name in names:
                started.setdefault(name, threading.Event()).set()
        elif diagnosing := DIAGNOSING.match(line):
            name = diagnosing[1] or "eager"
            following = order[order.index(name) + 1] if name in order[:-1] else None
            seen = None if not overlap or following is None else started.setdefault(following, threading.Event()).wait(60)
            diagnosed.append((name, threading.current_thread() is threading.main_thread(), seen))

    return start, progress


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, ...]]:
    """The bundled check run three ways, each with the order in which builds started and replays ran."""
    out: dict[str, tuple[Any, ...]] = {}
    for mode in MODES:
        events: list[tuple[str, tuple[str, ...]]] = []
        diagnosed: list[tuple[str, bool, bool | None]] = []
        start, progress = _recording(events, diagnosed, overlap=mode == "jobs2")
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(builds, "start_build", start)
            if mode == "streamed":  # nothing fits the memory budget, and no spill file: the set streams batch by batch
                mp.setattr(pipeline, "GoldenBatches", functools.partial(GoldenBatches, budget=0, spill=False))
            config = RunConfig(checkpoint=DEFAULT_CHECKPOINT, arch=DEFAULT_ARCH, golden=DEFAULT_GOLDEN,
                               out_dir=tmp_path_factory.mktemp(mode), jobs=1 if mode == "jobs1" else 2)
            out[mode] = (pipeline.run_check(config, progress), events, diagnosed)
    return out


def test_jobs_2_sends_every_build_first_then_replays_each_artifact_as_it_comes(runs) -> None:
    report, events, _ = runs["jobs2"]
    order = [kind.name for kind in DEFAULT_ORDER]
    assert events == [*(("build", (name,)) for name in order), *(("replay", (name,)) for name in order)]
    assert dict(report.settings)["jobs"] == 2


def test_jobs_2_diagnoses_each_artifact_on_a_second_thread_while_the_next_one_replays(runs) -> None:
    _, _, diagnosed = runs["jobs2"]
    order = [kind.name for kind in DEFAULT_ORDER]
    assert diagnosed[0] == ("eager", True, None)  # eager's row before the loop, on the main thread
    # every artifact row on the diagnosis thread; each (but the last) still running when the next row's replay began
    assert diagnosed[1:] == [(name, False, name != order[-1] or None) for name in order]


def test_jobs_1_diagnoses_on_the_main_thread(runs) -> None:
    _, _, diagnosed = runs["jobs1"]
    assert [(name, main) for name, main, _ in diagnosed] == [(name, True) for name in ("eager", *(k.name for k in DEFAULT_ORDER))]


def test_jobs_1_builds_and_replays_one_artifact_at_a_time(runs) -> None:
    report, events, _ = runs["jobs1"]
    expected: list[tuple[str, tuple[str, ...]]] = []
    for kind in DEFAULT_ORDER:
        expected += [("build", (kind.name,)), ("replay", (kind.name,))]
    assert events == expected
    assert dict(report.settings)["jobs"] == 1


def test_a_streamed_set_is_replayed_once_after_every_build(runs) -> None:
    _, events, diagnosed = runs["streamed"]
    assert events == [*(("build", (kind.name,)) for kind in DEFAULT_ORDER), ("replay", DEFAULT_KINDS)]
    assert all(main for _, main, _ in diagnosed)


def test_the_three_ways_give_the_same_rows_to_the_bit(runs) -> None:
    reference = report_numbers(runs["jobs1"][0])
    assert [r[0] for r in reference] == ["eager", *DEFAULT_KINDS]  # reports keep the table's order
    assert all(r[1] == "pass" for r in reference), reference
    onnx = next(r for r in reference if r[0] == "onnx")
    assert 1e-8 < onnx[3].mae <= 1e-5  # a real, nonzero ONNX error: the comparison below compares numbers
    for mode in ("jobs2", "streamed"):
        assert report_numbers(runs[mode][0]) == reference, mode


# --- a run that stops while builds are in flight -------------------------------------------------


def test_settle_stops_the_build_in_flight_and_fails_the_queued_ones(tmp_path: Path) -> None:
    ctx = BuildContext(model=torch.nn.Linear(4, 2).eval(), example=torch.zeros(3, 4), opset=17, onnx_exporter="torchscript", threads=1)
    slow_kind = SimpleNamespace(name="slow", module="slow_builder", source=None)
    slow = isolation.start(slow_kind, ctx, tmp_path / "slow.bin", None)
    queued = isolation.start(KINDS_BY_NAME["torchscript-trace"], ctx, tmp_path / "queued.pt", None)
    pid_file = tmp_path / "slow.bin.pid"
    deadline = time.monotonic() + 120
    while not pid_file.is_file():
        assert time.monotonic() < deadline, "the slow build never started"
        time.sleep(0.05)
    child = int(pid_file.read_text())
    server = isolation.SERVICE.server
    assert server is not None and server.in_flight() and not process_gone(child)

    isolation.settle()

    assert server.process.poll() is not None  # the build server has exited
    assert process_gone(child, wait=10), f"the build child {child} outlived its server"
    for pending in (slow, queued):
        with pytest.raises(isolation.BuildCrashed, match="the build server died"):
            pending.wait([])
    assert not (tmp_path / "queued.pt").exists()
    # The next build gets a fresh server and works.
    notes: list[str] = []
    isolation.build(KINDS_BY_NAME["torchscript-trace"], ctx, tmp_path / "after.pt", None, notes)
    with captured_warnings(notes), KINDS_BY_NAME["torchscript-trace"].open_runner(tmp_path / "after.pt", ctx) as runner:
        (got,) = runner.infer({"input": np.ones((2, 4), dtype=np.float32)}).values()  # as the pipeline loads it (torch.jit.load warns)
    with torch.inference_mode():
        assert np.array_equal(got, ctx.model(torch.ones(2, 4)).numpy())


def test_a_run_interrupted_mid_replay_leaves_no_build_behind_and_the_next_run_is_whole(tmp_path: Path) -> None:
    """KeyboardInterrupt while the first artifact replays, with the other builds still queued."""

    def interrupted(line: str) -> None:  # the first artifact's replay begins: the user presses Ctrl-C
        if REPLAYING.fullmatch(line):
            raise KeyboardInterrupt

    config = RunConfig(checkpoint=DEFAULT_CHECKPOINT, arch=DEFAULT_ARCH, golden=DEFAULT_GOLDEN, out_dir=tmp_path / "out", jobs=2,
                       kinds=("torchscript-trace", "onnx"))
    with pytest.raises(KeyboardInterrupt):
        pipeline.run_check(config, interrupted)
    assert not isolation.SERVICE.in_flight()
    report = pipeline.run_check(config)
    assert [(row.name, row.status) for row in report.rows] == [("eager", "pass"), ("torchscript-trace", "pass"), ("onnx", "pass")]
    assert report.rows[2].metrics.mae <= 1e-5 and os.path.getsize(report.rows[2].artifact.path) > 100_000


@pytest.mark.parametrize("one_run", [True, False], ids=["console-script", "in-process"])
def test_the_console_scripts_run_ends_its_helpers_before_it_explains(nudged_checkpoint: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch, one_run: bool) -> None:
    """Issue 43: the console script runs one check, so its build server, load host and runtime hosts end once the builds
    and replays are done; the explain pass that follows (here the onnx row's per-layer table: nudged, it fails MAE 1e-9)
    runs without them in the process tree. A process that runs more checks (pytest, the API) keeps them warm."""
    from export_check.cli import main
    from export_check.run import explain

    seen: list[tuple[Any, dict[str, Any]]] = []
    explained = explain.Explainer.__call__

    def spying(self: Any, obs: Any, *args: Any) -> Any:
        seen.append((isolation.SERVICE.server, dict(isolation.SERVICE.hosts)))
        return explained(self, obs, *args)

    isolation.shutdown()  # the helpers an earlier test of this worker left (an openvino host) are not this run's
    isolation.prewarm(("onnx",))  # the helpers as a run starts them
    server, hosts = isolation.SERVICE.server, dict(isolation.SERVICE.hosts)
    assert server is not None and server.alive() and set(hosts) == {"onnxruntime"}
    monkeypatch.setattr(explain.Explainer, "__call__", spying)
    out = tmp_path / "out"
    assert main(["check", str(nudged_checkpoint), "--arch", DEFAULT_ARCH, "--golden", str(DEFAULT_GOLDEN), "--artifacts", "onnx",
                 "--max-mae", "1e-9", "--out", str(out), "--json", str(tmp_path / "r.json"), "--no-cache", "-q"], one_run=one_run) == 1
    report = json.loads((tmp_path / "r.json").read_text())
    onnx = next(row for row in report["rows"] if row["name"] == "onnx")
    assert onnx["status"] == "fail" and onnx["diagnostics"]["layers"]["layers"]  # explained: its per-layer table is there
    assert seen  # explain ran
    if one_run:  # every helper had ended, and its process with it, before the first row was explained
        assert all(at_server is None and not at_hosts for at_server, at_hosts in seen)
        assert process_gone(server.process.pid) and all(process_gone(h.process.pid) for h in hosts.values())
    else:
        assert all(at_server is server and at_hosts.keys() == hosts.keys() for at_server, at_hosts in seen) and server.alive()
