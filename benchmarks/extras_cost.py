"""What each optional extra costs: install time, size on disk and import time, each in a fresh virtual
environment beside the pinned torch (constraints.txt; the litert stack with constraints-litert.txt).

    python benchmarks/extras_cost.py [--extras modern,openvino,executorch,coreml,ray,litert] [--keep DIR]

For each extra a new venv gets ``pip install .[EXTRA]`` under the pins (the pip cache warm, as on a CI
runner that caches it), after a base venv with the package alone (torch, onnx, onnxruntime, onnxsim,
numpy). Reported against the base: seconds to install, MB added to site-packages, and the seconds to import
the extra's runtime in a new process (the best of three). ``pip check`` says whether the extra coexists
with the pinned torch in one environment. Timings on a shared 2-core machine are noisy: compare within one
run. The numbers of a run go into docs/performance.md ("What each extra costs").
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# extra -> (the modules its kinds import at replay, the constraints file)
EXTRAS = {
    "base": ("onnxruntime", "constraints.txt"),
    "modern": ("onnxscript, torchao.quantization", "constraints.txt"),
    "openvino": ("openvino", "constraints.txt"),
    "executorch": ("executorch.runtime, executorch.backends.xnnpack.partition.xnnpack_partitioner", "constraints.txt"),
    "coreml": ("coremltools", "constraints.txt"),
    "ray": ("ray", "constraints.txt"),
    "litert": ("litert_torch, ai_edge_litert.interpreter", "constraints-litert.txt"),
}
LITERT_PACKAGES = ("litert-torch", "ai-edge-litert")  # the litert kind's stack is not an extra: tox -e litert installs it


def _size_mb(venv: Path) -> float:
    site = next(venv.glob("lib/python*/site-packages"))
    return sum(f.stat().st_size for f in site.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def _install(venv: Path, extra: str) -> float:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    constraints = REPO / EXTRAS[extra][1]
    began = time.perf_counter()
    target = str(REPO) if extra in ("base", "litert") else f"{REPO}[{extra}]"
    subprocess.run([*pip, "-c", str(constraints), target], check=True)
    if extra == "litert":
        subprocess.run([*pip, "-c", str(constraints), *LITERT_PACKAGES], check=True)
    return time.perf_counter() - began


def _import_seconds(venv: Path, modules: str) -> float:
    best = float("inf")
    for _ in range(3):
        began = time.perf_counter()
        subprocess.run([str(venv / "bin" / "python"), "-c", f"import {modules}"], check=True, capture_output=True)
        best = min(best, time.perf_counter() - began)
    return best


def _pip_check(venv: Path) -> str:
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "check"], capture_output=True, text=True)
    return "ok" if done.returncode == 0 else " ".join(done.stdout.split())[:160]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", default=",".join(e for e in EXTRAS if e != "base"))
    parser.add_argument("--keep", type=Path, help="build the venvs here and keep them (default: a temporary folder)")
    args = parser.parse_args(argv)
    extras = ["base", *[e for e in args.extras.split(",") if e and e != "base"]]
    unknown = [e for e in extras if e not in EXTRAS]
    if unknown:
        parser.error(f"unknown extras {unknown}; choose from {', '.join(EXTRAS)}")
    root = args.keep or Path(tempfile.mkdtemp(prefix="extras-cost-"))
    rows = {}
    try:
        for extra in extras:
            venv = root / extra
            if venv.exists():
                shutil.rmtree(venv)
            seconds = _install(venv, extra)
            torch_ok = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
                                      capture_output=True, text=True).stdout.strip()
            rows[extra] = (seconds, _size_mb(venv), _import_seconds(venv, EXTRAS[extra][0]), torch_ok, _pip_check(venv))
            print(f"{extra}: {rows[extra]}", file=sys.stderr, flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    base_s, base_mb = rows["base"][0], rows["base"][1]
    print("| extra | install s (added) | size MB (added) | import s | torch | pip check |")
    print("|---|---|---|---|---|---|")
    for extra, (seconds, mb, imported, torch_version, check) in rows.items():
        added = "" if extra == "base" else f" (+{seconds - base_s:.0f})"
        grown = "" if extra == "base" else f" (+{mb - base_mb:.0f})"
        print(f"| {extra} | {seconds:.0f}{added} | {mb:.0f}{grown} | {imported:.2f} | {torch_version} | {check} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
