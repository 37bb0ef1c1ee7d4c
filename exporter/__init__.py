"""export-check: export a PyTorch model to every deployable artifact and gate each on a golden set.

The Python API (exporter/api.py), imported on first use so that ``import export_check`` stays light
(the CLI's ``--help`` and the pytest plugin load nothing heavy)::

    import export_check
    report = export_check.check("model.pth", arch="models/net.py:Net", artifacts=["onnx"], max_mae=1e-5)
    report.passed, [(row.name, row.status) for row in report.rows]
    export_check.record("model.pth", arch="models/net.py:Net", inputs="samples/", golden="golden")
    export_check.approve("model.pth", arch="models/net.py:Net", dry_run=True).lines()
    export_check.verify("golden").intact
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"  # the one place: pyproject.toml reads it ([tool.setuptools.dynamic])

if TYPE_CHECKING:
    from .api import Approval, Verification, approve, check, record, verify
    from .errors import ExportCheckError
    from .results import Report, Row

_LAZY = {
    "check": "api", "record": "api", "approve": "api", "verify": "api", "Approval": "api", "Verification": "api",
    "Report": "results", "Row": "results", "ExportCheckError": "errors",
}
__all__ = ["__version__", "check", "record", "approve", "verify", "Approval", "Verification", "Report", "Row", "ExportCheckError"]
assert set(__all__) == {"__version__", *_LAZY}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'export_check' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
