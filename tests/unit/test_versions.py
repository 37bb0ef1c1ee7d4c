"""The CPU features every int8/bf16 row records (``versions.cpu_flags``), read from /proc/cpuinfo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from export_check.versions import PRECISION_FLAGS, cpu_flags

# tests/run_narrowed.py repeats this module under capped instruction sets (README, "What varies by CPU")
pytestmark = [pytest.mark.cpu_sensitive, pytest.mark.cheap]


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


def test_kernel_choices_hold_the_flags_and_every_instruction_set_cap_that_is_set(monkeypatch) -> None:
    from export_check.versions import ISA_VARIABLES, kernel_choices

    for name in ISA_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert kernel_choices() == {"cpu_flags": cpu_flags() or "unknown"}
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "")  # set but empty: not a cap
    assert kernel_choices() == {"cpu_flags": cpu_flags() or "unknown", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def test_a_cap_or_another_cpu_is_another_cache_key(monkeypatch, tmp_path: Path) -> None:
    """A shared cache never serves an int8 or bf16 verdict measured on another kind of CPU, or under a cap."""
    from conftest import DEFAULT_ARCH
    from export_check import versions
    from export_check.cache import key

    def digest() -> str:
        inputs = key.run_key_inputs(checkpoint_sha256="c" * 64, golden_manifest_sha256="g" * 64, arch=DEFAULT_ARCH, arch_kwargs={},
                                    arch_root=None, export_settings={}, inference_settings={})
        return json.dumps(inputs, sort_keys=True)

    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    native = digest()
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    capped = digest()
    another = "avx2" if versions.cpu_flags() != "avx2" else "avx512f avx512_vnni"  # another CPU than this one, whichever this is
    monkeypatch.setattr(versions, "cpu_flags", lambda cpuinfo=None: another)
    other_cpu = digest()
    assert len({native, capped, other_cpu}) == 3


def test_a_row_computed_in_bf16_is_judged_by_the_bf16_gate() -> None:
    from export_check.gates import FAMILIES, Thresholds, precision_family

    assert precision_family("fp16", {"inference_precision": "bf16"}) == "bf16"
    assert precision_family("fp16", {"inference_precision": "f32"}) == "fp16"
    assert precision_family("float", {}) == "float"
    gate = Thresholds().gate_for("bf16")
    assert "bf16" in FAMILIES and (gate.max_relative_mae, gate.min_top1) == (0.02, 0.98)
    assert Thresholds.from_options({"bf16-min-top1": 0.9}).gate_for("bf16").min_top1 == 0.9


def test_the_instruction_set_caps_narrow_torch_and_onednn() -> None:
    """tests/run_narrowed.py runs the CPU-sensitive tests again under ATEN_CPU_CAPABILITY and
    ONEDNN_MAX_CPU_ISA: a proof only if the caps take. In a fresh interpreter capped at the baseline,
    torch reports the DEFAULT capability and oneDNN's convolution runs SSE4.1 code; and in this
    process, a cap that is set is the capability torch runs."""
    import os
    import subprocess
    import sys

    import torch

    probe = ("import torch; print('capability', torch.backends.cpu.get_cpu_capability()); "
             "c = torch.nn.Conv2d(3, 4, 3)\nwith torch.inference_mode(): c(torch.randn(2, 3, 8, 8))")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "ONEDNN_VERBOSE": "1"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120, check=True).stdout
    assert "capability DEFAULT" in out and "isa:Intel SSE4.1" in out, out
    cap = os.environ.get("ATEN_CPU_CAPABILITY")
    if cap:
        assert torch.backends.cpu.get_cpu_capability() == cap.upper()


@pytest.mark.parametrize("cap, flags, refused", [
    ("AVX2", "avx2 avx512f avx512_vnni", True),  # the cap hides VNNI that torch still sees: a mix no CPU has
    ("avx512_core", "avx2 avx512f avx512_vnni", True),
    ("AVX512_CORE_VNNI", "avx2 avx512f avx512_vnni", False),
    ("AVX2", "avx2", False),  # an AVX2 CPU capped at AVX2: what it is anyway
    ("", "avx2 avx512f avx512_vnni", False),
])
def test_torchao_int8_is_not_applicable_where_a_cap_hides_the_vnni_torch_sees(monkeypatch, cap: str, flags: str, refused: bool) -> None:
    import torch

    from export_check.artifacts import BuildContext, torchao_int8
    from export_check.artifacts.base import NotApplicable

    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    monkeypatch.setattr(torchao_int8, "cpu_flags", lambda: flags)

    class Exporting(Exception):  # how far an accepted build gets here: to its export, which this test does not need
        pass

    def reached(*args, **kwargs):
        raise Exporting

    monkeypatch.setattr(torchao_int8, "export_program", reached)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 4)).eval()
    ctx = BuildContext(model=model, example=torch.zeros(2, 3, 8, 8), opset=17, onnx_exporter="torchscript", threads=1)
    with pytest.raises(NotApplicable if refused else Exporting) as raised:
        torchao_int8.build(ctx, Path("unused.pt2"), None)
    if refused:
        assert f"not applicable under ONEDNN_MAX_CPU_ISA={cap} on a CPU with avx512_vnni" in str(raised.value), raised.value
