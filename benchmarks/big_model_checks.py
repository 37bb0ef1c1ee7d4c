"""Big models (issue 43), the two measurements besides the table of ``big_models.py``, on the same seeded
TokenTransformer, checkpoint and golden set (``big_models.prepare``):

- ``modern SIZE``: ``check --artifacts onnx-dynamo,onnx-int8-dynamic,onnx-fp16`` (700 M: the dynamo file's weights past
  protobuf's 2 GiB, in its ``.data`` file), the tree's wall, CPU and peak PSS, and each ONNX row's MAE recomputed by
  hand: onnxruntime run on the files in ``--out`` over the golden inputs, against the golden set's approved outputs
  (eager reproduces them exactly here: its MAE is 0), to compare with the report's.
- ``warm SIZE``: a cold check with a cache, then a warm one into a new ``--out`` and one into the same ``--out``: what
  each writes (the tree's blocks written, ``getrusage(RUSAGE_CHILDREN).ru_oublock``), and how many artifact files in
  ``--out`` are the cache's own inodes (linked, not copied).

Not a timed test: it prints one JSON object per run. Inputs under ``benchmarks/out/big-models/`` (git-ignored)::

    python benchmarks/big_model_checks.py modern 700m
    python benchmarks/big_model_checks.py warm 92m
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from big_models import ARCH, SIZES, WORK, disk_mb, prepare  # noqa: E402
from harness import export_check_cmd, measured  # noqa: E402

MODERN = ("onnx-dynamo", "onnx-int8-dynamic", "onnx-fp16")


def _check(size: str, out: Path, report: Path, *flags: str) -> list[str]:
    checkpoint, settings, golden = prepare(size)
    return [*export_check_cmd(), "check", str(checkpoint), "--arch", ARCH, "--arch-kwargs", json.dumps(SIZES[size]), "--golden",
            str(golden), "--config", str(settings), "--out", str(out), "--json", str(report), "-q", *flags]


def by_hand(golden_dir: Path, out: Path, kinds: tuple[str, ...]) -> dict[str, float]:
    """Each kind's MAE against the golden set's approved outputs, onnxruntime run here on its file in ``out``."""
    import numpy as np
    import onnxruntime as ort

    from export_check.golden.manifest import load_golden

    golden = load_golden(golden_dir)
    feeds = [batch for _, batch in golden.feed_batches(16)]
    output = golden.signature.outputs[0].name
    reference = golden.reference_outputs(0, len(golden))[output].astype(np.float64)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    found = {}
    for kind in kinds:
        session = ort.InferenceSession(str(out / f"{kind}.onnx"), options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        got = np.concatenate([session.run(None, {n: batch[n] for n in names})[0] for batch in feeds]).astype(np.float64)
        found[kind] = float(np.mean(np.abs(got - reference)))
        del session
    return found


def modern(size: str) -> dict[str, Any]:
    out, report = WORK / size / "out-modern", WORK / size / "report-modern.json"
    shutil.rmtree(out, ignore_errors=True)
    report.unlink(missing_ok=True)
    at_peak: list[tuple[str, int, float]] = []
    with open(WORK / size / "modern.log", "wb") as sink:
        code, wall, cpu, peak = measured(_check(size, out, report, "--no-cache", "--artifacts", ",".join(MODERN)), stdout=sink, at_peak=at_peak)
    rows = json.loads(report.read_text())["rows"]
    hand = by_hand(WORK / size / "golden", out, MODERN)
    return {"size": size, "code": code, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "tree_peak_pss_mb": round(peak),
            "disk_mb": round(disk_mb(out)), "files": sorted(p.name for p in out.iterdir() if not p.name.startswith(".")),
            "rows": {r["name"]: {"status": r["status"], "mae": (r.get("metrics") or {}).get("mae"), "mae_by_hand": hand.get(r["name"])}
                     for r in rows},
            "at_peak": sorted(((role, round(pss)) for role, _, pss in at_peak), key=lambda p: -p[1])}


def warm(size: str) -> list[dict[str, Any]]:
    base = WORK / size / "warm"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    cache = base / "cache"
    runs = []
    for tag, out in (("cold", base / "out-a"), ("warm, new --out", base / "out-b"), ("warm, same --out", base / "out-a")):
        report = base / f"{len(runs)}.json"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        with open(base / f"{len(runs)}.log", "wb") as sink:
            code = subprocess.run(_check(size, out, report, "--cache-dir", str(cache)), stdout=subprocess.DEVNULL, stderr=sink).returncode
        wall = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        rows = json.loads(report.read_text())["rows"]
        files = [Path(part) for r in rows if r.get("artifact") for part in
                 (r["artifact"]["path"], *(str(Path(r["artifact"]["path"]).parent / p["name"]) for p in r["artifact"].get("parts") or ()))]
        cached = {(p.stat().st_dev, p.stat().st_ino) for p in cache.rglob("*") if p.is_file()}
        runs.append({"run": tag, "code": code, "wall_s": round(wall, 1),
                     "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
                     "written_mb": round((after.ru_oublock - before.ru_oublock) * 512 / 2**20, 1),
                     "artifact_files": len(files), "artifact_mb": round(sum(p.stat().st_size for p in files) / 2**20),
                     "files_that_are_the_caches": sum((p.stat().st_dev, p.stat().st_ino) in cached for p in files),
                     "rows_from_the_cache": sum(r.get("cache") == "hit" for r in rows)})
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("modern", "warm"))
    parser.add_argument("size", choices=tuple(SIZES))
    args = parser.parse_args(argv)
    print(json.dumps(modern(args.size) if args.what == "modern" else warm(args.size), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
