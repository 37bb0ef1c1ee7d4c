"""A fleet run from start to end: models -> configs -> executor -> one ``FleetReport``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import __version__
from ..paths import check_outputs
from .local import run_pool, run_serial, usable_cores
from .plan import plan
from .result import FleetReport, ModelResult
from .spec import Fleet, select_shard


def run_fleet(fleet: Fleet, common: Mapping[str, Any], *, shard: tuple[int, int] | None = None, workers: int | None = None,
              ray_address: str | None = None, on_result: Callable[[ModelResult, int, int], None] | None = None,
              reports: Mapping[str, Path | None] | None = None) -> FleetReport:
    """Check the fleet's models (those of ``shard``): in a pool of ``workers`` processes (default: the
    usable cores, at most one per model), one after another (``workers=1``), or on Ray. ``reports``
    (``{"--json": path}``) are refused before any model starts when one would overwrite what a model's
    check reads: its checkpoint, golden set, architecture, settings file or the fleet file."""
    started = time.perf_counter()
    models = select_shard(fleet, shard)
    workers = max(1, min(workers or usable_cores(), len(models) or 1))
    parallel = ray_address is not None or workers > 1
    jobs = plan(models, common, parallel, fleet.source)  # every config built (and checked) before the first model starts
    for job in jobs:
        check_outputs(job.config, reports)
    finished: list[ModelResult] = []

    def report_one(result: ModelResult) -> None:
        finished.append(result)
        if on_result is not None:
            on_result(result, len(finished), len(jobs))

    results: Sequence[ModelResult]
    if not jobs:
        results, executor = [], "nothing to run"
    elif ray_address is not None:
        from .ray_executor import run_ray

        results, executor = run_ray(jobs, ray_address, report_one)
    elif workers == 1:
        results, executor = run_serial(jobs, report_one), "serial"
    else:
        results, executor = run_pool(jobs, workers, report_one), f"processes x{workers}"
    return FleetReport(
        models=tuple(results), seconds=time.perf_counter() - started, executor=executor,
        created=datetime.now(UTC).isoformat(timespec="seconds"), tool_version=__version__,
        fleet_file=fleet.source, fleet_sha256=fleet.sha256, fleet_models=fleet.names,
        shard=None if shard is None else f"{shard[0]}/{shard[1]}",
    )
