"""What on this machine changes numbers: library versions, read from package metadata (no heavy imports),
and the CPU features that decide which int8 and bf16 kernels run."""

from __future__ import annotations

import platform
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

# What every run uses whatever it builds: the eager model, the golden set's decoding, the tool itself.
# Each artifact kind's own runtimes are a field of its row (exporter/artifacts: ArtifactKind.packages).
BASE = ("torch", "numpy", "pillow", "export-check")


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def kind_packages(kinds: Iterable[str] | None = None) -> tuple[str, ...]:
    """The distributions the kinds named use (None: every kind), each once, in the table's order."""
    from .artifacts import KINDS

    chosen = None if kinds is None else set(kinds)
    return tuple(dict.fromkeys(p for k in KINDS if chosen is None or k.name in chosen for p in k.packages))


def library_versions(kinds: Iterable[str] | None = None) -> dict[str, str]:
    """Python, the platform, the base packages and those of ``kinds`` (None: of every kind), by name.

    >>> "onnxruntime" in library_versions(["torchscript-trace"]), "onnxruntime" in library_versions(["onnx"])
    (False, True)
    """
    versions = {"python": platform.python_version(), "platform": f"{platform.system()}-{platform.machine()}"}
    for name in dict.fromkeys((*BASE, *kind_packages(kinds))):
        versions[name] = package_version(name)
    return versions


# CPU features that change which kernels a runtime picks (int8 dot products, bf16/fp16 paths): the
# OpenVINO rows run in bf16 where the CPU has it, and onnxruntime's s8s8 kernels saturate without VNNI.
PRECISION_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The precision-relevant flags this CPU has, space-separated ("" when /proc/cpuinfo is unreadable)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return ""
    present: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            present.update(line.partition(":")[2].split())
    return " ".join(f for f in PRECISION_FLAGS if f in present)
