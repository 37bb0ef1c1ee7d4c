"""The architecture the user names: ``module:Factory`` or ``path/to/file.py:Factory``, resolved to a callable.

The code the user points at is trusted: it is imported and run (checkpoint.py reads the untrusted weights). A
name from the standard library or the builtins is refused before it is called: a settings file's ``arch`` must
name a model, never ``subprocess:run`` (docs/explanation/trust-model.md).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import ArchitectureError


def resolve_factory(spec: str, root: Path | None = None) -> Callable[..., Any]:
    """Resolve ``package.module:Factory`` or ``path/to/file.py:Factory`` to a callable.

    >>> resolve_factory("models.resnet:ResNet")  # doctest: +SKIP
    <class 'models.resnet.ResNet'>

    Module specs import from the installed libraries first, then ``root`` (the folder of the settings
    file that named them) and the current directory, which go *after* them on ``sys.path`` so that a
    stray ``onnxruntime.py`` beside the model cannot stand in for the real library. The factory must
    be a class or a function, and not one of the standard library's or a builtin (``subprocess:run``,
    ``os:system``, ``builtins:eval`` are refused before anything is called).
    """
    module_part, sep, attr = spec.rpartition(":")
    if not sep or not module_part or not attr:
        raise ArchitectureError(
            f"architecture {spec!r} is not of the form package.module:Factory or path/to/file.py:Factory"
        )
    if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
        module = _import_file(Path(module_part), spec)
    else:
        _refuse_standard_library(module_part.split(".")[0], spec)
        module = _import_module(module_part, spec, root)
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            available = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
            raise ArchitectureError(
                f"{spec}: {module_part} has no attribute {attr!r}; callables there: {', '.join(available[:12]) or 'none'}"
            )
        target = getattr(target, part)
    if not (inspect.isclass(target) or inspect.isfunction(target) or inspect.ismethod(target)):
        raise ArchitectureError(f"{spec}: {attr} is a {type(target).__name__}, not a class or factory function that returns an nn.Module")
    _refuse_standard_library(str(getattr(target, "__module__", None) or "").split(".")[0], spec)
    return target


def _refuse_standard_library(top: str, spec: str) -> None:
    """``arch`` names code that builds a model; the standard library and the builtins build none, and
    ``subprocess:run`` with ``arch-kwargs`` would run a shell command from a settings file alone."""
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        raise ArchitectureError(
            f"{spec}: refused: {top} is part of Python's standard library, not a model; arch must name your "
            "architecture's class or factory function (package.module:Factory or path/to/file.py:Factory)"
        )


def _import_module(name: str, spec: str, root: Path | None = None) -> Any:
    # The current directory is where users keep their models, and the settings file's folder where a
    # repository does; both go after the installed libraries, never ahead of them.
    for folder in (Path.cwd(), root):
        _append_path(folder)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise ArchitectureError(
            f"{spec}: cannot import module {exc.name!r}; run from the directory that contains it, "
            "add it to PYTHONPATH, or give a file path (path/to/file.py:Factory)"
        ) from None
    except Exception as exc:
        raise ArchitectureError(f"{spec}: importing {name} failed: {type(exc).__name__}: {exc}") from None


def _append_path(folder: Path | None) -> None:
    if folder is not None and str(folder) not in sys.path:
        sys.path.append(str(folder))


def _import_file(path: Path, spec: str) -> Any:
    path = Path(os.path.expanduser(path)).resolve()
    if not path.is_file():
        raise ArchitectureError(f"{spec}: file {path} not found; give an existing .py file")
    # Inside a package (directories with __init__.py), import it by its dotted name so that the
    # file's relative imports work; otherwise load the lone file under a private name.
    package_parts = [path.stem]
    root = path.parent
    while (root / "__init__.py").is_file():
        package_parts.insert(0, root.name)
        root = root.parent
    if len(package_parts) > 1:
        _append_path(root)
        return _import_module(".".join(package_parts), spec)
    _append_path(path.parent)  # so that the file's own `from mynet import Block` finds its sibling
    name = f"_export_check_arch_{abs(hash(str(path)))}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise ArchitectureError(f"{spec}: cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ArchitectureError(f"{spec}: executing {path} failed: {type(exc).__name__}: {exc}") from None
    return module
