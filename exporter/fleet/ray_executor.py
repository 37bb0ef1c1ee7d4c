"""Check a fleet's models on a Ray cluster (``--ray [ADDRESS]``, the optional ``export-check[ray]`` extra).

Each model is one Ray task that calls the one pipeline (``worker.check_model``), declaring what it
needs: ``num_cpus`` (1 unless the fleet file says) and the model's custom ``resources`` (a node
offering ``avx512`` or ``gpu`` for artifacts that need one). The pinned environment travels with
the job (``runtime_env`` ``env_vars``: the hash seed and the BLAS/OpenMP thread pins), so a worker
on another machine computes what this one would. A task whose worker dies is retried by Ray
(``max_retries``); past its retries the model becomes an error row and every other model keeps its
result. Results stream back as tasks finish (``ray.wait``).

``--ray ADDRESS`` joins an existing cluster (``auto``, ``ray://host:10001``, ``host:6379``); each of
its nodes needs export-check installed and the checkpoints, golden sets and cache at the same paths
(a shared filesystem). ``--ray`` alone starts a local cluster with one CPU per usable core.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import UsageError
from .result import LOST, ModelResult

MAX_RETRIES = 2  # a task whose worker died runs again up to this many times
LOCAL = "local"
# what changes numbers or their speed and must be the same on every worker
PINNED_ENV = ("PYTHONHASHSEED", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def pinned_env(jobs: Sequence[Any]) -> dict[str, str]:
    """The environment every worker runs with: this process's pins, else the run's own (the hash
    seed 0, BLAS/OpenMP threads = the models' ``--threads``, as torch and onnxruntime are pinned)."""
    threads = str(max((job.threads for job in jobs), default=1))
    env = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads}
    env.update({name: os.environ[name] for name in PINNED_ENV if name in os.environ})
    return env


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray: pip install 'export-check[ray]'") from None
    return ray


def _lost(job: Any, exc: BaseException) -> ModelResult:
    text = " ".join(str(exc).split())[:300]
    return ModelResult(name=job.name, checkpoint=job.checkpoint_text, report=None, error_kind=LOST, attempts=1 + MAX_RETRIES,
                       error=f"the Ray worker checking this model was lost {1 + MAX_RETRIES} times ({type(exc).__name__}: {text}); no rows")


def _unplaceable(job: Any, cluster: dict[str, float]) -> str | None:
    from .placement import offered_text, unmet

    short = unmet(job.num_cpus, job.resources, cluster)
    if not short:
        return None
    return f"no node of the Ray cluster offers {', '.join(short)} (the cluster has {offered_text(cluster)}); not checked"


def run_ray(jobs: Sequence[Any], address: str, on_result: Callable[[ModelResult], None], cpus: int | None = None,
            task: Callable[[Any], ModelResult] | None = None) -> tuple[list[ModelResult], str]:
    """Run every job as a Ray task (``task``: a model's check, ``worker.check_model``, or a target's
    replay, ``replays.replay_target``); results in the order of ``jobs``, and how the cluster was reached.
    A job has ``name``, ``num_cpus``, ``resources``, ``threads`` and ``checkpoint_text`` (``plan.Job``)."""
    ray = _import_ray()
    from .placement import unplaceable_result
    from .worker import check_model

    local = address == LOCAL
    started_here = not ray.is_initialized()
    if started_here:
        init: dict[str, Any] = dict(runtime_env={"env_vars": pinned_env(jobs)}, include_dashboard=False, log_to_driver=False,
                                    configure_logging=False)
        try:
            if local:
                ray.init(num_cpus=cpus, **init)
            else:
                ray.init(address=address, **init)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise UsageError(f"--ray {address}: cannot reach the Ray cluster ({' '.join(str(exc).split())[:200]}); "
                             "check the address, or pass --ray alone for a local cluster") from None
    try:
        cluster = {k: float(v) for k, v in ray.cluster_resources().items()}
        how = f"ray ({'local' if local else address}, {cluster.get('CPU', 0):g} CPUs)"
        remote = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(task or check_model)
        done: dict[str, ModelResult] = {}
        pending: dict[Any, Any] = {}
        for job in jobs:
            reason = _unplaceable(job, cluster)
            if reason is not None:  # it would wait forever for a node that is not there
                done[job.name] = unplaceable_result(job, reason)
                on_result(done[job.name])
                continue
            ref = remote.options(num_cpus=job.num_cpus, resources=dict(job.resources) or None, name=f"export-check {job.name}").remote(job)
            pending[ref] = job
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                job = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.RayTaskError,
                        ray.exceptions.TaskUnschedulableError, ray.exceptions.RaySystemError) as exc:
                    result = _lost(job, exc)
                done[job.name] = result
                on_result(result)
        return [done[job.name] for job in jobs], how
    finally:
        if started_here:
            ray.shutdown()
