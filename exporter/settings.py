"""Project settings from ``[tool.export-check]`` in pyproject.toml, or ``export-check.toml``.

Settings come only from places the user chose, as git's ``safe.directory`` and pytest's and ruff's
discovery do: ``--config PATH``; else, from the current directory up to the project root, in each
folder ``export-check.toml`` and then a ``pyproject.toml`` with a ``[tool.export-check]`` table, first
found wins. The project root is the first folder holding ``.git`` (a repository or a worktree); where
no folder above holds one, the current directory alone. The checkpoint's folder has no say: a folder
downloaded into the project (a model zoo's archive, beside its own ``pyproject.toml``) is not a place
the user chose to run from, so its settings are never read, and the run says so in one line
(``settings_ignored``) naming ``--config`` as the way to use them. Never a folder above the project
root. Every run says which file it read (``settings_files``: the terminal, the JSON and JUnit reports).

Relative paths in a settings file are relative to that file. Settings files are parsed strictly and
never executed, except that ``arch`` names code to import: a settings file's file-path ``arch`` must lie
inside the project (the run's, or the project of the ``--config`` file the user named), else the run
is refused with one line unless ``--arch`` is given.

>>> parse_settings({"arch": "m.py:Net", "batch-size": 8}, Path("/p"), "pyproject.toml")["batch_size"]
8
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import RunConfig
from .errors import UsageError
from .option_values import coerce
from .options import CHECK, SETTINGS, overlay, split_output_gates, to_run_config
from .signature import SignatureSettings, parse_signature_settings

TABLE = "export-check"

# key in the file -> (python name, kind): a view of exporter/options.py's table, whose rows say
# which keys a settings file may hold and how each value is checked (option_values.coerce).
KEYS: dict[str, tuple[str, str]] = {o.name: (o.python, o.kind) for o in SETTINGS.values()}


def parse_settings(table: Any, base: Path, source: str) -> dict[str, Any]:
    """Validate one ``[tool.export-check]`` table; every problem names ``source`` and the key."""
    if not isinstance(table, dict):
        raise UsageError(f"{source}: [tool.{TABLE}] must be a table")
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key not in SETTINGS:
            raise UsageError(f"{source}: unknown key {key!r} in [tool.{TABLE}]; known keys: {', '.join(SETTINGS)}")
        option = SETTINGS[key]
        out[option.python] = coerce(value, option.kind, base, f"{source}: {key}")
        if option.check is not None:
            option.check(out[option.python], source)
    if "arch" in out:
        out["arch"], out["arch_root"] = anchor_arch(out["arch"], base)
    return out


def anchor_arch(spec: str, base: Path) -> tuple[str, Path]:
    """Make a file-path architecture spec absolute against ``base``; module specs import from ``base``."""
    module_part, sep, attr = spec.rpartition(":")
    if sep and (module_part.endswith(".py") or "/" in module_part) and not Path(os.path.expanduser(module_part)).is_absolute():
        spec = f"{os.path.normpath(base / module_part)}:{attr}"  # "../net.py" as the file it names, as a fleet file's spec resolves
    return spec, base


def _read_toml(path: Path) -> dict[str, Any]:
    from .parsing import load_toml

    ours = ("tool", TABLE) if path.name == "pyproject.toml" else ()  # other tools' tables are theirs to judge
    return load_toml(path, "settings file", "fix the file", ours=ours)  # bounded: size, nesting, numbers, UTF-8, a FIFO refused


def _from_file(path: Path) -> dict[str, Any] | None:
    data = _read_toml(path)
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get(TABLE) if isinstance(data.get("tool"), dict) else None
        if table is None:
            return None
    else:
        table = data
    settings = parse_settings(table, path.parent, str(path))
    settings["_source"] = str(path)
    settings["_files"] = (str(path),)
    return settings


PROJECT_MARKER = ".git"  # a folder (a repository) or a file (a worktree, a submodule)


def project_root(start: Path | None = None) -> Path:
    """The project a run stands in: the first of ``start`` (default: the current directory) and its
    parents that holds ``.git``; ``start`` itself when none does."""
    here = (start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if os.path.lexists(folder / PROJECT_MARKER):
            return folder
    return here


def project_folders(start: Path | None = None) -> tuple[Path, ...]:
    """The folders settings are looked for in: ``start`` (default: the current directory) and its
    parents up to :func:`project_root`, nearest first."""
    here = (start if start is not None else Path.cwd()).resolve()
    root = project_root(here)
    folders = [here]
    for folder in here.parents:
        if folders[-1] == root:
            break
        folders.append(folder)
    return tuple(folders)


def find_settings(checkpoint: Path | None = None, explicit: Path | None = None, start: Path | None = None) -> dict[str, Any]:
    """The settings of ``explicit`` (``--config``), else of the project the run stands in: from ``start``
    (default: the current directory) up to the project root. The result's ``_files`` names the file read
    (none: ``()``), ``_project`` the project its code must lie in, ``_ignored`` the notes on settings files
    found beside the checkpoint and not read (:func:`ignored_beside`)."""
    if explicit is not None:
        if not explicit.exists():  # a FIFO or a device exists: reading it refuses it, without waiting
            raise UsageError(f"{explicit}: settings file not found; fix --config")
        found = _from_file(explicit)
        if found is None:
            raise UsageError(f"{explicit}: has no [tool.{TABLE}] table; add one or drop --config")
        found["_project"] = project_root(explicit.resolve().parent)
        found["_ignored"] = ()
        return found
    folders = project_folders(start)
    root = folders[-1]
    result: dict[str, Any] = {"_files": (), "_project": root}
    for folder in folders:
        for name in (f"{TABLE}.toml", "pyproject.toml"):
            candidate = folder / name
            if candidate.is_file():
                found = _from_file(candidate)
                if found is not None:
                    found["_project"] = root
                    result = found
                    break
        if result.get("_files"):
            break
    result["_ignored"] = ignored_beside(checkpoint, folders, root)
    return result


def ignored_beside(checkpoint: Path | None, folders: tuple[Path, ...], root: Path) -> tuple[str, ...]:
    """One note per settings file beside ``checkpoint`` (its folder and, inside the project, the folders up
    to where the current directory's way up meets them) that the run does not read. Found by name and
    one bounded look for the table's header, never parsed: it is not the user's to run."""
    if checkpoint is None:
        return ()
    beside = Path(os.path.realpath(Path(checkpoint).parent))
    own = [beside]
    if beside == root or root in beside.parents:
        own = []
        for folder in (beside, *beside.parents):
            if folder in folders:
                break
            own.append(folder)
    notes = []
    for folder in own:
        for name in (f"{TABLE}.toml", "pyproject.toml"):
            candidate = folder / name
            if candidate.is_file() and (name != "pyproject.toml" or _names_our_table(candidate)):
                notes.append(f"settings: not read: {candidate}, beside the checkpoint (settings come from --config or from the project "
                             f"the command stands in, {root}); pass --config {candidate} to use it, or run from its folder")
    return tuple(notes)


def _names_our_table(path: Path) -> bool:
    """Whether a pyproject.toml's first MiB mentions ``[tool.export-check]``: a hint for the note, nothing is parsed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            return f"tool.{TABLE}".encode() in handle.read(1 << 20)
    except OSError:
        return False


def settings_ignored(settings: Mapping[str, Any]) -> tuple[str, ...]:
    """The notes on settings files found beside the checkpoint and not read, as found by :func:`find_settings`."""
    return tuple(settings.get("_ignored", ()))


def settings_files(settings: Mapping[str, Any]) -> tuple[str, ...]:
    """The settings files a run read, as found by :func:`find_settings`."""
    return tuple(settings.get("_files", ()))


def settings_line(files: tuple[str, ...]) -> str:
    """The one line every run prints: ``settings: /p/pyproject.toml`` or ``settings: none``."""
    return f"settings: {', '.join(files) if files else 'none'}"


def check_arch_inside(settings: Mapping[str, Any], explicit: Mapping[str, Any], start: Path | None = None) -> None:
    """Refuse a settings file's file-path ``arch`` that lies outside its project (the run's, or that of
    the ``--config`` file), unless the command line names the architecture itself."""
    if "arch" in explicit or not settings.get("arch"):
        return
    module_part = str(settings["arch"]).rpartition(":")[0]
    if not (module_part.endswith(".py") or "/" in module_part or "\\" in module_part):
        return  # a module: imported from the installed libraries, the current directory and the settings file's folder
    real = Path(os.path.realpath(os.path.expanduser(module_part)))
    projects = {Path(os.path.realpath(settings.get("_project") or project_root(start))), Path(os.path.realpath(project_root(start)))}
    if not any(real == p or p in real.parents for p in projects):
        source = settings.get("_source", "the settings file")
        raise UsageError(f"{source}: arch names code outside the project ({real} is not inside {' or '.join(sorted(map(str, projects)))}), "
                         "which a settings file may not run; pass --arch to run it, or move it into the project")


# --- the settings read, overlaid on the explicit values (exporter/options.py's table) ---------------


def load_settings(checkpoint: Path, config: Path | None, start: Path | None = None) -> dict[str, Any]:
    """The settings of the run (``--config`` first, else the project ``start`` stands in), once the
    checkpoint is known to be there."""
    from .files import check_readable_file

    # The checkpoint is the one thing every command needs: say first when it is not there.
    check_readable_file(checkpoint, "checkpoint", "pass the path of a .pth/.pt/.safetensors state_dict")
    return find_settings(checkpoint, config, start)


def signature_settings(settings: Mapping[str, Any]) -> SignatureSettings:
    """The ``model-inputs`` and ``outputs`` tables of the settings read (validated when they were read)."""
    source = str(settings.get("_source", "settings"))
    return parse_signature_settings(settings.get("model_inputs"), split_output_gates(settings.get("outputs"), source)[0], source)


def output_gates(settings: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """The gate settings given for single outputs (``[tool.export-check.outputs.NAME]``), keyed by output, then option name."""
    return split_output_gates(settings.get("outputs"), str(settings.get("_source", "settings")))[1]


def check_config(explicit: Mapping[str, Any], default_out: Callable[[], Path] | None = None,
                 start: Path | None = None, also_read: tuple[str, ...] = ()) -> tuple[RunConfig, dict[str, Any]]:
    """``check``'s RunConfig from explicit values (``checkpoint`` among them), and the settings it read.
    ``default_out`` makes the out folder when neither the explicit values nor the settings name one;
    ``start`` is where the project is looked for (default: the current directory); ``also_read``
    names files the explicit values came from (a fleet file), recorded with the settings files."""
    settings = load_settings(explicit["checkpoint"], explicit.get("config"), start)
    check_arch_inside(settings, explicit, start)
    values = overlay(CHECK, explicit, settings, None if default_out is None else {"out": default_out})
    _need_arch(values, settings)
    values["signature_settings"] = signature_settings(settings)
    values["output_gates"] = output_gates(settings)
    values["settings_files"] = (*also_read, *settings_files(settings))
    values["settings_ignored"] = settings_ignored(settings)
    return to_run_config(values), settings


def _need_arch(values: Mapping[str, Any], settings: Mapping[str, Any]) -> None:
    """No architecture and no settings file read: say where settings come from (a run standing outside
    its project no longer finds the project's settings through the checkpoint's folder)."""
    if not values.get("arch") and not settings_files(settings):
        raise UsageError(f"no architecture given and no settings file read (settings come from --config, or from the project the run "
                         f"stands in: {settings.get('_project') or project_root()} up to the folder holding .git); pass --arch "
                         "module:Factory or path/to/file.py:Factory, run from your project, or pass --config pyproject.toml")


@dataclass(frozen=True)
class GoldenParams:
    """What ``golden record`` and ``golden approve`` need beyond their own switches."""

    common: dict[str, Any]  # the keyword arguments golden.lifecycle.record_golden and approve_golden share
    inputs: Path | None  # record's inputs folder, if given or set
    settings: dict[str, Any]  # as read (record takes its [tool.export-check.preprocess] from here)
    signature: SignatureSettings = SignatureSettings()  # [tool.export-check.model-inputs.*] and [...outputs.*]: record and approve take it


def golden_params(command: str, explicit: Mapping[str, Any], start: Path | None = None) -> GoldenParams:
    settings = load_settings(explicit["checkpoint"], explicit.get("config"), start)
    check_arch_inside(settings, explicit, start)
    values = overlay(command, explicit, settings)
    _need_arch(values, settings)
    if not values["arch"]:
        raise UsageError("no architecture given: pass --arch module:Factory or path/to/file.py:Factory, or set arch in [tool.export-check]")
    common = dict(
        checkpoint=values["checkpoint"], arch=values["arch"], arch_kwargs=values["arch_kwargs"], arch_root=values["arch_root"],
        golden_dir=values["golden"], threads=values["threads"], batch_size=values["batch_size"],
    )
    return GoldenParams(common=common, inputs=values.get("inputs"), settings=settings, signature=signature_settings(settings))
