"""Every artifact kind on every bundled model: status and figures, one cold ``--artifacts all`` run each.

The bundled trained models (models/checkpoints): the four digit classifiers on 64 golden digits (the
sets benchmarks/run.py records), the two-output detector, the token classifier and the two-input net
on 64 held-out samples each (``models.make_multi_io_samples``), and the sequence recogniser on its
example's golden set (24 samples). Static int8 rows are judged on the samples outside the calibration
split. Prints Markdown: a kind x model matrix (status and the worst output's relative MAE), then each
model's per-kind table (MAE, max error, relative MAE, size, build seconds, ms/img; the reason of every
row that is not a pass or a fail). Run from the repository root::

    python benchmarks/matrix.py                      # every model, ~20 min on 2 idle cores
    python benchmarks/matrix.py --models detector,tokens --artifacts modern
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402  (benchmarks/run.py: the digit golden sets and model arguments)
from groups import kind_rows  # noqa: E402

REPO = bench.REPO
OUT = bench.OUT / "matrix"
CHECKPOINTS = REPO / "models" / "checkpoints"
MULTI_IO = {  # name -> (checkpoint stem, class in models/multi_io.py, settings lines)
    "detector": ("digit_detector", "DigitDetectorDict", '[outputs.boxes]\nkind = "values"\n'),
    "tokens": ("token_classifier", "TokenClassifier", ""),
    "two-inputs": ("two_input_net", "TwoInputNet", ""),
}
MODELS = (*bench.ARCHS, *MULTI_IO, "recogniser")


def model_command(name: str, count: int) -> list[str]:
    """The checkpoint and options that check ``name`` against its golden set (recorded here once)."""
    if name in bench.ARCHS:
        return [*bench.model_args(name), "--golden", str(bench.golden_set(name, count))]
    if name == "recogniser":
        return [str(CHECKPOINTS / "sequence_recognizer.pth"), "--config", str(REPO / "models" / "examples" / "sequence_recognizer.toml")]
    stem, cls, settings = MULTI_IO[name]
    folder = OUT / f"{name}-{count}"
    config = folder / "settings.toml"
    if not (folder / "golden" / "manifest.json").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "models.make_multi_io_samples", str(folder / "samples"), "--model", stem, "--count",
                        str(count)], check=True, cwd=REPO, capture_output=True)
        config.write_text(f"arch = \"{REPO / 'models' / 'multi_io.py'}:{cls}\"\ngolden = \"golden\"\n" + settings)
        subprocess.run([*bench.export_check_cmd(), "golden", "record", str(CHECKPOINTS / f"{stem}.pth"), "--config", str(config),
                        "--inputs", str(folder / "samples")], check=True, cwd=REPO, capture_output=True)
    return [str(CHECKPOINTS / f"{stem}.pth"), "--config", str(config)]


def check(name: str, count: int, artifacts: str) -> tuple[float, dict]:
    work = OUT / "runs" / name
    work.mkdir(parents=True, exist_ok=True)
    report = work / "report.json"
    cmd = [*bench.export_check_cmd(), "check", *model_command(name, count), "--artifacts", artifacts, "--no-cache", "-q",
           "--out", str(work / "out"), "--json", str(report)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode not in (0, 1):  # a failing row is a result; a crash or a usage error is not
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return seconds, json.loads(report.read_text())


def cell(row: dict) -> str:
    status = {"pass": "pass", "fail": "**fail**", "error": "**error**", "not-applicable": "N/A"}.get(row["status"], row["status"])
    relative = (row.get("metrics") or {}).get("relative_mae")
    return status if relative is None or row["status"] not in ("pass", "fail") else f"{status} {100 * relative:.2g}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    parser.add_argument("--artifacts", default="all", help="a group or a comma list of kinds (default: all)")
    parser.add_argument("--count", type=int, default=64, help="golden samples per model (not the recogniser's own set)")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    reports = {}
    for name in names:
        seconds, reports[name] = check(name, args.count, args.artifacts)
        print(f"{name}: {seconds:.1f} s", file=sys.stderr)
    (OUT / "matrix.json").write_text(json.dumps(reports, indent=1))  # first: a closed pipe below loses no measurement
    kinds = [r["name"] for r in next(iter(reports.values()))["rows"] if r["name"] != "eager"]
    print("| kind | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for kind in kinds:
        cells = [cell(next((r for r in reports[n]["rows"] if r["name"] == kind), {"status": "-"})) for n in names]
        print(f"| {kind} | " + " | ".join(cells) + " |")
    header = ["| kind | status | MAE | max err | rel. MAE | size | build s | ms/img |", "|---|---|---|---|---|---|---|---|"]
    for name in names:
        print(f"\n#### {name}\n")
        print("\n".join([*header, *kind_rows(reports[name])]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
