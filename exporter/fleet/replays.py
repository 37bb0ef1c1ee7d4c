"""Many targets at once: ``export-check replay --targets lab.toml [--ray [ADDRESS]]``.

A targets file names each target, the bundle it replays and what a Ray task of it needs::

    [targets.mac-m2]
    bundle = "model.bundle"          # relative to this file
    resources = { macos = 1 }        # a node that offers it (Ray custom resources)
    [targets.avx512-server]
    bundle = "model.bundle"
    resources = { avx512 = 1 }
    num-cpus = 2

Each target is one replay (``replay.replay_bundle``): one after another here, or one Ray task each on a
cluster (``fleet.ray_executor.run_ray``, the executor fleets of checks use: results stream back as they
finish; a target no node offers is an error row at once, never a task waiting forever). Without ``--ray`` a
target whose resources this machine does not offer (``fleet/placement.py``: a Mac's ``macos = 1`` on Linux)
is an error row too, never replayed here under its name. The result is one fleet report, its models named
``checkpoint @ target`` as ``merge`` names them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from .. import __version__
from ..errors import UsageError
from .result import FleetReport, ModelResult
from .spec import _number

KEYS = ("bundle", "num-cpus", "resources")


@dataclass(frozen=True)
class ReplayJob:
    """One target: the bundle it replays, where its artifacts go, and what a cluster task of it needs."""

    name: str
    bundle: Path
    out_dir: Path
    num_cpus: float = 1.0
    resources: tuple[tuple[str, float], ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=())  # set in the worker first: the key file the bundle is checked with

    @property
    def checkpoint_text(self) -> str:
        return str(self.bundle)

    @property
    def threads(self) -> int:
        return 1


def parse_targets(path: Path, out_dir: Path) -> list[ReplayJob]:
    """Read a targets file; every problem is one line naming the file, the target and the key."""
    from ..cache.secret import KEY_ENV
    from ..parsing import load_toml

    data = load_toml(path, "targets file", "fix --targets or the targets file")
    source, base = str(path), path.resolve().parent
    unknown = [k for k in data if k != "targets"]
    targets = data.get("targets")
    if unknown or not isinstance(targets, dict) or not targets:
        raise UsageError(f"{source}: a targets file holds [targets.NAME] tables, each with bundle = \"...\"; "
                         + (f"unknown table {unknown[0]!r}" if unknown else "none found"))
    env = ((KEY_ENV, os.environ[KEY_ENV]),) if os.environ.get(KEY_ENV) else ()
    jobs = []
    for name, table in targets.items():
        where = f"{source}: targets.{name}"
        if not isinstance(table, dict):
            raise UsageError(f"{where} must be a table ([targets.{name}] with bundle = \"...\")")
        extra = [k for k in table if k not in KEYS]
        if extra:
            raise UsageError(f"{where}: unknown key {extra[0]!r}; a target has {', '.join(KEYS)}")
        bundle = table.get("bundle")
        if not isinstance(bundle, str) or not bundle.strip() or "\x00" in bundle:
            raise UsageError(f"{where}: bundle must be the path of a bundle (check --bundle PATH), got {bundle!r}")
        resources = table.get("resources", {})
        if not isinstance(resources, dict):
            raise UsageError(f"{where}: resources must be a table of custom resource amounts, e.g. {{ macos = 1 }}, got {resources!r}")
        given = Path(os.path.expanduser(bundle))
        jobs.append(ReplayJob(name=str(name), bundle=given if given.is_absolute() else base / given, out_dir=out_dir / str(name),
                              num_cpus=_number(table.get("num-cpus", 1), f"{where}: num-cpus"),
                              resources=tuple(sorted((str(k), _number(v, f"{where}: resources.{k}")) for k, v in resources.items())),
                              env=env))
    return jobs


def replay_target(job: ReplayJob) -> ModelResult:
    """One target's replay, wherever the executor runs it; whatever stops it is that target's error row."""
    os.environ.update(dict(job.env))
    from ..replay import replay_bundle
    from .worker import as_result

    return as_result(f"{job.bundle} @ {job.name}", str(job.bundle), lambda: replay_bundle(job.bundle, job.out_dir, job.name),
                     lambda report: f"{report.checkpoint.path} @ {job.name}")


def run_replays(jobs: list[ReplayJob], ray_address: str | None, on_result: Callable[[ModelResult], None]) -> FleetReport:
    """Every target replayed: one after another here, or each a Ray task (``ray_address``)."""
    started = time.perf_counter()
    if ray_address is not None:
        from .ray_executor import run_ray

        results, executor = run_ray(jobs, ray_address, on_result, task=replay_target)
    else:
        from .placement import unplaceable_here, unplaceable_result

        results, executor = [], "serial"
        for job in jobs:  # what a target declares it needs decides here too, as on a cluster
            reason = unplaceable_here(job)
            results.append(replay_target(job) if reason is None else unplaceable_result(job, reason))
            on_result(results[-1])
    return FleetReport(models=tuple(results), seconds=time.perf_counter() - started, executor=executor,
                       created=datetime.now(UTC).isoformat(timespec="seconds"), tool_version=__version__)
