"""What a target's replay was judged against: ``merge`` binds each target's report to its build's.

A target's report (``export-check replay``: it names a ``target``) carries the bundle's provenance: the
checkpoint's sha256, the golden manifest's sha256 and the gates. Its build is the report without a
target of the same checkpoint path among the merged reports (a model's report or a fleet's models; when
several hold that path, the one that agrees). A target whose replay judged another checkpoint, another
golden set or other gates than its build (a bundle left from an earlier build) says nothing about the
build being merged: ``merge`` refuses it with one line naming the file, the field and both values. A
target without a build in the merge is held to the first target of that checkpoint: targets that
replayed different bundles cannot all speak for one model.

>>> first_difference({"a": {"max_mae": 1e-05}}, {"a": {"max_mae": 1.0}})
('a.max_mae', 1e-05, 1.0)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .result import ModelResult

# what a target's replay and its build must agree on: (the field as the refusal names it, its path in a report)
FIELDS = (("checkpoint sha256", ("checkpoint", "sha256")), ("golden manifest sha256", ("golden", "manifest_sha256")),
          ("gates", ("thresholds",)))


def _value(report: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = report
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def identity(report: dict[str, Any]) -> tuple[str, ...]:
    """What a build and its target's replay share: the checkpoint path, then every field of :data:`FIELDS`."""
    return (str(_value(report, ("checkpoint", "path"))),
            *(json.dumps(_value(report, path), sort_keys=True, allow_nan=False) for _, path in FIELDS))


def first_difference(mine: Any, theirs: Any, where: str = "") -> tuple[str, Any, Any] | None:
    """The first leaf where two JSON values differ: its dotted path and both values."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        for key in sorted(set(mine) | set(theirs), key=str):
            found = first_difference(mine.get(key), theirs.get(key), f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
        return None
    return None if mine == theirs else (where, mine, theirs)


def _short(value: Any) -> str:
    text = " ".join((value if isinstance(value, str) else json.dumps(value, sort_keys=True)).split())
    if isinstance(value, str) and len(text) == 64:  # a sha256
        return text[:12]
    return text if len(text) <= 40 else text[:39] + "…"


def _difference(report: dict[str, Any], reference: dict[str, Any]) -> tuple[str, str, str] | None:
    """The first field of :data:`FIELDS` where ``report`` and ``reference`` differ: (the field, its value in each), shortened."""
    for field, path in FIELDS:
        mine, theirs = _value(report, path), _value(reference, path)
        if mine == theirs:
            continue
        if field == "gates":
            where, mine, theirs = first_difference(mine, theirs) or ("", mine, theirs)
            field = f"gates ({where})" if where else field
        return field, _short(mine), _short(theirs)
    return None


def check_targets(found: Iterable[tuple[ModelResult, Path]]) -> None:
    """Refuse the first target report whose replay judged another bundle than its build's (see the module)."""
    builds: dict[str, list[tuple[dict[str, Any], Path]]] = {}
    targets: list[tuple[ModelResult, dict[str, Any], Path]] = []
    for model, path in found:
        if not isinstance(model.report, dict):
            continue
        checkpoint = str(_value(model.report, ("checkpoint", "path")))
        if model.report.get("target"):
            targets.append((model, model.report, path))
        else:
            builds.setdefault(checkpoint, []).append((model.report, path))
    first_target: dict[str, tuple[dict[str, Any], Path]] = {}
    for model, report, path in targets:
        checkpoint = str(_value(report, ("checkpoint", "path")))
        candidates = builds.get(checkpoint) or [first_target.setdefault(checkpoint, (report, path))]
        if any(_difference(report, reference) is None for reference, _ in candidates):
            continue
        reference, where = candidates[0]
        field, mine, theirs = _difference(report, reference) or ("", "", "")
        target = report["target"]
        if reference.get("target"):
            what, fix = f"the replay on {reference['target']}", "replay one bundle, the build's, on every target and merge those reports"
        else:
            what, fix = "its build", (f"replay the current bundle (the one check --bundle wrote with {where}) on {target} "
                                      f"(export-check replay BUNDLE --target {target}) and merge that report")
        if field.startswith("gates"):
            fix += ", or judge both reports with the same gates (export-check judge REPORT --json NEW)"
        raise UsageError(" ".join(f"{path}: {model.name} replayed another bundle than {what} in {where}: {field} {mine} here, "
                                  f"{theirs} there; {fix}".split()))
