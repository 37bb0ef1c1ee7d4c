"""Peak memory of ``export-check check`` as the golden set grows (issue 43, item 4): flat, bounded by a batch.

A small conv model (``TinyConv`` below, seeded weights) over N golden images of 224x224 (the digits of
``record_memory.py``), the default kinds, ``--no-cache``, the real CLI in a subprocess; memory is the
peak PSS of the whole process tree (the run, its build server, build and replay children), sampled
(``harness.measured``). The target: 8,192 images within +150 MB of 64.

    python benchmarks/check_memory.py                       # 64, 2048 and 8192 images
    python benchmarks/check_memory.py --sizes 64 1024 --repeats 2

Images, checkpoint and golden sets go under ``benchmarks/out/check-memory/`` (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from harness import OUT, export_check_cmd, measured  # noqa: E402

WORK = OUT / "check-memory"
TARGET_MB = 150.0


class TinyConv(nn.Module):
    """One strided conv, a global pool and a linear head: cheap per image, so the golden set dominates."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, kernel_size=4, stride=4)
        self.head = nn.Linear(8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def checkpoint() -> Path:
    path = WORK / "tiny_conv.pth"
    if not path.is_file():
        WORK.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(0)
        torch.save(TinyConv().state_dict(), path)
    return path


def _run(cmd: list[str], what: str) -> tuple[float, float, float]:
    log = WORK / "last-run.log"
    with open(log, "wb") as sink:
        code, wall, cpu, peak = measured(cmd, stdout=sink)
    if code not in (0, 1):
        raise SystemExit(f"{what} failed ({code}): {log.read_text()[-3000:]}")
    return wall, cpu, peak


def golden(count: int) -> Path:
    """A golden set of ``count`` 224x224 images recorded from TinyConv (once)."""
    from record_memory import images

    folder = WORK / f"golden-{count}"
    manifest = folder / "manifest.json"
    if manifest.is_file() and len(json.loads(manifest.read_text())["inputs"]) == count:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    _run([*export_check_cmd(), "golden", "record", str(checkpoint()), "--arch", f"{HERE / 'check_memory.py'}:TinyConv",
          "--inputs", str(images(count)), "--golden", str(folder), "--size", "224", "--mode", "RGB",
          "--mean", "0.5,0.5,0.5", "--std", "0.5,0.5,0.5", "-q"], f"golden record of {count}")
    return folder


def check(count: int, extra: list[str]) -> tuple[float, float, float, dict]:
    """One default check over ``count`` images: (wall, tree CPU, tree peak PSS MB, the JSON report)."""
    out, report = WORK / f"out-{count}", WORK / f"report-{count}.json"
    shutil.rmtree(out, ignore_errors=True)
    report.unlink(missing_ok=True)
    wall, cpu, peak = _run([*export_check_cmd(), "check", str(checkpoint()), "--arch", f"{HERE / 'check_memory.py'}:TinyConv",
                            "--golden", str(golden(count)), "--out", str(out), "--json", str(report), "-q", "--no-cache", *extra],
                           f"check of {count}")
    return wall, cpu, peak, json.loads(report.read_text()) if report.is_file() else {"rows": [{"name": "no report", "status": "see last-run.log"}]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 2048, 8192])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("extra", nargs="*", help="more check flags, after --")
    args = parser.parse_args(argv)
    for count in args.sizes:
        golden(count)
    peaks: dict[int, float] = {}
    for count in args.sizes:
        runs = [check(count, args.extra) for _ in range(args.repeats)]
        peaks[count] = statistics.median(r[2] for r in runs)
        rows = {row["name"]: (row["status"], (row.get("metrics") or {}).get("mae")) for row in runs[0][3]["rows"]}
        print(f"{count:>6} images of 224x224: tree peak PSS {peaks[count]:.0f} MB, wall {statistics.median(r[0] for r in runs):.1f} s, "
              f"tree CPU {statistics.median(r[1] for r in runs):.1f} s; rows {rows}", flush=True)
    small, large = min(peaks), max(peaks)
    growth = peaks[large] - peaks[small]
    print(f"{large} images cost {growth:+.0f} MB over {small}: {'within' if growth <= TARGET_MB else 'OVER'} the +{TARGET_MB:.0f} MB target")
    return 0 if growth <= TARGET_MB else 1


if __name__ == "__main__":
    sys.exit(main())
