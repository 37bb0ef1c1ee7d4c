"""The pytest plugin's per-session engine: one check per model and options, shared by its items.

:func:`session_state` is the session's state (kept in the pytest config's stash): each model's
:class:`Outcome` (a report, or the one-line user error that stopped it), computed once per run
configuration; the golden workflow run before it (a missing golden set recorded, or under
``--export-check-regen`` re-approved, once per session across every xdist worker, under a lock in
the shared session folder, and refused under CI or ``--export-check-record=never``); build jobs per
worker as the cores allow; and each result written into the session folder for the controller's
session report. :func:`run_config` builds a check's config from keyword options with the same
function the CLI uses. The hooks that use this are ``export_check.pytest_plugin``; the items and
the fixture, ``export_check.pytest_items``. Imports nothing heavy until a check runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .config import RunConfig
    from .results import Report

REGEN_FLAG = "--export-check-regen"
RECORD_FLAG = "--export-check-record"
SESSION_INPUT = "export_check_session"  # the shared session folder, handed to xdist workers


@dataclass(frozen=True)
class Outcome:
    """What one model's check produced: a report, or the one-line user error that stopped it,
    and a note when the golden set was written in this session (which fails every item)."""

    report: Report | None
    error: str | None
    golden_note: str | None


def shared_folder(config: pytest.Config) -> Path:
    """The session's folder shared by the controller and every xdist worker: golden-set notes and
    each checked model's result. Made by the controller (or a run without xdist)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and SESSION_INPUT in workerinput:
        return Path(workerinput[SESSION_INPUT])
    folder = config.stash.get(FOLDER_KEY, None)
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="export-check-session-"))
        config.stash[FOLDER_KEY] = folder
    return folder


FOLDER_KEY = pytest.StashKey[Path]()


def _worker_count(config: pytest.Config) -> int:
    workerinput = getattr(config, "workerinput", None)
    return int(workerinput.get("workercount", 1)) if workerinput is not None else 1


