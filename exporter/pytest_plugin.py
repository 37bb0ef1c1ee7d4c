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

This module is the plugin pytest loads (the ``pytest11`` entry point): its options, hooks and
fixture. The per-session engine is ``export_check.pytest_session``; the items, the fixture's
object and the failure text, ``export_check.pytest_items`` (their public names are named here too).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from .pytest_items import EAGER, CheckpointFile, ExportCheck, ExportCheckItem, describe_row, failure_text
from .pytest_session import DECLARED_SETTINGS_KEY, FOLDER_KEY, RECORD_FLAG, REGEN_FLAG, SESSION_INPUT, Outcome, run_config, shared_folder

RECORD_MODES = ("auto", "missing", "never")
MODELS_INI = "export_check_models"
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
        "Settings come from [tool.export-check] or export-check.toml of the rootdir's project (up to the folder holding .git), "
        "or from the file an entry names after it: 'zoo/a.pth --config zoo/a.toml'.",
    )


# --- pytest-xdist: one worker per model, the shared session folder, the controller's report --------


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is None:
        shared_folder(config)  # the controller's (or the only process's) session folder


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(FOLDER_KEY, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, on the controller: every worker shares the controller's session folder."""
    node.workerinput[SESSION_INPUT] = str(shared_folder(node.config))


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
    from .fleet import views
    from .fleet.result import FleetReport, ModelResult

    folder = shared_folder(config)
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


# --- the fixture ---------------------------------------------------------------------------------


@pytest.fixture
def export_check(request: pytest.FixtureRequest) -> ExportCheck:
    """Run export-check on a checkpoint and get its typed :class:`~export_check.results.Report`."""
    return ExportCheck(request.config, request.node.nodeid)


# --- declared models: one collector per checkpoint, one item per row ----------------------------


def _declared(config: pytest.Config) -> dict[Path, str]:
    """Resolved checkpoint path -> the path as written, from the ini option (computed once). An entry may name the
    model's settings file after it, as the CLI's ``--config`` does (``"zoo/a.pth --config zoo/a.toml"``): a checkpoint's
    own folder is never read for settings (docs/explanation/trust-model.md), the ini file's author chooses them here."""
    cached = config.stash.get(_DECLARED_KEY, None)
    if cached is None:
        base = config.inipath.parent if config.inipath else config.rootpath
        cached, settings = {}, {}
        for entry in config.getini(MODELS_INI):
            checkpoint, flag, chosen = entry.strip().partition(" --config ")
            if checkpoint.strip():
                path = (base / checkpoint.strip()).resolve()
                cached[path] = checkpoint.strip()
                if flag:
                    settings[path] = (base / chosen.strip()).resolve()
        config.stash[_DECLARED_KEY] = cached
        config.stash[DECLARED_SETTINGS_KEY] = settings
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
            report.__dict__.pop("call", None)  # as pytest's collect_one_node does: a CallInfo cannot cross to xdist's controller
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


__all__: Sequence[str] = ["ExportCheck", "Outcome", "describe_row", "failure_text", "run_config"]
