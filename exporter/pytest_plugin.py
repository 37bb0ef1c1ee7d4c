"""pytest plugin: export-check's verdicts as test items, over the same pipeline as the CLI.

Declare checkpoints in the pytest configuration; each (model, artifact) pair becomes a test item
with an id like ``model.pth::onnx-simplified`` (plus ``model.pth::eager``: is this the approved
model?). Settings come from ``[tool.export-check]``/``export-check.toml`` exactly as for
``export-check model.pth`` run in the session's rootdir (its folder and parents up to the project root,
the first folder holding ``.git``; never the checkpoint's folder), because the CLI and the plugin build the config with the same
function (``exporter/options.py``)::

    [tool.pytest.ini_options]
    export_check_models = ["model.pth"]

Or call the check from a test with the ``export_check`` fixture, which returns the typed report::

    def test_model(export_check):
        report = export_check("model.pth", artifacts=["onnx"])
        export_check.assert_passed(report)

The golden workflow is pytest-regressions': a missing golden set is recorded (from ``inputs``) and
the test fails; ``--export-check-regen`` re-approves the golden set from the current checkpoint and
fails too, so a regen never passes silently. Each model's pipeline runs once per session and its
report is shared by all of its items. Nothing heavy is imported until a check runs.

Under pytest-xdist (``pytest -n 2``) a model's items stay on one worker: each is marked
``xdist_group`` by its checkpoint (``--dist loadgroup``), and the default ``--dist load`` is scheduled
the same way (the header says so); ``loadfile`` and ``loadscope`` keep them together anyway. A
golden set is recorded or re-approved once per session, under a lock, and every item of that model
fails on every worker; build jobs per worker follow the cores each worker has; the session's
reports (``--export-check-json/-junit/-markdown``) are written once, by the controller, over every
model every worker checked. Workers share the artifact cache: a model built on one is a hit on
another, and the out-dir lock keeps two workers from building the same one at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .config import RunConfig
    from .results import Report, Row

REGEN_FLAG = "--export-check-regen"
RECORD_FLAG = "--export-check-record"
RECORD_MODES = ("auto", "missing", "never")
MODELS_INI = "export_check_models"
EAGER = "eager"
SESSION_INPUT = "export_check_session"  # the shared session folder, handed to xdist workers
REPORT_FLAGS = (("json", "JSON"), ("junit", "JUnit XML"), ("markdown", "Markdown"))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("export-check", "export-check: exported-model regression checks")
    group.addoption(
        REGEN_FLAG,
        action="store_true",
        default=False,
        dest="export_check_regen",
        help="re-approve each golden set from the current checkpoint (record missing ones), then fail those tests "
        "so that a regeneration never passes silently",
    )
    group.addoption(
        RECORD_FLAG,
        choices=RECORD_MODES,
        default="auto",
        dest="export_check_record",
        help="a model whose golden set is missing: auto (the default) records it from `inputs` and fails, except under CI "
        "(CI=true), where it fails without writing anything; never: always fail without writing; missing: record it even under CI",
    )
    for flag, what in REPORT_FLAGS:
        group.addoption(
            f"--export-check-{flag}",
            dest=f"export_check_{flag}",
            metavar="PATH",
            default=None,
            help=f"write one {what} report over every model this session checked (with pytest-xdist: written by "
            "the controller, over all workers)",
        )
    parser.addini(
        MODELS_INI,
        type="linelist",
        default=[],
        help="export-check: checkpoints to check, relative to the ini file; each (model, artifact) pair is a test item. "
        "Settings come from [tool.export-check] or export-check.toml of the rootdir's project (up to the folder holding .git).",
    )


# --- one engine for the golden workflow and the run ---------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What one model's check produced: a report, or the one-line user error that stopped it,
    and a note when the golden set was written in this session (which fails every item)."""

    report: Report | None
    error: str | None
    golden_note: str | None


def _shared_folder(config: pytest.Config) -> Path:
    """The session's folder shared by the controller and every xdist worker: golden-set notes and
    each checked model's result. Made by the controller (or a run without xdist)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and SESSION_INPUT in workerinput:
        return Path(workerinput[SESSION_INPUT])
    folder = config.stash.get(_FOLDER_KEY, None)
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="export-check-session-"))
        config.stash[_FOLDER_KEY] = folder
    return folder


_FOLDER_KEY = pytest.StashKey[Path]()


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
        self.folder = _shared_folder(config)

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
        from .pipeline import run_check

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

        report = None if outcome.report is None else json.loads(json_report.render(outcome.report))
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
        from .golden.inputs import preprocess_from_args

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


# --- pytest-xdist: one worker per model, the shared session folder, the controller's report --------


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is None:
        _shared_folder(config)  # the controller's (or the only process's) session folder


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_FOLDER_KEY, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, on the controller: every worker shares the controller's session folder."""
    node.workerinput[SESSION_INPUT] = str(_shared_folder(node.config))


