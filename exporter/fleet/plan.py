"""Each model of a fleet as the ``RunConfig`` its check runs with, built before any work starts, so a
bad checkpoint path, flag or setting of any model fails the whole run at once (exit 2)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import RunConfig
from .spec import FleetModel


@dataclass(frozen=True)
class Job:
    """One model to check: its name, its config and what a cluster task of it needs."""

    name: str
    config: RunConfig
    num_cpus: float = 1.0
    resources: tuple[tuple[str, float], ...] = ()

    @property
    def checkpoint_text(self) -> str:
        return str(self.config.checkpoint)

    @property
    def threads(self) -> int:
        return self.config.threads


def out_folder(name: str, taken: set[str]) -> str:
    """A model's folder under the run's ``--out``: its name made safe, with a hash only when two collide.

    >>> out_folder("models/a.pth", set())
    'models-a.pth'
    """
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "model"
    if slug in taken:
        slug = f"{slug}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    taken.add(slug)
    return slug


def plan(models: Sequence[FleetModel], common: Mapping[str, Any], parallel: bool, source: str | None = None) -> list[Job]:
    """``common``: the command line's explicit check values (python names), over each model's own.
    Every model writes into its own folder under ``--out`` (one out-dir lock each, so models never
    wait for one another), and when models run in parallel each builds its artifacts one at a time
    (``--jobs 1``) unless the command line says otherwise: the cores go to the models. ``source``: the
    fleet file, recorded first among each model's settings files."""
    from ..settings import check_config

    jobs, taken = [], set()  # type: ignore[var-annotated]
    for model in models:
        explicit = {**model.explicit, **common, "checkpoint": model.checkpoint}
        if parallel and "jobs" not in common:
            explicit["jobs"] = 1
        config, _ = check_config(explicit, also_read=() if source is None else (source,))
        changes: dict[str, Any] = {}
        if model.arch_root is not None and "arch" not in common:
            changes["arch_root"] = model.arch_root  # a module arch named by the fleet file imports from beside it
        if "out" in common or "out" not in model.explicit:
            changes["out_dir"] = config.out_dir / out_folder(model.name, taken)
        jobs.append(Job(model.name, dataclasses.replace(config, **changes), model.num_cpus, model.resources))
    return jobs