class _Session:
    """Per-session state: reports by run configuration; golden sets written in this session (shared
    with the other xdist workers through the session folder)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.outcomes: dict[str, Outcome] = {}
        self.golden_notes: dict[Path, str] = {}
        self.folder = shared_folder(config)

    @property
    def regen(self) -> bool:
        return bool(self.config.getoption("export_check_regen"))

    def refuses_recording(self) -> str | None:
        """Why a missing golden set may not be recorded in this session (None: it may): under CI
        (``CI`` set to anything but false/0/no) or with ``--export-check-record=never``, a golden set
        is never written into the checkout from the very model it is meant to check."""
        mode = self.config.getoption("export_check_record", "auto")
        if mode == "never":
            return f"{RECORD_FLAG}=never"
        ci = os.environ.get("CI", "").strip().lower()
        if mode == "auto" and ci not in ("", "0", "false", "no") and not self.regen:
            return f"CI={os.environ['CI']} is set (a CI run never records a golden set into the checkout)"
        return None

    def shown_once(self, outcome: Outcome, where: str) -> Outcome:
        """``outcome`` as the item ``where`` reports it: a regen's note (with its diff) in full on the first
        item of the session to fail with it, on any xdist worker; every other item names that one."""
        note = outcome.golden_note
        if note is None or not note.startswith(REGEN_FLAG):
            return outcome
        import dataclasses

        worker = os.environ.get("PYTEST_XDIST_WORKER")
        where = where if worker is None else f"{where} on {worker}"  # under --dist each every worker runs every item
        claim = self.folder / f"shown-{hashlib.sha256(note.encode()).hexdigest()[:16]}"
        staged = self.folder / f".{claim.name}.{os.getpid()}.{id(outcome)}"
        staged.write_text(where)
        try:
            os.link(staged, claim)  # atomic: exactly one item anywhere wins, and its name is there when it does
            first = where
        except FileExistsError:
            first = claim.read_text()
        finally:
            staged.unlink()
        if first == where:
            return outcome
        head = note.splitlines()[0].removesuffix(":")
        return dataclasses.replace(outcome, golden_note=f"{head} (its diff is shown once, under {first}). "
                                                        f"Review the change, commit it, and rerun without {REGEN_FLAG}.")

    def out_dir(self, checkpoint: Path, key: str) -> Path:
        name = f"export-check-{checkpoint.stem}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"
        cache = getattr(self.config, "cache", None)
        if cache is not None:
            return Path(cache.mkdir(name))  # inside .pytest_cache: never in the user's tree
        return Path(tempfile.mkdtemp(prefix=f"{name}-"))

    def outcome(self, checkpoint: Path, options: dict[str, Any]) -> Outcome:
        options = {k: v for k, v in options.items() if v is not None}
        key = json.dumps([str(checkpoint), sorted(options.items())], default=str)
        if key not in self.outcomes:
            self.outcomes[key] = self._run(checkpoint, options, key)
        return self.outcomes[key]

    def _run(self, checkpoint: Path, options: dict[str, Any], key: str) -> Outcome:
        from .errors import ExportCheckError
        from .run.pipeline import run_check

        note = None
        try:
            config, settings = run_config(checkpoint, options, default_out=lambda: self.out_dir(checkpoint, key),
                                          start=self.config.rootpath)
            config = self._jobs(config, options, settings)
            note = self._golden_once(config, settings)
            outcome = Outcome(report=run_check(config), error=None, golden_note=note)
        except ExportCheckError as exc:
            outcome = Outcome(report=None, error=str(exc), golden_note=note)
        self._keep(checkpoint, key, outcome)
        return outcome

    def _jobs(self, config: RunConfig, options: dict[str, Any], settings: dict[str, Any]) -> RunConfig:
        """Build jobs per worker as the cores allow: ``pytest -n 2`` on two cores checks one artifact at a
        time in each worker (``--jobs 1``), rather than four processes fighting for two cores."""
        if "jobs" in options or "jobs" in settings or _worker_count(self.config) < 2:
            return config
        from .fleet.local import usable_cores

        if usable_cores() // _worker_count(self.config) >= 2:
            return config
        import dataclasses

        return dataclasses.replace(config, jobs=1)

    def _keep(self, checkpoint: Path, key: str, outcome: Outcome) -> None:
        """Write this model's result into the session folder, for the controller's session report."""
        from .fleet.result import USAGE, ModelResult
        from .report import json_report, write_text_atomic

        report = None if outcome.report is None else json_report.as_data(outcome.report)
        name = _display_name(self.config, checkpoint)
        result = ModelResult(name=name, checkpoint=str(checkpoint), report=report, error=outcome.error,
                             error_kind=None if outcome.error is None else USAGE,
                             seconds=0.0 if outcome.report is None else outcome.report.seconds,
                             worker=os.environ.get("PYTEST_XDIST_WORKER", "main"), golden_note=outcome.golden_note)
        data = {"key": key, "result": result.to_json()}
        write_text_atomic(self.folder / "results" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json", json.dumps(data))

    def _golden_once(self, config: RunConfig, settings: dict[str, Any]) -> str | None:
        """:meth:`_golden` once per session over every xdist worker: under a lock in the session folder,
        the first worker records (or re-approves) the set and leaves its note; every later one, on
        any worker, reads the note, so every item of that model fails everywhere."""
        from filelock import FileLock

        golden = Path(config.golden).resolve()
        if golden in self.golden_notes:
            return self.golden_notes[golden]
        digest = hashlib.sha256(str(golden).encode()).hexdigest()[:16]
        note_file = self.folder / f"golden-{digest}.json"
        with FileLock(str(self.folder / f"golden-{digest}.lock")):
            if note_file.exists():
                note = json.loads(note_file.read_text())["note"]
            else:
                note = self._golden(config, settings)
                from .report import write_text_atomic

                write_text_atomic(note_file, json.dumps({"golden": str(golden), "note": note}))
        if note is not None:
            self.golden_notes[golden] = note
        return note

    def _golden(self, config: RunConfig, settings: dict[str, Any]) -> str | None:
        """Record a missing golden set, or re-approve an existing one under the regen flag (once per session)."""
        from .errors import GoldenError
        from .golden import lifecycle
        from .golden.goldenset import MANIFEST
        from .golden.preprocess import preprocess_from_args

        golden = Path(config.golden).resolve()
        if golden in self.golden_notes:
            return self.golden_notes[golden]
        missing = not golden.exists() or (golden.is_dir() and not any(golden.iterdir()))
        if not missing and not self.regen:
            return None
        common: dict[str, Any] = dict(
            checkpoint=config.checkpoint, arch=config.arch, arch_kwargs=config.arch_kwargs, arch_root=config.arch_root,
            golden_dir=config.golden, threads=config.threads, batch_size=config.batch_size,
            signature_settings=config.signature_settings,
        )
        if missing:
            refused = self.refuses_recording()
            if refused is not None:
                raise GoldenError(
                    f"{config.golden}: golden set not found; not recorded because {refused}: record it where you can review "
                    f"it (`pytest` on your machine, or `export-check golden record {config.checkpoint} --inputs DIR`), "
                    f"commit it and rerun; or pass {RECORD_FLAG}=missing to record it here"
                )
            inputs = settings.get("inputs")
            if inputs is None:
                raise GoldenError(
                    f"{config.golden}: golden set not found and no inputs folder to record it from; set inputs in "
                    "[tool.export-check], or run `export-check golden record --inputs DIR`"
                )
            preprocess = preprocess_from_args(None, None, None, None, None, settings.get("preprocess"))
            recorded = lifecycle.record_golden(inputs_dir=inputs, preprocess=preprocess, **common)
            note = (
                f"golden set {config.golden} was missing: recorded {len(recorded)} inputs from {inputs} with the "
                f"logits of {config.checkpoint}. Review it, commit it, and rerun."
            )
        else:
            if not (golden / MANIFEST).is_file():
                return None  # not a golden set: run_check reports exactly what is wrong
            diff, written = lifecycle.approve_golden(**common)
            state = "re-approved" if written else "already held exactly these logits; left unchanged"
            note = "\n".join(
                [f"{REGEN_FLAG}: golden set {config.golden} {state} from {config.checkpoint}:", *diff.lines(),
                 f"Review the change, commit it, and rerun without {REGEN_FLAG}."]
            )
        self.golden_notes[golden] = note
        return note


def session_state(config: pytest.Config) -> _Session:
    state = config.stash.get(_SESSION_KEY, None)
    if state is None:
        state = _Session(config)
        config.stash[_SESSION_KEY] = state
    return state


_SESSION_KEY = pytest.StashKey[_Session]()
# The settings file each export_check_models entry names (its "--config"), by resolved checkpoint (pytest_plugin._declared)
DECLARED_SETTINGS_KEY = pytest.StashKey[dict]()


def declared_settings(config: pytest.Config, checkpoint: Path) -> Path | None:
    """The settings file an ``export_check_models`` entry names for ``checkpoint`` (its ``--config``), or None."""
    return config.stash.get(DECLARED_SETTINGS_KEY, {}).get(Path(checkpoint).resolve())


def run_config(checkpoint: Path, options: dict[str, Any], default_out: Any = None,
               start: Path | None = None) -> tuple[RunConfig, dict[str, Any]]:
    """The config of ``export-check check CHECKPOINT --option value ...``, and the settings it read,
    built by the function the CLI builds its config with (``export_check.settings.check_config``).

    Options are the CLI's long flags with ``_`` for ``-``: ``artifacts=["onnx"]``, ``max_mae=1e-4``,
    ``arch_kwargs={"width": 8}``, ``no_cache=True``; None or False leaves one out, a string is read
    as the flag's text, a name the ``check`` command has no flag for is a UsageError. ``out`` defaults
    to a private folder when neither the options nor the settings name one. Settings come from the
    project ``start`` stands in (the session's rootdir; default: the current directory), or ``config``.
    """
    from .options import CHECK, from_keywords
    from .settings import check_config

    explicit = from_keywords(CHECK, options)
    explicit["checkpoint"] = Path(checkpoint)
    return check_config(explicit, default_out=default_out, start=start)


def _display_name(config: pytest.Config, checkpoint: Path) -> str:
    try:
        return str(checkpoint.resolve().relative_to(config.rootpath.resolve()))
    except ValueError:
        return str(checkpoint)
