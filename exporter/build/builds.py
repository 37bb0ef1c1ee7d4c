"""The run's artifact builds on top of the build isolation: outcomes, jobs and their order.

A failure to build is the artifact's own ``error`` (never the run's); the builds of a run go in
``BUILD_ORDER`` (a derived kind after its source), restored from the cache when it has them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..artifacts import BUILD_ORDER, KINDS_BY_NAME, ArtifactKind, BuildContext
from ..artifacts._common import captured_warnings
from ..artifacts.base import NotApplicable
from ..cache.store import RESTORED, restore_artifact
from ..errors import describe_exception
from . import isolation

if TYPE_CHECKING:
    from ..cache.store import ArtifactCache
    from ..config import RunConfig

Progress = Callable[[str], None]


@dataclass
class BuildOutcome:
    path: Path | None = None
    seconds: float | None = None
    error: str | None = None
    details: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    cache: str | None = None  # cache.RESTORED when the file came from the artifact cache
    not_applicable: bool = False  # ``error`` says why the kind does not apply (artifacts.base.NotApplicable)


class BuildJob:
    """One artifact's build: sent to the build server at construction, its outcome on :meth:`result`.

    Isolated builds run in a child of the build server (exporter/build/isolation.py), one after
    another in the order they were started, while this process goes on. A failure becomes ``error``.
    """

    def __init__(self, kind: ArtifactKind, ctx: BuildContext, path: Path, source: Path | None, timeout: float | None = None) -> None:
        self.kind, self.path = kind, path
        self._began = time.perf_counter()
        self._outcome: BuildOutcome | None = None
        self._notes: list[str] = []
        self._pending: isolation.PendingBuild | None = None
        try:
            with captured_warnings(self._notes):
                self._pending = isolation.start(kind, ctx, path, source, timeout)
        except Exception as exc:  # any exporter failure is this artifact's error, not the run's
            self._outcome = self._failed(BuildOutcome(notes=self._notes), f"build failed: {describe_exception(exc)}")

    def done(self) -> bool:
        return self._outcome is not None or (self._pending is not None and self._pending.done())

    def result(self) -> BuildOutcome:
        if self._outcome is None:
            assert self._pending is not None
            outcome = BuildOutcome(notes=self._notes)
            try:
                with captured_warnings(outcome.notes):
                    outcome.details = self._pending.wait(outcome.notes)
                outcome.path = self.path
            except NotApplicable as exc:  # the kind does not apply to this model: a row of its own
                self._failed(outcome, str(exc))
                outcome.not_applicable = True
            except (isolation.BuildCrashed, isolation.SourceFailed) as exc:
                self._failed(outcome, str(exc))
            except Exception as exc:  # any exporter failure is this artifact's error, not the run's
                self._failed(outcome, f"build failed: {describe_exception(exc)}")
            outcome.seconds = self._pending.seconds if self._pending.seconds is not None else time.perf_counter() - self._began
            self._outcome = outcome
        return self._outcome

    def _failed(self, outcome: BuildOutcome, error: str) -> BuildOutcome:
        outcome.error = error
        with contextlib.suppress(OSError):
            self.path.unlink()  # never leave a stale file from an earlier run looking like this one's
        outcome.seconds = time.perf_counter() - self._began
        return outcome


def start_build(kind: ArtifactKind, ctx: BuildContext, path: Path, source: Path | None, timeout: float | None = None) -> BuildJob:
    """Start building one artifact file (in the build server when isolated); ``.result()`` waits for it."""
    return BuildJob(kind, ctx, path, source, timeout)


def build_artifact(kind: ArtifactKind, ctx: BuildContext, path: Path, source: Path | None, timeout: float | None = None) -> BuildOutcome:
    """Build one artifact file and wait for it, capturing its exporter's warnings; a failure becomes ``error``."""
    return start_build(kind, ctx, path, source, timeout).result()


class Builds:
    """The run's artifact files, in ``BUILD_ORDER``: restored from the cache, or built.

    ``ahead``: every build is sent to the build server at once, and :meth:`get` waits for one, so
    the caller replays each artifact while the next ones build on the other core (``--jobs 2``).
    Otherwise each is built when :meth:`get` asks for it (``--jobs 1``). ``waited`` is the time
    this process spent waiting for builds.
    """

    def __init__(self, config: RunConfig, ctx: BuildContext, out_dir: Path, progress: Progress,
                 cache: ArtifactCache | None, ahead: bool) -> None:
        wanted = set(config.selected_kinds)
        # A derived kind needs its source built first, even if the source itself is not reported.
        wanted |= {source for name in config.selected_kinds if (source := KINDS_BY_NAME[name].source) is not None}
        self.order = [k for k in BUILD_ORDER if k.name in wanted]
        self.ctx, self.out_dir, self.progress, self.timeout = ctx, out_dir, progress, config.build_timeout or None
        self.outcomes: dict[str, BuildOutcome] = {}
        self.jobs: dict[str, BuildJob] = {}
        self.waited = 0.0
        for kind in self.order:
            restored = restore_artifact(cache, kind.name, out_dir / kind.filename()) if cache is not None else None
            if restored is not None:
                self.outcomes[kind.name] = BuildOutcome(path=restored.path, details=restored.details, notes=list(restored.notes), cache=RESTORED)
            elif ahead:
                self.jobs[kind.name] = start_build(kind, ctx, out_dir / kind.filename(), self._source_path(kind), self.timeout)

    def _source_path(self, kind: ArtifactKind) -> Path | None:
        return None if kind.source is None else self.out_dir / KINDS_BY_NAME[kind.source].filename()

    def get(self, name: str) -> BuildOutcome:
        """``name``'s outcome, waiting for (or running) its build."""
        if name in self.outcomes:
            return self.outcomes[name]
        kind = KINDS_BY_NAME[name]
        source = self.get(kind.source) if kind.source else None
        began = time.perf_counter()
        job = self.jobs.get(name)
        if job is None or not job.done():
            self.progress(f"building {name}")
        if source is not None and (source.error or source.path is None):
            if job is not None:
                job.result()  # the server refused it (in-process, it may have built from an earlier run's file)
            with contextlib.suppress(OSError):
                (self.out_dir / kind.filename()).unlink()  # an earlier run's file must not pass for this run's
            if source.not_applicable:
                outcome = BuildOutcome(error=f"not applicable: it is derived from {kind.source}, which does not apply", not_applicable=True)
            else:
                outcome = BuildOutcome(error=f"not built: it is derived from {kind.source}, which failed")
        elif job is not None:
            outcome = job.result()
        else:
            outcome = build_artifact(kind, self.ctx, self.out_dir / kind.filename(), self._source_path(kind), self.timeout)
        self.waited += time.perf_counter() - began
        self.outcomes[name] = outcome
        return outcome
