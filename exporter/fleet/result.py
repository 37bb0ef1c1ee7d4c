"""The typed report of a fleet run: one ``ModelResult`` per model, in fleet order.

A model's result holds its whole JSON report as ``export-check --json`` writes it (``schema:
export-check-report``), so the fleet views and ``export-check merge`` read the same data whether the
model ran here, in a pool worker, on a Ray node or in another CI job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..results import STATUSES, plural

PASS, FAIL, ERROR = "pass", "fail", "error"
# why a model has no report: a user error stopped its check (exit 2), the check crashed (an
# export-check bug), its worker was lost past its retries, no merged report held it, or nothing
# offered the resources it declares (fleet/placement.py; exit 1: not bad input, a verdict not given)
USAGE, INTERNAL, LOST, MISSING, UNPLACEABLE = "usage", "internal", "lost", "missing", "unplaceable"


@dataclass(frozen=True)
class ModelResult:
    name: str
    checkpoint: str
    report: dict[str, Any] | None  # the model's JSON report; None when ``error`` stopped it
    error: str | None = None  # one line
    error_kind: str | None = None  # USAGE, INTERNAL, LOST, MISSING or UNPLACEABLE
    seconds: float = 0.0
    worker: str = ""  # host:pid that checked it
    attempts: int = 1
    traceback: str | None = None  # an internal error's, for the bug report
    # the pytest plugin recorded or re-approved the model's golden set in this session: every item
    # fails (a recording never passes silently), and so does the model here
    golden_note: str | None = None

    @property
    def status(self) -> str:
        if self.report is None:
            return ERROR
        return PASS if self.report["passed"] and self.golden_note is None else FAIL

    @property
    def exit_code(self) -> int:
        if self.report is not None:
            return max(int(self.report["exit_code"]), int(self.golden_note is not None))
        return 2 if self.error_kind == USAGE else 1

    def row_counts(self) -> dict[str, int]:
        if self.report is None:
            return {s: 0 for s in STATUSES}
        return {s: int(self.report["counts"].get(s, 0)) for s in STATUSES}

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "checkpoint": self.checkpoint, "status": self.status, "exit_code": self.exit_code,
            "error": self.error, "error_kind": self.error_kind, "seconds": self.seconds, "worker": self.worker,
            "attempts": self.attempts, "traceback": self.traceback, "golden_note": self.golden_note, "report": self.report,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelResult:
        return cls(
            name=data["name"], checkpoint=data["checkpoint"], report=data["report"], error=data["error"],
            error_kind=data["error_kind"], seconds=float(data["seconds"]), worker=data["worker"],
            attempts=int(data["attempts"]), traceback=data["traceback"], golden_note=data.get("golden_note"),
        )


@dataclass(frozen=True)
class FleetReport:
    models: tuple[ModelResult, ...]
    seconds: float
    executor: str  # "serial", "processes x2", "ray (local, 2 CPUs)", "merge of 3 reports"
    created: str
    tool_version: str
    fleet_file: str | None = None
    fleet_sha256: str | None = None
    fleet_models: tuple[str, ...] = ()  # every model of the fleet, in every shard
    shard: str | None = None  # "2/4"

    @property
    def exit_code(self) -> int:
        return max((m.exit_code for m in self.models), default=0)

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def counts(self) -> dict[str, int]:
        return {s: sum(m.status == s for m in self.models) for s in (PASS, FAIL, ERROR)}

    def row_counts(self) -> dict[str, int]:
        totals = {s: 0 for s in STATUSES}
        for m in self.models:
            for status, n in m.row_counts().items():
                totals[status] += n
        return totals

    def counts_text(self) -> str:
        c = self.counts()
        return f"{plural(len(self.models), 'model')}: {c[PASS]} passed, {c[FAIL]} failed, {plural(c[ERROR], 'error')}"