def _dist(config: pytest.Config) -> str | None:
    """The xdist dist mode of a run with workers, else None."""
    if getattr(config, "workerinput", None) is not None or not config.pluginmanager.hasplugin("xdist"):
        return None
    if not config.getoption("numprocesses", None) and not config.getoption("tx", None):
        return None
    return str(config.getoption("dist", "no"))


def _model_nodeids(config: pytest.Config) -> set[str]:
    """The node ids of the declared checkpoints (``models/a.pth``): a model's items are ``models/a.pth::row``."""
    root = config.rootpath.resolve()
    found = set()
    for path in _declared(config):
        try:
            found.add(path.relative_to(root).as_posix())
        except ValueError:
            continue
    return found


def pytest_report_header(config: pytest.Config) -> list[str]:
    dist = _dist(config)
    if dist is None or not _declared(config):
        return []
    if dist == "load":
        return ["export-check: --dist load would split a model's items over the workers (each worker would run the model's "
                "whole check); each model's items go to one worker instead, as --dist loadgroup does"]
    if dist == "worksteal":
        return ["export-check: warning: --dist worksteal can split a model's items over the workers; the verdicts stay right "
                "(the second worker waits for the first one's build and takes it from the cache) but the check runs twice; "
                "use --dist load or --dist loadgroup to keep each model on one worker"]
    return []


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist load`` with declared models: the load scheduler, but a model's items are one unit of work."""
    if config.getoption("dist", None) != "load" or not _declared(config):
        return None
    from xdist.scheduler import LoadScopeScheduling

    models = _model_nodeids(config)

    class ModelScheduling(LoadScopeScheduling):
        """A declared model's items (``a.pth::eager``, ``a.pth::onnx``) go to one worker; every other test is its own unit, as under load."""

        def _split_scope(self, nodeid: str) -> str:
            head = nodeid.split("::", 1)[0]
            return head if head in models else nodeid

    return ModelScheduling(config, log)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller (or a run without xdist) writes the session report over every model checked."""
    config = session.config
    if getattr(config, "workerinput", None) is not None:
        return
    paths = {flag: config.getoption(f"export_check_{flag}") for flag, _ in REPORT_FLAGS}
    if not any(paths.values()):
        return
    from datetime import UTC, datetime

    from . import __version__
    from .fleet.result import FleetReport, ModelResult
    from .report import fleet as views

    folder = _shared_folder(config)
    results = {}
    for file in sorted((folder / "results").glob("*.json")):
        data = json.loads(file.read_text())
        results[data["key"]] = ModelResult.from_json(data["result"])
    models = tuple(sorted(results.values(), key=lambda m: m.name))
    report = FleetReport(models=models, seconds=sum(m.seconds for m in models), executor=f"pytest, {max(1, _workers(config))} process(es)",
                         created=datetime.now(UTC).isoformat(timespec="seconds"), tool_version=__version__)
    base = config.invocation_params.dir
    json_path, junit_path, markdown_path = (None if paths[flag] is None else Path(paths[flag]) if paths[flag] == "-" else base / paths[flag]
                                           for flag in ("json", "junit", "markdown"))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")  # GitHub's job summary is appended to, never replaced (issue 16.2)
    append = bool(summary) and markdown_path is not None and os.path.realpath(str(summary)) == os.path.realpath(markdown_path)
    for note in views.write(report, json_path, junit_path, markdown_path, markdown_append=append):
        config.get_terminal_writer().line(note)  # no usable cache key: the session report is written unsealed


def _workers(config: pytest.Config) -> int:
    value = config.getoption("numprocesses", None) if config.pluginmanager.hasplugin("xdist") else None
    return int(value) if isinstance(value, int) else 1


def _session(config: pytest.Config) -> _Session:
    state = config.stash.get(_SESSION_KEY, None)
    if state is None:
        state = _Session(config)
        config.stash[_SESSION_KEY] = state
    return state


_SESSION_KEY = pytest.StashKey[_Session]()


# --- failure text --------------------------------------------------------------------------------


def _input_names(report: Report) -> list[str]:
    from .errors import ExportCheckError
    from .golden.manifest import read_manifest

    try:
        return [item.name for item in read_manifest(Path(report.golden.path)).inputs]
    except ExportCheckError:
        return []


def _fix_hint(row: Row, checkpoint: str) -> str:
    if row.family == EAGER:
        return (
            f"to fix: if the new weights are intended, adopt their logits after review: `export-check golden approve "
            f"{checkpoint}` or `pytest {REGEN_FLAG}`; otherwise check the checkpoint and --arch"
        )
    from .config import FAMILIES

    key = FAMILIES[row.family].fix_hint
    return (
        "to fix: the exported artifact drifts from the eager model, so regenerating the golden set does not change this; "
        f"fix the export, or after review loosen {key} in [tool.export-check]"
    )


def describe_row(report: Report, row: Row) -> str:
    """A row's failure as text: verdict and gate, every reason, the metrics, the artifact and the fix."""
    head = f"{row.name} {row.status.upper()} (vs {row.compared_with}, gate {row.gate.describe()})"
    lines = [head, *(f"  {reason}" for reason in row.reasons)]
    m = row.metrics
    if m is not None:
        names = _input_names(report) if m.top1_changed else []
        changed = ", ".join(names[i] if i < len(names) else f"#{i}" for i in m.top1_changed[:8])
        more = f", … {len(m.top1_changed)} in all" if len(m.top1_changed) > 8 else ""
        lines.append(
            f"  metrics over {m.images} inputs: MAE {m.mae:.3e}, max |err| {m.max_abs:.3e}, median input MAE "
            f"{m.median_abs:.3e}{'' if m.top1_agreement is None else f', top-1 agreement {m.top1_agreement:.1%}'}, non-finite {m.nonfinite}"
        )
        if changed:
            lines.append(f"  top-1 changed on: {changed}{more}")
    if row.artifact is not None:
        lines.append(f"  artifact: {row.artifact.path} ({row.artifact.size_bytes} bytes, sha256 {row.artifact.sha256[:12]})")
    lines += [f"  note: {note}" for note in row.notes[:5]]
    lines.append(f"  {_fix_hint(row, report.checkpoint.path)}")
    return "\n".join(lines)


