"""Check a fleet's models in parallel on this machine: a standard-library process pool.

``concurrent.futures.ProcessPoolExecutor`` over the forkserver start method (fork is unsafe once
torch has started its threads; forkserver starts each worker from a clean, single-threaded server).
Results stream back as they finish. A worker that dies (a native crash in a model's check) breaks
the whole pool, and with it every model still waiting: those are checked again, each in a fresh
one-worker pool, so the crash costs its own model only (an error row), nothing else.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from .plan import Job
from .result import LOST, ModelResult
from .worker import check_model

OnResult = Callable[[ModelResult], None]


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def run_serial(jobs: Sequence[Job], on_result: OnResult) -> list[ModelResult]:
    """One model after another in this process (``--workers 1``)."""
    results = []
    for job in jobs:
        results.append(check_model(job))
        on_result(results[-1])
    return results


def run_pool(jobs: Sequence[Job], workers: int, on_result: OnResult) -> list[ModelResult]:
    """Every model in a pool of ``workers`` processes; results in the order of ``jobs``."""
    done: dict[str, ModelResult] = {}
    lost = _pool_pass(jobs, workers, done, on_result)
    for job in lost:  # alone now: if it dies again, it was this model that killed the worker
        if not _pool_pass([job], 1, done, on_result):
            continue
        result = ModelResult(name=job.name, checkpoint=str(job.config.checkpoint), report=None, error_kind=LOST, attempts=2,
                             error="the worker process checking this model died (a native crash?), also when it was checked alone; no rows")
        done[job.name] = result
        on_result(result)
    return [done[job.name] for job in jobs]


def _pool_pass(jobs: Sequence[Job], workers: int, done: dict[str, ModelResult], on_result: OnResult) -> list[Job]:
    """Run ``jobs``; return the ones a dead worker took down with the pool."""
    context = multiprocessing.get_context("forkserver")
    lost: list[Job] = []
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=context) as pool:
        # the forkserver was started with the environment of its time: hand each worker this run's cache key
        from ..cache.secret import KEY_ENV, key_file_path

        env = {KEY_ENV: str(key_file_path())}
        pending: dict[Future[ModelResult], Job] = {pool.submit(check_model, job, env): job for job in jobs}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                job = pending.pop(future)
                try:
                    result = future.result()
                except BrokenProcessPool:
                    lost.append(job)
                    continue
                done[job.name] = result
                on_result(result)
    return lost
