"""Check one model of a fleet: the one pipeline (``run_check``), its report as JSON data.

Runs wherever the executor puts it (this process, a pool worker, a Ray task). Whatever stops one
model's check becomes that model's error result, never the fleet's: a user error keeps its one line,
a bug in export-check its traceback too.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

from .plan import Job
from .result import INTERNAL, USAGE, ModelResult


def where() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def as_result(name: str, checkpoint: str, run: Callable[[], Any], named: Callable[[Any], str] | None = None) -> ModelResult:
    """``run()``'s report as one model of a fleet report (``named`` names it from the report); whatever stops
    it is that model's error result: a user error keeps its one line, a bug in export-check its traceback too."""
    from ..errors import ExportCheckError
    from ..report import json_report

    started = time.perf_counter()
    common: dict[str, Any] = dict(checkpoint=checkpoint, worker=where())
    try:
        report = run()
    except ExportCheckError as exc:
        return ModelResult(name=name, report=None, error=str(exc), error_kind=USAGE, seconds=time.perf_counter() - started, **common)
    except Exception as exc:  # noqa: BLE001 - one model's bug must not cost the other models their results
        return ModelResult(name=name, report=None, error=f"internal error: {type(exc).__name__}: {exc}", error_kind=INTERNAL,
                           seconds=time.perf_counter() - started, traceback=traceback.format_exc(), **common)
    # the data `--json` writes: what merge reads back, so a merged report equals the serial one
    data = json_report.as_data(report)
    return ModelResult(name=name if named is None else named(report), report=data, seconds=time.perf_counter() - started, **common)


def check_model(job: Job, env: dict[str, str] | None = None) -> ModelResult:
    """``env``: variables the parent's run depends on (the cache key's path), set in this worker first."""
    os.environ.update(env or {})
    from ..run.pipeline import run_check

    return as_result(job.name, str(job.config.checkpoint), lambda: run_check(job.config))