class ExportCheckFailure(Exception):
    """One item's failure; its text is the whole report (no traceback into the plugin)."""


def failure_text(outcome: Outcome, row_name: str | None) -> str | None:
    """Why an item (``row_name``) or a whole check (``None``) fails, or ``None`` when it passes."""
    parts = []
    if outcome.golden_note:
        parts.append(outcome.golden_note)
    if outcome.error is not None:
        from .errors import error_message

        parts.append(f"export-check: error: {error_message(outcome.error)}")
    elif outcome.report is not None:
        rows = [outcome.report.row(row_name)] if row_name else list(outcome.report.rows)
        for row in rows:
            if not row.passed:
                parts.append(describe_row(outcome.report, row))
            elif outcome.golden_note:
                parts.append(f"{row.name} passed against the new golden set")
    return "\n".join(parts) if parts else None


# --- the fixture ---------------------------------------------------------------------------------


class ExportCheck:
    """The ``export_check`` fixture: ``export_check(checkpoint, **options) -> Report``.

    Relative checkpoint paths are relative to pytest's rootdir. Options are the CLI's flags
    (``artifacts``, ``arch``, ``arch_kwargs``, ``golden``, ``max_mae``, ``config`` ...); the
    rest comes from the settings files as for ``export-check CHECKPOINT``.
    """

    def __init__(self, config: pytest.Config, nodeid: str = "") -> None:
        self._config = config
        self._nodeid = nodeid

    def __call__(self, checkpoint: str | Path, **options: Any) -> Report:
        __tracebackhide__ = True
        path = Path(checkpoint)
        path = path if path.is_absolute() else self._config.rootpath / path
        for key in ("golden", "out", "config"):
            if options.get(key) is not None and not Path(options[key]).is_absolute():
                options[key] = self._config.rootpath / options[key]
        session = _session(self._config)
        outcome = session.shown_once(session.outcome(path, options), self._nodeid)
        if outcome.golden_note or outcome.error is not None:
            pytest.fail(failure_text(outcome, None) or "", pytrace=False)
        assert outcome.report is not None
        return outcome.report

    @staticmethod
    def assert_passed(report: Report) -> None:
        """Fail the calling test with every failing row's metrics, gate and fix."""
        __tracebackhide__ = True
        text = failure_text(Outcome(report=report, error=None, golden_note=None), None)
        if text:
            pytest.fail(text, pytrace=False)


