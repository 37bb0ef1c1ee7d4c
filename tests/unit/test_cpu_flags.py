"""The CPU features every int8/bf16 row records (``versions.cpu_flags``), read from /proc/cpuinfo."""

from __future__ import annotations

from pathlib import Path

from export_check.versions import PRECISION_FLAGS, cpu_flags


def test_only_the_precision_flags_in_their_fixed_order(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512_vnni avx2 amx_int8 ht\n\nprocessor\t: 1\nflags\t\t: fpu avx2\n")
    assert cpu_flags(info) == "avx2 avx512_vnni amx_int8"


def test_no_flags_line_and_an_unreadable_file_give_nothing(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: some arm core\n")
    assert cpu_flags(info) == ""
    assert cpu_flags(tmp_path / "missing") == ""


def test_this_machine_agrees_with_proc_cpuinfo() -> None:
    proc = Path("/proc/cpuinfo")
    if not proc.is_file():  # not Linux: the function says nothing, and that is checked above
        assert cpu_flags(proc) == ""
        return
    present = set()
    for line in proc.read_text().splitlines():
        if line.startswith("flags"):
            present.update(line.split(":", 1)[1].split())
    assert cpu_flags().split() == [flag for flag in PRECISION_FLAGS if flag in present]
