"""The cpu_sensitive tests again under capped instruction sets (README, "What varies by CPU"); tox runs it
in its ``checks`` environment, beside the suite (``./dev test``):

    python tests/run_narrowed.py [pytest arguments]

- avx2: every ``cpu_sensitive`` test with ATEN_CPU_CAPABILITY=avx2 and ONEDNN_MAX_CPU_ISA=AVX2, torch's and
  oneDNN's kernels as on an AVX2 CPU; on a CPU with nothing above AVX2 this would be the suite's own run
  again, so it is said and not run;
- default: the ``cheap`` ones with ATEN_CPU_CAPABILITY=default and ONEDNN_MAX_CPU_ISA=SSE41, the baseline.

Each run sets EXPORT_CHECK_NARROWED to its name: a test whose rows are run partly by runtimes the caps do not touch
(onnxruntime and XNNPACK pick their kernels themselves) may build only the rows torch runs there (tests/integration/test_decode.py).

The pytest arguments narrow the selection further (``-k``, a file); a selection that holds no such test is
said, not failed (pytest's exit 5). The exit code is the worst of the runs.
"""

from __future__ import annotations

import os
import subprocess
import sys

RUNS = (
    ("avx2", {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}, "cpu_sensitive"),
    ("default", {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"}, "cpu_sensitive and cheap"),
)
NO_TESTS = 5  # pytest.ExitCode.NO_TESTS_COLLECTED


def above_avx2() -> set[str]:
    """This CPU's precision-relevant flags beyond AVX2 (AVX-512, VNNI, bf16, AMX): what the avx2 cap takes away."""
    from export_check.versions import cpu_flags

    flags = cpu_flags()
    return set(flags.split()) - {"avx2", "fma", "f16c"} if flags else {"unknown"}  # unknown: run it


def main(args: list[str]) -> int:
    worst = 0
    for name, caps, marker in RUNS:
        shown = " ".join(f"{k}={v}" for k, v in caps.items())
        if name == "avx2" and not above_avx2():
            print(f"\n=== narrowed run '{name}': not run: this CPU has nothing above AVX2, so the suite's own run is this run", flush=True)
            continue
        print(f"\n=== narrowed run '{name}': {shown} pytest -m '{marker}' {' '.join(args)}", flush=True)
        code = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-m", marker, *args],
                              env={**os.environ, **caps, "EXPORT_CHECK_NARROWED": name}).returncode
        if code == NO_TESTS:
            print(f"=== narrowed run '{name}': no test marked {marker!r} in this selection", flush=True)
            code = 0
        worst = max(worst, code)
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