@pytest.fixture
def export_check(request: pytest.FixtureRequest) -> ExportCheck:
    """Run export-check on a checkpoint and get its typed :class:`~export_check.results.Report`."""
    return ExportCheck(request.config, request.node.nodeid)


# --- declared models: one collector per checkpoint, one item per row ----------------------------


def _declared(config: pytest.Config) -> dict[Path, str]:
    """Resolved checkpoint path -> the path as written, from the ini option (computed once)."""
    cached = config.stash.get(_DECLARED_KEY, None)
    if cached is None:
        base = config.inipath.parent if config.inipath else config.rootpath
        cached = {}
        for entry in config.getini(MODELS_INI):
            entry = entry.strip()
            if entry:
                cached[(base / entry).resolve()] = entry
        config.stash[_DECLARED_KEY] = cached
    return cached


_DECLARED_KEY = pytest.StashKey[dict]()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> CheckpointFile | None:
    declared = _declared(parent.config)
    if declared and file_path.resolve() in declared:
        return CheckpointFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run without path arguments, pytest checks every declared model, even outside ``testpaths``.

    Runs before keyword/mark deselection, so ``-k onnx`` selects these items as it does any other.
    """
    declared = _declared(config)
    _group_by_model(config, items)
    if not declared or config.args_source == pytest.Config.ArgsSource.ARGS:
        return
    collected = {item.parent.path.resolve() for item in items if isinstance(item, ExportCheckItem)}
    for path in declared:
        if path not in collected:
            collector = CheckpointFile.from_parent(session, path=path)
            report = collector.ihook.pytest_make_collect_report(collector=collector)
            if report.failed:
                session.ihook.pytest_collectreport(report=report)
            added = [item for item in report.result if isinstance(item, ExportCheckItem)]
            _group_by_model(config, added)
            items.extend(added)


def _group_by_model(config: pytest.Config, items: Sequence[pytest.Item]) -> None:
    """Under pytest-xdist, mark each model's items ``xdist_group`` by checkpoint: ``--dist loadgroup``
    keeps them on one worker. (Without xdist the mark is unknown, and ``--strict-markers`` refuses it.)"""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if isinstance(item, ExportCheckItem):
            item.add_marker(pytest.mark.xdist_group(name=f"export-check:{item.parent.path}"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build only the artifacts whose items survived selection (``pytest model.pth::onnx`` builds ONNX only)."""
    wanted: dict[CheckpointFile, list[str]] = {}
    for item in session.items:
        if isinstance(item, ExportCheckItem):
            wanted.setdefault(item.parent, []).append(item.name)
    for collector, names in wanted.items():
        collector.selected = tuple(n for n in names if n != EAGER)


class CheckpointFile(pytest.File):
    """A declared checkpoint: the eager row and one item per artifact kind its settings select."""

    selected: tuple[str, ...] | None = None

    def collect(self) -> Iterator[ExportCheckItem]:
        config, _ = run_config(self.path, {})
        yield ExportCheckItem.from_parent(self, name=EAGER)
        for kind in config.selected_kinds:
            yield ExportCheckItem.from_parent(self, name=kind)

    def outcome(self) -> Outcome:
        options: dict[str, Any] = {}
        if self.selected is not None:
            # An empty selection still runs the pipeline (eager row); "--artifacts" needs at least one kind.
            options["artifacts"] = list(self.selected) or None
        return _session(self.config).outcome(self.path, options)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        from .errors import ExportCheckError

        if isinstance(excinfo.value, ExportCheckError):
            from .errors import error_message

            return f"export-check: error: {error_message(excinfo.value)}"
        return str(super().repr_failure(excinfo))


class ExportCheckItem(pytest.Item):
    """One row of the report: ``eager`` (the approved model?) or one artifact kind (drift vs eager)."""

    parent: CheckpointFile

    def runtest(self) -> None:
        outcome = _session(self.config).shown_once(self.parent.outcome(), self.nodeid)
        text = failure_text(outcome, None if outcome.report is None else self.name)
        if text:
            raise ExportCheckFailure(text)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ExportCheckFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name


__all__: Sequence[str] = ["ExportCheck", "Outcome", "describe_row", "failure_text", "run_config"]
