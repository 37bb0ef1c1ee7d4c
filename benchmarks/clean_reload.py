"""The load probe and the replay in a clean process (issue 25, item 5): what they cost a check, against a tree without them.

    git archive <commit-before> exporter | tar -x -C /tmp/base        # the tree to compare against
    python benchmarks/clean_reload.py --base /tmp/base/exporter --repeats 5
    python benchmarks/clean_reload.py --base /tmp/base/exporter --artifacts torch-export   # a .pt2's first load

Runs ``export-check models/checkpoints/resnet_digits.pth --no-cache -q`` (the default kinds, the bundled
ResNet) alternately with the base tree's exporter and this tree's, each a fresh CLI process (wall time),
and prints each one's median, the report's own ``seconds`` and ``timings.build`` (what the run waited
for builds), and the ratio this/base of the medians. The base tree is put first on PYTHONPATH under
the name ``export_check`` (a link in a temporary folder); this tree's is the installed one. Timings on
the shared machine are noisy: read the ratio of medians of interleaved runs, not one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHECKPOINT = REPO / "models" / "checkpoints" / "resnet_digits.pth"


def run(tree: str, shim: Path | None, out: Path, artifacts: list[str]) -> dict[str, float]:
    env = dict(os.environ)
    if shim is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(shim), *filter(None, [env.get("PYTHONPATH")])])
    report = out / f"{tree}.json"
    began = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "export_check", str(CHECKPOINT), "--no-cache", "-q", "--out", str(out / tree),
                             "--json", str(report), *artifacts], env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - began
    if result.returncode != 0:
        raise SystemExit(f"{tree}: the run failed\n{result.stdout}\n{result.stderr}")
    data = json.loads(report.read_text())
    return {"wall": wall, "seconds": data["seconds"], "build_waited": data["timings"].get("build", 0.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the exporter/ folder of the tree to compare against")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--artifacts", help="the kinds to check (default: the default group)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="clean-reload-") as tmp:
        shim = Path(tmp) / "shim"
        shim.mkdir()
        (shim / "export_check").symlink_to(args.base.resolve(), target_is_directory=True)
        runs: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
        for i in range(args.repeats):
            for tree in (("base", "this") if i % 2 == 0 else ("this", "base")):
                runs[tree].append(run(tree, shim if tree == "base" else None, Path(tmp), ["--artifacts", args.artifacts] if args.artifacts else []))
                print(tree, {k: round(v, 2) for k, v in runs[tree][-1].items()}, flush=True)
    medians = {tree: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for tree, rs in runs.items()}
    for tree, values in medians.items():
        print(f"{tree:5} median over {args.repeats}: " + ", ".join(f"{k} {v:.2f} s" for k, v in values.items()))
    print(f"ratio this/base of the median wall: {medians['this']['wall'] / medians['base']['wall']:.3f}")


if __name__ == "__main__":
    main()
