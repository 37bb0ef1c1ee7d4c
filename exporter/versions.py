"""Library versions that change numbers, read from package metadata (no heavy imports)."""

from __future__ import annotations

import platform
from importlib import metadata

TRACKED = ("torch", "onnx", "onnxruntime", "onnxsim", "numpy", "pillow", "export-check")


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "platform": f"{platform.system()}-{platform.machine()}"}
    for name in TRACKED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions
