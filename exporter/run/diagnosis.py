"""The diagnosis of the run's rows, around the replay (``run.observe``): which golden input the eager model fails on,
eager's batch sizes measured before anything is built, and each replay pass's rows diagnosed (batch sizes,
determinism, latency: ``diagnostics.run.Diagnoser``) through the runners that pass used, inline or on a second thread
while the next pass replays (``RowDiagnosis``). Measurements only, like the observer.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import numpy as np

from ..artifacts import ArtifactKind, BuildContext
from ..config import RunConfig
from ..diagnostics.run import Diagnoser
from ..diagnostics.run import eager_sizes_ahead as eager_sizes_at
from ..diagnostics.trace import ReplayTrace
from ..errors import ArchitectureError, ArtifactError, describe_exception
from ..feeds import length
from ..golden.batches import GoldenBatches
from ..golden.goldenset import GoldenSet
from ..records import Observation


def eager_failure(config: RunConfig, golden: GoldenSet, start: int, feeds: dict[str, np.ndarray], exc: BaseException,
                  infer: Any) -> ArchitectureError:
    """The run's one-line error when eager raises on the golden batch at ``start`` (``feeds``), or returns
    outputs the golden set does not have: the input file and the exception. The batch's samples are run
    one at a time to name the first that fails alone; when none does, the line names the batch."""
    count = length(feeds, golden.signature)
    items = golden.inputs[start : start + count]
    fix = "check that --arch and the golden set's preprocessing match the model, or re-record the golden set"
    if isinstance(exc, ArtifactError):  # the outputs do not fit the golden set: every input would say so
        return ArchitectureError(f"{config.checkpoint}: {exc} (on the golden input {golden.root / items[0].file}); the golden set holds "
                                 f"outputs {', '.join(golden.signature.output_names)}: check --arch, or re-record the golden set")
    for offset, item in enumerate(items if count > 1 else ()):
        one = {spec.name: np.take(feeds[spec.name], [offset], axis=spec.batch_axis) for spec in golden.signature.inputs}
        try:
            infer(one)
        except Exception as alone:  # any exception of the user's model: its message is the line
            return ArchitectureError(f"{config.checkpoint}: the eager model fails on the golden input {golden.root / item.file} "
                                     f"({describe_exception(alone)}); {fix}")
    shown = golden.root / items[0].file if count == 1 else f"{golden.root / items[0].file} .. {items[-1].file} (a batch of {count})"
    return ArchitectureError(f"{config.checkpoint}: the eager model fails on the golden input {shown} ({describe_exception(exc)}); {fix}")


@contextlib.contextmanager
def inline(clock: dict[str, float]) -> Any:
    """Counts the time of its block as diagnostics run on the main thread (``replay/diagnostics_inline``)."""
    began = time.perf_counter()
    try:
        yield
    finally:
        clock["replay/diagnostics_inline"] += time.perf_counter() - began


class RowDiagnosis:
    """The diagnosis of one replay pass's rows (``Diagnoser.observe`` through the runners the replay
    used), run on a thread of its own with ``background`` (``--jobs 2`` and more)
    or at once, and the pass's runners closed when it is done.

    In the background it runs on the second core while the main thread replays the next row: on a
    costly model the batch-size runs are a sixth of the replay's cost, and this takes them off the run's
    critical path (benchmarks/large.py; BENCHMARKS.md). At most two runners are open at once: this
    row's and the next one's. The two threads share nothing they write: the replay trace is keyed by
    row, warnings are captured per thread (artifacts._common.captured_warnings), file-descriptor
    redirects are serialised, the progress line is locked. Latency measured while the other thread
    runs shares the machine with it, as it shares it with the builds. The thread is a daemon: an
    interrupted run does not wait for it.
    """

    def __init__(self, diagnoser: Diagnoser, run_failed: set[str], observed: list[tuple[ArtifactKind, Observation, Any | None]],
                 ctx: BuildContext, runner_stack: contextlib.ExitStack) -> None:
        """``run_failed``: the replay's kinds opened and then failed on some batch (``observe.Replay.run_failed``)."""
        self.diagnoser, self.run_failed, self.observed, self.ctx = diagnoser, run_failed, observed, ctx
        self.runner_stack = runner_stack
        self._thread: threading.Thread | None = None
        self._result: dict[str, Observation] = {}
        self._raised: BaseException | None = None

    def _run(self) -> None:
        try:
            with self.runner_stack:
                for kind, obs, runner in self.observed:
                    self._result[kind.name] = self.diagnoser.observe(obs, self.ctx, runner, kind.name in self.run_failed)
        except BaseException as exc:  # re-raised on the main thread by result()
            self._raised = exc

    def start(self, background: bool, clock: dict[str, float]) -> None:
        if background:
            names = ", ".join(kind.name for kind, _, _ in self.observed)
            self._thread = threading.Thread(target=self._run, name=f"export-check diagnose {names}", daemon=True)
            self._thread.start()
        else:
            with inline(clock):
                self._run()

    def result(self, clock: dict[str, float]) -> dict[str, Observation]:
        if self._thread is not None:
            began = time.perf_counter()
            self._thread.join()
            clock["replay/diagnostics_waited"] += time.perf_counter() - began
        if self._raised is not None:
            raise self._raised
        return self._result


def eager_sizes_ahead(config: RunConfig, golden: GoldenSet, batches: GoldenBatches, model: Any) -> dict[int, Any] | None:
    """Eager's share of the batch-size check, run before the builds (only for a set held in memory)."""
    probe = batches.head(ReplayTrace.for_run(len(golden), config.batch_size).probe_count)
    return None if probe is None else eager_sizes_at(model, probe, config.batch_size, golden.signature, len(golden), config.diagnostics_budget)
