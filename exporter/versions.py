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


# The environment variables that narrow the instruction set a runtime may use on this CPU (README, "What
# varies by CPU"): torch's ATen kernels (ATEN_CPU_CAPABILITY: default, avx2, avx512) and oneDNN's, which
# torch's convolutions and OpenVINO's CPU plugin both use (ONEDNN_MAX_CPU_ISA, DNNL_MAX_CPU_ISA its old
# name). onnxruntime's MLAS kernels and OpenVINO's choice of bf16 read the CPU itself: no variable
# narrows them in a release build.
ISA_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


def kernel_choices() -> dict[str, str]:
    """What decides which kernels run here, beside the library versions: the CPU's precision flags and
    every instruction-set variable that is set. Part of the cache key (a result measured on another CPU,
    or under another cap, is not served) and of the details of every row whose verdict may depend on it.

    >>> sorted(kernel_choices())[:1]
    ['cpu_flags']
    """
    import os

    choices = {"cpu_flags": cpu_flags() or "unknown"}
    choices.update({name: os.environ[name] for name in ISA_VARIABLES if os.environ.get(name)})
    return choices


# oneDNN caps (ONEDNN_MAX_CPU_ISA values) that leave out a feature some runtime picks by reading the CPU
# itself: such a runtime then plans for kernels oneDNN will not run, a mix no real CPU has.
# bf16: OpenVINO's default precision (its own CPU check) needs oneDNN's avx512_core_bf16 kernels or above.
BELOW_BF16 = frozenset({"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"})
# VNNI: torch picks its int8 matmul path by at::cpu::is_cpu_support_vnni() (cpuinfo, avx512_vnni); under a cap
# without VNNI oneDNN's u8s8 code saturates its 16-bit pair sums on the s8 activations torchao feeds it.
BELOW_VNNI = frozenset({"SSE41", "AVX", "AVX2", "AVX512_CORE"})


def onednn_cap_below(isas: frozenset[str]) -> str | None:
    """The oneDNN cap in force (``"ONEDNN_MAX_CPU_ISA=AVX2"``) when it is one of ``isas`` (any case), else None."""
    import os

    for name in ISA_VARIABLES[1:]:  # ONEDNN_MAX_CPU_ISA, DNNL_MAX_CPU_ISA: oneDNN reads the first that is set
        value = os.environ.get(name, "")
        if value:
            return f"{name}={value}" if value.upper() in isas else None
    return None
