"""The examples in the package's docstrings run, and say what they show (doctest over every module of export_check)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import export_check


def test_every_docstring_example_holds() -> None:
    failed, tried, modules = [], 0, 0
    for info in pkgutil.walk_packages(export_check.__path__, "export_check."):
        if info.name.endswith("__main__"):  # runs the CLI when imported
            continue
        module = importlib.import_module(info.name)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        for test in doctest.DocTestFinder().find(module, info.name):
            result = runner.run(test, out=lambda text: failed.append(text))
            tried += result.attempted
        modules += 1
    assert not failed, "".join(failed)
    assert modules > 60 and tried > 50, (modules, tried)  # the walk found the package (not an empty path)
