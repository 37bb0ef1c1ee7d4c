"""The run's artifact builds on top of the build isolation: outcomes, jobs and their order.

A failure to build is the artifact's own ``error`` (never the run's); the builds of a run go in
``BUILD_ORDER`` (a derived kind after its source), restored from the cache when it has them.

Builds write into a private folder of the run (``.building-*`` inside ``--out``, so that committing
is a rename on one filesystem), never into ``--out`` itself: only this process commits a file there
(:func:`commit`), after its build reported success and the file checked out as a regular, non-empty
file. A build process that outlived a killed run (lifeline.py makes that rare) can therefore only
ever write into a folder no one reads, which the next run on that ``--out`` removes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..artifacts import BUILD_ORDER, KINDS_BY_NAME, ArtifactKind, BuildContext, parts
from ..artifacts._common import captured_warnings
from ..artifacts.base import NotApplicable
from ..cache.store import RESTORED
from ..errors import ArtifactError, describe_exception
from ..files import fsync_dir
from . import isolation
from .protocol import LoadFailure

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
    # Built, but did not load in a process that has imported nothing of the architecture (builder/server.py's load host)
    load_failure: LoadFailure | None = None
    # The outputs of the first golden sample as that process computed them (protocol.first_sample): the reload
    # here runs it again and must compute the same (observe.clean_process_difference); None: not probed there
    clean_first: dict[str, Any] | None = None


class BuildJob:
    """One artifact's build: sent to the build server at construction, its outcome on :meth:`result`.

    Isolated builds run in a child of the build server (exporter/builder/isolation.py), one after
    another in the order they were started, while this process goes on. A failure becomes ``error``.
    """

    def __init__(self, kind: ArtifactKind, ctx: BuildContext, path: Path, source: Path | None, timeout: float | None = None,
                 target: Path | None = None, runtimes: tuple[str, ...] = (), read_later: bool = True) -> None:
        # ``path``: where the build writes; ``target``: where this process commits it once it succeeded (None: ``path`` itself);
        # ``read_later``: a derived kind of this run may build from the file at ``path`` after the commit (commit)
        self.kind, self.path, self.target, self.read_later = kind, path, target, read_later
        self._began = time.perf_counter()
        self._outcome: BuildOutcome | None = None
        self._notes: list[str] = []
        self._pending: isolation.PendingBuild | None = None
        try:
            with captured_warnings(self._notes):
                self._pending = isolation.start(kind, ctx, path, source, timeout, runtimes)
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
                outcome.load_failure = self._pending.load
                outcome.clean_first = self._pending.first
                outcome.path = self.path if self.target is None else commit(self.path, self.target, self.read_later)
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
        for path in (self.path, self.target):
            if path is not None:
                parts.remove(path)  # never leave a stale file (or its .data) from an earlier run looking like this one's
        outcome.seconds = time.perf_counter() - self._began
        return outcome


def start_build(kind: ArtifactKind, ctx: BuildContext, path: Path, source: Path | None, timeout: float | None = None,
                target: Path | None = None, runtimes: tuple[str, ...] = (), read_later: bool = True) -> BuildJob:
    """Start building one artifact file (in the build server when isolated); ``.result()`` waits for it
    and, given a ``target``, commits the file there. ``runtimes``: those of every kind the run builds;
    ``read_later``: a derived kind may build from the file at ``path`` after the commit."""
    return BuildJob(kind, ctx, path, source, timeout, target, runtimes, read_later)


def build_artifact(kind: ArtifactKind, ctx: BuildContext, path: Path, source: Path | None, timeout: float | None = None,
                   target: Path | None = None) -> BuildOutcome:
    """Build one artifact file and wait for it, capturing its exporter's warnings; a failure becomes ``error``."""
    return start_build(kind, ctx, path, source, timeout, target).result()


PRIVATE_PREFIX = ".building-"


