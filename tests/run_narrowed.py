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

Given no file, each run collects only the test files that apply every marker of its selection (``marked_files``):
the others can hold no test it selects, and each of its two workers collecting the whole tree (1,600 tests, every test
module imported) cost ~8 CPU-s where those files cost ~3 (twice both without the test modules' cached bytecode). A helper
module or conftest applying a marker (it could mark tests of files that do not) makes the run collect the whole tree
again; tests/conftest.py fails a session that collects a marked test from a file that does not apply its markers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

RUNS = (
    ("avx2", {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}, "cpu_sensitive"),
    ("default", {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"}, "cpu_sensitive and cheap"),
)
NO_TESTS = 5  # pytest.ExitCode.NO_TESTS_COLLECTED
TESTS = Path(__file__).resolve().parent


def markers_of(selection: str) -> list[str]:
    """The markers a ``-m`` selection of RUNS requires (it joins them with ``and``)."""
    return selection.split(" and ")


def _names(text: str, marker: str) -> bool:
    """Whether ``text`` applies ``marker``: ``pytest.mark.NAME`` (a decorator, a ``pytestmark``), or the name quoted (``add_marker``)."""
    return re.search(rf"\bmark\.{re.escape(marker)}\b|[\"']{re.escape(marker)}[\"']", text) is not None


def marked_files(markers: list[str]) -> list[Path] | None:
    """The test files that apply every one of ``markers``, sorted; None when a module that is not a test file (a
    helper, a conftest) applies one: it could mark the tests of any file, so the whole tree is collected."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.resolve() == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8")
        if not path.name.startswith("test_"):
            if any(_names(text, m) for m in markers):
                return None
            continue
        if all(_names(text, m) for m in markers):
            found.append(path)
    return found


def names_a_path(args: list[str]) -> bool:
    """Whether the pytest arguments name a file, folder or test id (then they choose what is collected)."""
    return any(not a.startswith("-") and os.path.exists(a.split("::")[0]) for a in args)


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
        files = None if names_a_path(args) else marked_files(markers_of(marker))
        where = [] if files is None else [str(f.relative_to(Path.cwd()) if f.is_relative_to(Path.cwd()) else f) for f in files]
        print(f"\n=== narrowed run '{name}': {shown} pytest -m '{marker}' {' '.join(args)} "
              f"({'the whole tree' if files is None else f'{len(files)} files applying it'})", flush=True)
        code = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-m", marker, *args, *where],
                              env={**os.environ, **caps, "EXPORT_CHECK_NARROWED": name}).returncode
        if code == NO_TESTS:
            print(f"=== narrowed run '{name}': no test marked {marker!r} in this selection", flush=True)
            code = 0
        worst = max(worst, code)
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
