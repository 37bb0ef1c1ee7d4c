"""Where a run may write: ``--out`` and the report paths are checked before anything is written.

A report path that is the checkpoint, a settings or fleet file the run read, the golden set's manifest
or a file inside the golden set, an ``--out`` that is the golden folder, inside it, or a folder holding
the checkpoint or the golden set: each would overwrite (or mix artifacts into) what the run reads, so
each is refused with one line. Paths
are compared after resolving links (``os.path.realpath``), so a link or a ``..`` does not hide one.
A path component longer than the filesystem allows is refused here too, before any work.

>>> check_lengths({"--json": Path("report.json")})
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UsageError, shown

if TYPE_CHECKING:
    from .config import RunConfig

NAME_MAX = 255  # bytes per path component on every filesystem Linux and macOS use (ext4, xfs, btrfs, apfs, tmpfs)
NUL_REFUSAL = "holds a NUL byte, which no file name can; pass a plain path"  # os calls raise ValueError on one
MANIFEST = "manifest.json"  # exporter/golden/goldenset.py's name for it, without importing numpy for it
SETTINGS_NAMES = ("pyproject.toml", "export-check.toml")  # exporter/settings.py's: an error report never replaces one


def check_lengths(paths: Mapping[str, Path | None]) -> None:
    """Refuse a path with a component over ``NAME_MAX`` bytes, or with a NUL byte (no file name holds
    one), naming the option (``{"--json": path}``)."""
    for what, path in paths.items():
        if path is None:
            continue
        if "\x00" in str(path):
            raise UsageError(f"{what} {shown(str(path))[:120]}: {NUL_REFUSAL}")
        for part in Path(path).parts:
            size = len(os.fsencode(part))
            if size > NAME_MAX:
                raise UsageError(f"{what} {shown(str(path))[:120]}...: a name in it is {size} bytes long, the filesystem "
                                 f"allows at most {NAME_MAX}; shorten it")


def check_outputs(config: RunConfig, reports: Mapping[str, Path | None] | None = None) -> None:
    """Refuse an ``--out`` or a report path (``{"--json": path}``) that would overwrite what the run reads."""
    given: dict[str, Path] = {flag: path for flag, path in (reports or {}).items() if path is not None}
    check_lengths({"checkpoint": config.checkpoint, "--golden": config.golden, "--out": config.out_dir,
                   "--cache-dir": config.cache_dir, **given})
    protected = _protected((config.checkpoint,), config.golden, config.arch, config.settings_files)
    out = _real(config.out_dir)
    for path, what in protected.items():
        # artifacts are written into --out, never below it; a settings file's folder may hold them (no name collides)
        if out == path or (out == path.parent and not what.startswith("a settings file")):
            raise UsageError(f"--out {shown(str(config.out_dir))}: {'is' if out == path else 'holds'} {what} ({shown(str(path))}); "
                             "artifacts go into --out: pass a folder of its own, e.g. --out export-check-out")
    golden = _real_or_none(config.golden)
    if golden is not None and golden in out.parents:
        raise UsageError(f"--out {shown(str(config.out_dir))}: is inside the golden set {shown(str(config.golden))}, which only "
                         "`golden record` and `golden approve` write; pass a folder of its own, e.g. --out export-check-out")
    protected.update(_artifacts(config.out_dir))
    seen: dict[Path, str] = {}
    for flag, report in given.items():
        refusal = _report_refusal(flag, report, protected, config.golden, seen)
        if refusal is not None:
            raise UsageError(refusal)


def error_report_paths(reports: Mapping[str, Path | None], checkpoints: tuple[Path, ...], golden: Path, arch: str,
                       out: Path, read: tuple[str | Path, ...] = ()) -> dict[str, Path]:
    """The report paths a run that stopped with an error may write its error reports to: those
    :func:`check_outputs` would accept, judged from what the command line says (the settings file
    may be what failed: ``read`` names the files it read or was pointed at, and no file named like a
    settings file is written), none inside a folder holding a golden set's manifest, and none that
    two reports share (which of them would it hold?)."""
    protected = _protected(checkpoints, golden, arch, read)
    protected.update(_artifacts(out))
    safe = {}
    for flag, report in reports.items():
        if report is None:
            continue
        try:
            check_lengths({flag: report})
            refused = _report_refusal(flag, report, protected, golden, {})
            shared = [other for other, path in reports.items() if other != flag and path is not None and _key(path) == _key(report)]
            real = _real(report)
        except (UsageError, OSError, ValueError):  # ValueError: a NUL byte, which no path can hold
            continue
        if refused is None and not shared and real.name not in SETTINGS_NAMES and not any(
                (folder / MANIFEST).exists() for folder in (real, *real.parents)):
            safe[flag] = report
    return safe


def _key(report: Path) -> Path:
    from .report.destination import is_stdout

    return STDOUT_KEY if is_stdout(report) else _real(report)


def _protected(checkpoints: tuple[Path, ...], golden_dir: Path, arch: str, read: tuple[str | Path, ...] = ()) -> dict[Path, str]:
    """The files a report must not overwrite: what the run reads (``read``: its settings files, a fleet
    file). A path with a NUL byte (a refused command line's) names no file, so it protects nothing."""
    protected = {real: "a settings file this run read" for f in read if (real := _real_or_none(Path(f))) is not None}
    protected.update({real: "the checkpoint" for c in checkpoints if (real := _real_or_none(c)) is not None})
    golden = _real_or_none(golden_dir)
    if golden is not None:
        protected.update({golden: "the golden set", golden / MANIFEST: "the golden set's manifest"})
    arch_file = _arch_file(arch)
    if arch_file is not None and (real := _real_or_none(arch_file)) is not None:
        protected[real] = "the architecture's source file"
    return protected


def _artifacts(out_dir: Path) -> dict[Path, str]:
    from .artifacts import KINDS
    from .artifacts.parts import companion_names

    out = _real_or_none(out_dir)
    return {} if out is None else {out / name: f"the {kind.name} artifact" for kind in KINDS
                                   for name in (kind.filename(), *companion_names(kind.filename()))}


def _report_refusal(flag: str, report: Path, protected: Mapping[Path, str], golden_dir: Path, seen: dict[Path, str]) -> str | None:
    """Why ``report`` may not be written (one line), or None; remembers it in ``seen`` (path -> flag)."""
    where = f"{flag} {shown(str(report))}"
    path = _key(report)  # -, /dev/stdout and the links to it are one destination
    if path != STDOUT_KEY:
        if path in protected:
            return f"{where}: is {protected[path]}; writing the report there would overwrite it: choose another path"
        if _real(golden_dir) in path.parents:
            return f"{where}: is inside the golden set {shown(str(golden_dir))}; write reports elsewhere"
        held = next((what for p, what in protected.items() if path in p.parents), None)
        if held is not None:
            return f"{where}: is a folder holding {held}; {flag} takes a file path"
    if path in seen:
        return f"{where}: {seen[path]} writes there too; give each report its own path"
    seen[path] = flag
    return None


STDOUT_KEY = Path("<standard output>")


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _real_or_none(path: Path) -> Path | None:
    """``path`` resolved, or None when no file can have it (a NUL byte)."""
    try:
        return _real(path)
    except ValueError:
        return None


def _arch_file(arch: str) -> Path | None:
    module_part = arch.rpartition(":")[0]
    if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
        return Path(os.path.expanduser(module_part))
    return None


def escaped(value: Any) -> Any:
    """``value`` (a report: frozen dataclasses, tuples, dicts, strings) with every string :func:`shown`:
    the bytes of a file name that is not UTF-8 escaped, so that every view can write it as UTF-8.
    What holds no such string is returned as it is (the same object)."""
    if isinstance(value, str):
        return shown(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: new for f in dataclasses.fields(value) if f.init
                   and (new := escaped(old := getattr(value, f.name))) is not old}
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, (tuple, list)):
        items = [escaped(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else type(value)(items)
    if isinstance(value, dict):
        pairs = [(escaped(k), escaped(v)) for k, v in value.items()]
        return value if all(a is k and b is v for (a, b), (k, v) in zip(pairs, value.items(), strict=True)) else dict(pairs)
    return value