def commit(built: Path, target: Path, read_later: bool = True) -> Path:
    """Put the artifact a build wrote at ``built`` (in the run's private folder) at ``target``: every file of
    it (artifacts/parts.py: an ONNX graph's external ``.data`` first, the graph last), each one atomically;
    a companion ``target`` had from an earlier run and this build has not is removed.

    A companion (an ONNX graph's ``.data``, gigabytes) is never hard-linked: onnx refuses to read external
    data from a file with more than one link ("a potential hardlink attack"), which would fail a derived
    kind building from the private file, and anyone's ``onnx.load`` of the file in ``--out``. It is
    renamed into ``target``'s folder, no byte copied, unless ``read_later`` (a derived kind of this run
    builds from the private file), when it is copied.

    Only a regular, non-empty file is committed (never a link). It is hard-linked (copied where the
    filesystem has no hard links) to a temporary sibling of ``target``, then renamed onto it: the
    private file stays whole for a derived kind that is building from it at this moment, and
    ``target`` is the previous file or the complete new one. (A builder replaces its file, never
    rewrites it in place, so the link cannot change after this.)
    """
    info = os.lstat(built)
    if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
        raise ArtifactError(f"the build reported success but left no artifact file ({built.name} is not a non-empty regular file)")
    built_names = {p.name for p in parts.companions(built)}
    for name in parts.companion_names(built.name):
        if name in built_names:
            _commit_file(built.with_name(name), target.with_name(name), "copy" if read_later else "move")
        else:
            with contextlib.suppress(FileNotFoundError):
                target.with_name(name).unlink()
    return _commit_file(built, target)


def _commit_file(built: Path, target: Path, how: str = "link") -> Path:
    """``built`` at ``target`` atomically: hard-linked (copied where the filesystem has no hard links), or
    ``how`` "copy" or "move" (a rename on this filesystem)."""
    if how == "move":
        os.replace(built, target)
        fsync_dir(target.parent)
        return target
    tmp = target.with_name(f".{target.name}.commit-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        try:
            if how == "copy":
                raise OSError("copied")
            os.link(built, tmp, follow_symlinks=False)
        except OSError:
            shutil.copyfile(built, tmp, follow_symlinks=False)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    fsync_dir(target.parent)
    return target


def private_folder(out_dir: Path) -> Path:
    """A fresh private build folder in ``out_dir``, after removing any an earlier run left behind.

    Called with the out-dir lock held (files.locked_out_dir) and every run's builds happen under that
    lock, so a ``.building-*`` folder found now belongs to a run that is gone. Only real folders are
    removed (a link of that name is unlinked, never followed).
    """
    for stale in out_dir.glob(f"{PRIVATE_PREFIX}*"):
        with contextlib.suppress(OSError):
            if stale.is_symlink() or not stale.is_dir():
                stale.unlink()
            else:
                shutil.rmtree(stale)
    return Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX, dir=out_dir))


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
        self.private = private_folder(out_dir)
        # removed once every build is in; at the latest when this object goes, or at exit
        self._remove_private = weakref.finalize(self, shutil.rmtree, self.private, ignore_errors=True)
        # the cache asked once for every file it may hold (each put in --out), then the rest built
        restored = cache.restore_files({kind.name: out_dir / kind.filename() for kind in self.order}) if cache is not None else {}
        for kind in self.order:
            if kind.name in restored:
                found = restored[kind.name]
                self.outcomes[kind.name] = BuildOutcome(path=found.path, details=found.details, notes=list(found.notes), cache=RESTORED)
            elif ahead:
                self.jobs[kind.name] = self._start(kind)

    def _start(self, kind: ArtifactKind) -> BuildJob:
        """Start ``kind``'s build from the file it derives from: the cache's copy, committed in ``--out``, or the
        private one its source's build wrote."""
        source = None
        if kind.source is not None:
            folder = self.out_dir if self.outcomes.get(kind.source, BuildOutcome()).cache == RESTORED else self.private
            source = folder / KINDS_BY_NAME[kind.source].filename()
        return start_build(kind, self.ctx, self.private / kind.filename(), source, self.timeout,
                           target=self.out_dir / kind.filename(), runtimes=tuple(sorted({k.runtime for k in self.order})),
                           read_later=any(k.source == kind.name for k in self.order))

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
            parts.remove(self.out_dir / kind.filename())  # an earlier run's file must not pass for this run's
            if source.not_applicable:
                outcome = BuildOutcome(error=f"not applicable: it is derived from {kind.source}, which does not apply", not_applicable=True)
            else:
                outcome = BuildOutcome(error=f"not built: it is derived from {kind.source}, which failed")
        elif job is not None:
            outcome = job.result()
        else:
            outcome = self._start(kind).result()
        self.waited += time.perf_counter() - began
        self.outcomes[name] = outcome
        if all(k.name in self.outcomes for k in self.order):
            self._remove_private()
        return outcome
