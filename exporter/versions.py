"""What on this machine changes numbers: library versions, read from package metadata (no heavy imports),
and the CPU features that decide which int8 and bf16 kernels run."""

from __future__ import annotations

import platform
from importlib import metadata
from pathlib import Path

TRACKED = ("torch", "onnx", "onnxruntime", "onnxsim", "numpy", "pillow", "export-check")


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "platform": f"{platform.system()}-{platform.machine()}"}
    for name in TRACKED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
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
