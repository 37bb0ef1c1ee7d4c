"""The Python API: ``check`` and the golden operations, the same code paths as the CLI, printing nothing.

Options are the settings keys with underscores (``batch_size=8``, ``max_mae=1e-4``, ``artifacts=["onnx"]``),
checked through the one options table (exporter/options.py): an unknown name or a bad value is an
:class:`~export_check.errors.ExportCheckError` naming it, before any work starts. Settings files apply as
for the CLI (``export-check.toml`` beside the checkpoint, else ``[tool.export-check]``); explicit options win.

>>> import export_check
>>> report = export_check.check("models/checkpoints/resnet_digits.pth", arch="models/resnet.py:ResNet",
...                             artifacts=["onnx"])  # doctest: +SKIP
>>> report.passed, report.row("onnx").metrics.mae  # doctest: +SKIP
(True, 3.1e-07)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .options import APPROVE, CHECK, RECORD, for_command, from_keywords

if TYPE_CHECKING:
    from .golden.diff import ApproveDiff, OutputsDiff
    from .golden.goldenset import GoldenSet
    from .results import Report

PathLike = str | os.PathLike[str]

# Command-line-only options: where the CLI writes its views and how it reports progress, and the
# several-model runs (exporter/fleet/). The API returns the Report; its views are export_check.report.*.
_CLI_ONLY = frozenset({"json", "junit", "markdown", "html", "history", "quiet", "fleet", "shard", "workers", "ray"})


def options_of(command: str) -> tuple[str, ...]:
    """The keyword options a function of this module takes for ``command`` (``"check"``, ``"golden record"``, ...).

    >>> "batch_size" in options_of("check") and "json" not in options_of("check")
    True
    """
    return tuple(o.python for o in for_command(command) if not o.positional and o.python not in _CLI_ONLY)


def _explicit(command: str, function: str, checkpoint: PathLike, options: Mapping[str, Any]) -> dict[str, Any]:
    taken = options_of(command)
    unknown = sorted(k for k in options if k not in taken)
    if unknown:
        raise UsageError(f"export_check.{function}(): unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                         f"it takes {', '.join(taken)}")
    if not isinstance(checkpoint, (str, os.PathLike)) or not os.fspath(checkpoint):
        raise UsageError(f"export_check.{function}(): checkpoint must be a path, got {checkpoint!r}")
    explicit = from_keywords(command, options)
    explicit["checkpoint"] = Path(os.fspath(checkpoint))
    return explicit


def check(checkpoint: PathLike, arch: str | None = None, **options: Any) -> Report:
    """Export, reload, replay and gate ``checkpoint`` as ``export-check check`` does; return its :class:`Report`.

    ``arch`` is ``package.module:Factory`` or ``path/to/file.py:Factory`` (else the settings file's).
    Raises :class:`~export_check.errors.ExportCheckError` for bad input (the CLI's exit 2); drift and
    artifact errors are rows of the report (``report.passed``, ``report.exit_code``).
    """
    from .run.pipeline import run_check
    from .settings import check_config

    config = check_config(_explicit(CHECK, "check", checkpoint, {**options, "arch": arch}))[0]
    return run_check(config)


@dataclass(frozen=True)
class Approval:
    """What :func:`approve` found: the diff between the golden reference and the new outputs, and whether it was written."""

    diff: ApproveDiff | OutputsDiff
    written: bool

    def lines(self) -> list[str]:
        """The diff as ``export-check golden approve`` prints it."""
        return self.diff.lines()


@dataclass(frozen=True)
class Verification:
    """What :func:`verify` found: whether the golden set is intact, and one line per problem (or the OK line)."""

    intact: bool
    lines: tuple[str, ...]


def _as_text(options: Mapping[str, Any]) -> dict[str, str]:
    """``size=32``, ``size=(224, 224)``, ``mean=(0.5, 0.5, 0.5)`` as the flags' text (``"32"``, ``"224x224"``, ``"0.5,0.5,0.5"``)."""
    text = {}
    for name, sep in (("size", "x"), ("mean", ","), ("std", ",")):
        value = options.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            text[name] = str(value)
        elif isinstance(value, (tuple, list)) and value and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            text[name] = sep.join(str(v) for v in value)
    return text


def record(checkpoint: PathLike, arch: str | None = None, **options: Any) -> GoldenSet:
    """Record a new golden set from ``inputs`` (a folder of images, ``.npy`` or sample archives), as
    ``export-check golden record``: options ``inputs``, ``golden``, ``force``, ``size``, ``resize``, ``mode``,
    ``mean``, ``std`` (text as on the command line, or numbers: ``size=(32, 32)``), ``batch_size``, ``threads``,
    ``arch_kwargs``, ``config``. Returns the set as written."""
    from .golden.lifecycle import record_golden
    from .golden.preprocess import preprocess_from_args
    from .settings import golden_params

    explicit = _explicit(RECORD, "record", checkpoint, {**options, "arch": arch, **_as_text(options)})
    params = golden_params(RECORD, explicit)
    if params.inputs is None:
        raise UsageError("export_check.record(): no inputs given: pass inputs=DIR (a folder of images or .npy files), "
                         "or set inputs in [tool.export-check]")
    preprocess = preprocess_from_args(explicit.get("size"), explicit.get("resize"), explicit.get("mode"), explicit.get("mean"),
                                      explicit.get("std"), params.settings.get("preprocess"))
    return record_golden(inputs_dir=params.inputs, preprocess=preprocess, force=bool(explicit.get("force")),
                         signature_settings=params.signature, **params.common)


def approve(checkpoint: PathLike, arch: str | None = None, **options: Any) -> Approval:
    """Adopt ``checkpoint``'s outputs as the golden reference, as ``export-check golden approve``
    (``dry_run=True``: compute the diff, change nothing)."""
    from .golden.lifecycle import approve_golden
    from .settings import golden_params

    explicit = _explicit(APPROVE, "approve", checkpoint, {**options, "arch": arch})
    params = golden_params(APPROVE, explicit)
    diff, written = approve_golden(dry_run=bool(explicit.get("dry_run")), signature_settings=params.signature, **params.common)
    return Approval(diff=diff, written=written)


def verify(golden: PathLike) -> Verification:
    """Check a golden set's integrity, as ``export-check golden verify``: every file against its recorded sha256."""
    from .golden.lifecycle import verify as verify_lines

    if not isinstance(golden, (str, os.PathLike)) or not os.fspath(golden):
        raise UsageError(f"export_check.verify(): golden must be the path of a golden set folder, got {golden!r}")
    intact, lines = verify_lines(Path(os.fspath(golden)))
    return Verification(intact=intact, lines=tuple(lines))


__all__ = ["check", "record", "approve", "verify", "Approval", "Verification", "options_of"]
