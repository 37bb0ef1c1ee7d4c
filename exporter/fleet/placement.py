"""Can this machine, or this Ray cluster, serve a job: the one place that decides.

A job (a fleet's model, a lab's target) declares what it needs in Ray's words: ``num_cpus`` and custom
``resources`` (``{ macos = 1 }``). On a Ray cluster the cluster's resources answer (``ray_executor``).
Without Ray, what this machine offers answers: ``CPU`` its usable cores, its system (``linux``,
``macos``/``darwin`` or ``windows``), its machine (``x86_64``, ``arm64``, ...) and its CPU's
precision flags (``avx2``, ``avx512f``, ``avx512_vnni``, ...; ``avx512`` with ``avx512f``), each 1.
Nothing else: a resource this machine cannot vouch for (``gpu``, ``lab_board``) is not offered, so a
target that needs it is an error row naming what it needs and what this machine has, never replayed
here and reported under the target's name.

>>> unmet(1.0, (("macos", 1.0),), {"CPU": 2.0, "linux": 1.0})
['macos=1']
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from typing import Any

from .result import UNPLACEABLE, ModelResult

SYSTEMS = {"Linux": ("linux",), "Darwin": ("macos", "darwin"), "Windows": ("windows",)}


def unmet(num_cpus: float, resources: tuple[tuple[str, float], ...], offered: Mapping[str, float]) -> list[str]:
    """What a job needs beyond ``offered``, as ``name=amount``; empty when it can be served."""
    needs = {"CPU": num_cpus, **dict(resources)}
    return [f"{name}={amount:g}" for name, amount in needs.items() if amount > offered.get(name, 0.0)]


def offered_text(offered: Mapping[str, float]) -> str:
    """``CPU=2, linux=1``: Ray's per-node and per-IP entries (``node:...``, ``accelerator_type:...``) left out."""
    shown = [f"{k}={v:g}" for k, v in sorted(offered.items()) if "." not in k and ":" not in k]
    return ", ".join(shown) or "nothing"


def machine_resources() -> dict[str, float]:
    """What this machine offers a job run here, without Ray."""
    from ..versions import cpu_flags
    from .local import usable_cores

    offered = {"CPU": float(usable_cores())}
    names = [*SYSTEMS.get(platform.system(), (platform.system().lower(),)), platform.machine().lower(), *cpu_flags().split()]
    if "avx512f" in names:
        names.append("avx512")
    offered.update({name: 1.0 for name in names if name})
    return offered


def unplaceable_here(job: Any) -> str | None:
    """Why this machine cannot serve ``job`` (``num_cpus``, ``resources``), or None."""
    offered = machine_resources()
    short = unmet(job.num_cpus, job.resources, offered)
    if not short:
        return None
    return (f"needs {', '.join(short)}, which this machine does not offer (it has {offered_text(offered)}); not run here: "
            "run it where those resources are, with --ray on a cluster whose node offers them")


def unplaceable_result(job: Any, reason: str) -> ModelResult:
    """A job that was not run because nothing offers what it needs: an error row (exit 1), never a pass."""
    return ModelResult(name=job.name, checkpoint=job.checkpoint_text, report=None, error=reason, error_kind=UNPLACEABLE)
